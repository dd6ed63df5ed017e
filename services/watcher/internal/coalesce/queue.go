// Package coalesce owns the per-subscriber queue of the watcher: a bounded FIFO
// of pending changes that merges changes to the same object (latest state wins,
// the old state stays the one the subscriber last received) and computes the
// resume revision a subscriber may continue from. It is plain Go with no locking;
// the caller serialises access. What the queue carries (O) is opaque to it: it
// holds pointers to object states and never looks inside them.
package coalesce

import (
	watcherv1 "github.com/ipledger/ipledger/proto/ipledger/watcher/v1"
)

// Change is one change offered to a subscriber's queue.
type Change[O any] struct {
	// Type is EVENT_TYPE_UPSERT or EVENT_TYPE_DELETE.
	Type watcherv1.EventType
	// Key identifies the object across its changes (kind, namespace and name).
	Key string
	// Revision is the store revision of the change.
	Revision uint64
	// Object is the new state (UPSERT) or the last state (DELETE).
	Object *O
	// Old is the state the subscriber holds before the change; nil when the
	// object is new to it. Ignored for DELETE, whose Object the subscriber holds.
	Old *O
}

// Event is what the subscriber is sent.
type Event[O any] struct {
	Type     watcherv1.EventType
	Revision uint64
	Object   *O
	Old      *O
	// ResumeRevision is the revision up to which every change has been handed
	// out once this event is delivered.
	ResumeRevision uint64
}

type entry[O any] struct {
	key string
	// sent is what the subscriber holds (nil: nothing), kept across merges.
	sent *O
	// latest is the newest state, or the last state when deleted.
	latest   *O
	deleted  bool
	firstRev uint64 // oldest change not yet sent
	rev      uint64 // newest change
	removed  bool   // popped; its slot in the FIFO is dead
}

// Queue is a bounded FIFO of distinct object keys. The zero value is not usable;
// call New.
type Queue[O any] struct {
	capacity int
	pending  map[string]*entry[O]
	fifo     []*entry[O] // entries in order of their first unsent change
	head     int
	lastRev  uint64 // highest revision offered, sent or filtered out
	pushed   uint64 // changes accepted (for the coalescing ratio)
	merged   uint64 // changes merged into a pending entry
}

// New returns a queue that holds at most capacity distinct pending objects.
func New[O any](capacity int, startRevision uint64) *Queue[O] {
	if capacity < 1 {
		capacity = 1
	}
	return &Queue[O]{capacity: capacity, pending: map[string]*entry[O]{}, lastRev: startRevision}
}

// Len is the number of distinct objects waiting to be sent.
func (q *Queue[O]) Len() int { return len(q.pending) }

// Merged is how many changes were folded into an already pending change.
func (q *Queue[O]) Merged() uint64 { return q.merged }

// Advance records that every change up to rev has been offered, for changes the
// subscriber's filter drops, so its resume revision keeps moving.
func (q *Queue[O]) Advance(rev uint64) {
	if rev > q.lastRev {
		q.lastRev = rev
	}
}

// Push offers a change. It merges the change into a pending change of the same
// key, else appends it; it returns false when that would exceed the capacity,
// in which case the queue is left unchanged and the subscriber must be dropped.
func (q *Queue[O]) Push(c Change[O]) bool {
	q.Advance(c.Revision)
	deleted := c.Type == watcherv1.EventType_EVENT_TYPE_DELETE
	if e, ok := q.pending[c.Key]; ok {
		e.latest, e.deleted, e.rev = c.Object, deleted, c.Revision
		q.pushed++
		q.merged++
		return true
	}
	if len(q.pending) >= q.capacity {
		return false
	}
	e := &entry[O]{key: c.Key, latest: c.Object, deleted: deleted, firstRev: c.Revision, rev: c.Revision}
	if deleted {
		e.sent = c.Object
	} else {
		e.sent = c.Old
	}
	q.pending[c.Key] = e
	q.fifo = append(q.fifo, e)
	q.pushed++
	return true
}

// Pop returns the oldest pending change as an event. Changes that cancel out
// (created and deleted before the subscriber saw the object) are skipped. ok is
// false when nothing is pending.
func (q *Queue[O]) Pop() (ev Event[O], ok bool) {
	for {
		e := q.popEntry()
		if e == nil {
			return Event[O]{}, false
		}
		if e.deleted && e.sent == nil {
			continue // never seen, already gone
		}
		ev = Event[O]{Revision: e.rev, Object: e.latest, ResumeRevision: q.ResumeRevision()}
		if e.deleted {
			ev.Type = watcherv1.EventType_EVENT_TYPE_DELETE
		} else {
			ev.Type = watcherv1.EventType_EVENT_TYPE_UPSERT
			ev.Old = e.sent
		}
		return ev, true
	}
}

// ResumeRevision is the revision up to which every offered change has left the
// queue: one less than the oldest unsent change, or the last offered revision.
func (q *Queue[O]) ResumeRevision() uint64 {
	q.skipDead()
	if q.head < len(q.fifo) {
		return q.fifo[q.head].firstRev - 1
	}
	return q.lastRev
}

func (q *Queue[O]) popEntry() *entry[O] {
	q.skipDead()
	if q.head >= len(q.fifo) {
		return nil
	}
	e := q.fifo[q.head]
	q.fifo[q.head] = nil
	q.head++
	delete(q.pending, e.key)
	e.removed = true
	q.compact()
	return e
}

func (q *Queue[O]) skipDead() {
	for q.head < len(q.fifo) && q.fifo[q.head].removed {
		q.fifo[q.head] = nil
		q.head++
	}
}

// compact drops the consumed prefix once it dominates the slice, so a
// long-lived queue does not grow without bound.
func (q *Queue[O]) compact() {
	if q.head == len(q.fifo) {
		q.fifo, q.head = q.fifo[:0], 0
		return
	}
	if q.head > 1024 && q.head*2 > len(q.fifo) {
		n := copy(q.fifo, q.fifo[q.head:])
		clear(q.fifo[n:])
		q.fifo, q.head = q.fifo[:n], 0
	}
}
