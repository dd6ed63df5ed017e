// Package store owns the watcher's versioned in-memory state of the world: the
// compact objects by kind and key, a revision that grows by one per change, the
// epoch naming this process's history, a bounded history of changes for
// resuming subscribers, and the subscriptions that changes are fanned out to.
//
// Objects are kept in their encoded form (see Object), one copy of each state
// shared by everything that holds it.
//
// Writers (informer callbacks) never block on a subscriber: a change is merged
// into each subscription's bounded coalescing queue under the store lock, and a
// subscription that overflows is marked and left for its stream to close.
package store

import (
	"bytes"
	"iter"
	"sync"

	"k8s.io/apimachinery/pkg/labels"

	watcherv1 "github.com/ipledger/ipledger/proto/ipledger/watcher/v1"
	"github.com/ipledger/ipledger/services/watcher/internal/coalesce"
)

// Change is one recorded change of the store.
type Change struct {
	Type     watcherv1.EventType
	Key      string
	Revision uint64
	Object   *Object // new state, or last state for DELETE
	Old      *Object // previous state for UPSERT; nil when created
}

// Store is the watcher's versioned state. Objects it holds or hands out are
// shared and must not be mutated.
type Store struct {
	epoch       string
	historySize int

	mu      sync.Mutex
	rev     uint64
	objects map[watcherv1.Kind]map[string]*Object
	history []Change // ring buffer of the last historySize changes
	histPos int      // next write position in history
	histLen int
	// histBytes is what the kept changes' objects weigh (changeBytes), kept
	// under histByteLimit (0: no limit) by forgetting the oldest first.
	histBytes, histByteLimit int
	subs                     map[*Subscription]struct{}
	// lists holds the objects of a kind as a list, made by the first
	// snapshot after a change of the kind and dropped at its next change, so
	// that subscribers starting at the same revision share one list instead
	// of holding 8 bytes per object each (and it pins no replaced state).
	lists map[watcherv1.Kind][]*Object
	onRev func(rev uint64, kind watcherv1.Kind, objects int)
}

// New returns an empty store for a process with the given epoch, keeping the
// last historySize changes for resuming subscribers.
func New(epoch string, historySize int) *Store {
	if historySize < 0 {
		historySize = 0
	}
	return &Store{
		epoch: epoch, historySize: historySize,
		objects: map[watcherv1.Kind]map[string]*Object{},
		history: make([]Change, historySize),
		subs:    map[*Subscription]struct{}{},
		lists:   map[watcherv1.Kind][]*Object{},
	}
}

// LimitHistoryBytes bounds the history by what its changes weigh as well as
// by their number: a change of a big object (an EndpointSlice, a Pod) holds
// kilobytes, and 50,000 of them would outweigh the store itself. The oldest
// changes are forgotten first; a subscriber resuming from before them gets a
// snapshot. 0 means no limit. Call before the store is used.
func (s *Store) LimitHistoryBytes(n int) { s.histByteLimit = max(n, 0) }

// changeBytes is what a change kept in the history holds: its object (the
// previous state is the previous change's, or the store's).
func changeBytes(c Change) int { return len(c.Object.wire) + len(c.Key) + 96 }

// OnChange sets a callback, run under the store lock after each change, for
// metrics. Call before the store is used.
func (s *Store) OnChange(fn func(rev uint64, kind watcherv1.Kind, objectsOfKind int)) { s.onRev = fn }

// Epoch names this process's history.
func (s *Store) Epoch() string { return s.epoch }

// Revision is the revision of the latest change.
func (s *Store) Revision() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.rev
}

// Len is the number of objects held.
func (s *Store) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, m := range s.objects {
		n += len(m)
	}
	return n
}

// Upsert stores obj. A state equal to the stored one is not a change: fields
// the compact form drops (status of a Pod's containers, managedFields) do not
// wake every subscriber.
func (s *Store) Upsert(obj *Object) {
	s.mu.Lock()
	defer s.mu.Unlock()
	m := s.objects[obj.kind]
	if m == nil {
		m = map[string]*Object{}
		s.objects[obj.kind] = m
	}
	old := m[obj.key]
	if old != nil && bytes.Equal(old.wire, obj.wire) {
		return
	}
	m[obj.key] = obj
	s.record(Change{Type: watcherv1.EventType_EVENT_TYPE_UPSERT, Key: obj.key, Object: obj, Old: old})
}

// Delete removes the object with obj's kind and key; obj is its last known
// state, used when the store does not hold a newer one.
func (s *Store) Delete(obj *Object) {
	s.mu.Lock()
	defer s.mu.Unlock()
	m := s.objects[obj.kind]
	old, ok := m[obj.key]
	if !ok {
		return
	}
	delete(m, obj.key)
	s.record(Change{Type: watcherv1.EventType_EVENT_TYPE_DELETE, Key: obj.key, Object: old})
}

func (s *Store) record(c Change) {
	s.rev++
	c.Revision = s.rev
	if s.historySize > 0 {
		if s.histLen == s.historySize {
			s.histBytes -= changeBytes(s.history[s.histPos])
		}
		s.history[s.histPos] = c
		s.histPos = (s.histPos + 1) % s.historySize
		s.histBytes += changeBytes(c)
		if s.histLen < s.historySize {
			s.histLen++
		}
		for s.histByteLimit > 0 && s.histBytes > s.histByteLimit && s.histLen > 1 {
			oldest := (s.histPos - s.histLen + s.historySize) % s.historySize
			s.histBytes -= changeBytes(s.history[oldest])
			s.history[oldest] = Change{}
			s.histLen--
		}
	}
	delete(s.lists, c.Object.kind)
	for sub := range s.subs {
		sub.offer(c)
	}
	if s.onRev != nil {
		s.onRev(s.rev, c.Object.kind, len(s.objects[c.Object.kind]))
	}
}

// Filter selects what a subscriber sees.
type Filter struct {
	Kinds map[watcherv1.Kind]bool
	// Namespaces restricts namespaced objects; empty means all. Cluster-scoped
	// objects (empty namespace) always pass.
	Namespaces map[string]bool
	// Selector matches labels; nil means everything.
	Selector labels.Selector
}

// Match reports whether o passes the filter.
func (f *Filter) Match(o *Object) bool {
	if !f.Kinds[o.kind] {
		return false
	}
	if ns := o.Namespace(); ns != "" && len(f.Namespaces) > 0 && !f.Namespaces[ns] {
		return false
	}
	return f.Selector == nil || f.Selector.Empty() || f.Selector.Matches(o.Labels())
}

// Subscribed is what Subscribe hands a new subscriber.
type Subscribed struct {
	Sub *Subscription
	// Snapshot holds every matching object at Revision, unless Resumed.
	Snapshot Snapshot
	// Revision is the store revision the subscription starts at.
	Revision uint64
	// Resumed is true when the subscription continues from the requested
	// resume point: the missed changes are already in its queue.
	Resumed bool
	// ResumeRevision is the requested revision when Resumed.
	ResumeRevision uint64
}

// Subscribe registers a subscriber. With a resume point of this epoch whose
// following changes are all still in the history (and fit the queue), the
// missed changes are queued and no snapshot is taken; otherwise Snapshot holds
// every matching object and deltas after Revision follow in the queue.
func (s *Store) Subscribe(f Filter, resume *watcherv1.ResumePoint, queueSize int) Subscribed {
	s.mu.Lock()
	defer s.mu.Unlock()
	if resume != nil && resume.GetEpoch() == s.epoch && resume.GetRevision() <= s.rev &&
		resume.GetRevision() >= s.rev-uint64(s.histLen) {
		sub := newSubscription(f, queueSize, resume.GetRevision())
		ok := true
		for i := s.histLen - int(s.rev-resume.GetRevision()); i < s.histLen && ok; i++ {
			c := s.history[(s.histPos-s.histLen+i+s.historySize)%s.historySize]
			ok = sub.offer(c)
		}
		if ok {
			s.subs[sub] = struct{}{}
			return Subscribed{Sub: sub, Revision: s.rev, Resumed: true, ResumeRevision: resume.GetRevision()}
		}
		// The missed changes do not fit the queue: a snapshot is cheaper.
	}
	sub := newSubscription(f, queueSize, s.rev)
	snap := Snapshot{filter: f}
	for kind := range f.Kinds {
		snap.lists = append(snap.lists, s.list(kind))
	}
	s.subs[sub] = struct{}{}
	return Subscribed{Sub: sub, Snapshot: snap, Revision: s.rev}
}

// list returns every object of kind, shared until the kind changes.
func (s *Store) list(kind watcherv1.Kind) []*Object {
	if l, ok := s.lists[kind]; ok {
		return l
	}
	l := make([]*Object, 0, len(s.objects[kind]))
	for _, o := range s.objects[kind] {
		l = append(l, o)
	}
	s.lists[kind] = l
	return l
}

// Snapshot is every object a subscriber's filter matches at one revision. Its
// lists (one per kind) are shared with the subscribers that took a snapshot
// at the same revision of the kind; the filter is applied as they are read.
type Snapshot struct {
	filter Filter
	lists  [][]*Object
}

// All yields the objects of the snapshot.
func (sn Snapshot) All() iter.Seq[*Object] {
	return func(yield func(*Object) bool) {
		for _, l := range sn.lists {
			for _, o := range l {
				if sn.filter.Match(o) && !yield(o) {
					return
				}
			}
		}
	}
}

// Candidates is how many objects All looks at (an upper bound of its count,
// for logs: counting the matches would read them all).
func (sn Snapshot) Candidates() int {
	n := 0
	for _, l := range sn.lists {
		n += len(l)
	}
	return n
}

// Unsubscribe stops offering changes to sub; idempotent.
func (s *Store) Unsubscribe(sub *Subscription) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.subs, sub)
}

// Subscribers is the number of registered subscriptions.
func (s *Store) Subscribers() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.subs)
}

// Subscription is one subscriber's queue of pending changes.
type Subscription struct {
	filter Filter

	mu         sync.Mutex
	q          *coalesce.Queue[Object]
	ready      chan struct{} // has a value while the queue may be non-empty
	overflow   chan struct{} // closed once the queue overflowed
	overflowed bool
}

func newSubscription(f Filter, queueSize int, rev uint64) *Subscription {
	return &Subscription{filter: f, q: coalesce.New[Object](queueSize, rev), ready: make(chan struct{}, 1), overflow: make(chan struct{})}
}

// offer filters c for the subscriber and queues it without blocking. A label
// change that moves an object in or out of the selector becomes an UPSERT of a
// new object or a DELETE. It returns false on overflow.
func (sub *Subscription) offer(c Change) bool {
	sub.mu.Lock()
	defer sub.mu.Unlock()
	if sub.overflowed {
		return false
	}
	var ok bool
	switch newMatch, oldMatch := sub.filter.Match(c.Object), c.Old != nil && sub.filter.Match(c.Old); {
	case c.Type == watcherv1.EventType_EVENT_TYPE_DELETE && newMatch:
		ok = sub.q.Push(coalesce.Change[Object]{Type: c.Type, Key: c.Key, Revision: c.Revision, Object: c.Object})
	case c.Type == watcherv1.EventType_EVENT_TYPE_UPSERT && newMatch && oldMatch:
		ok = sub.q.Push(coalesce.Change[Object]{Type: c.Type, Key: c.Key, Revision: c.Revision, Object: c.Object, Old: c.Old})
	case c.Type == watcherv1.EventType_EVENT_TYPE_UPSERT && newMatch:
		ok = sub.q.Push(coalesce.Change[Object]{Type: c.Type, Key: c.Key, Revision: c.Revision, Object: c.Object})
	case c.Type == watcherv1.EventType_EVENT_TYPE_UPSERT && oldMatch:
		ok = sub.q.Push(coalesce.Change[Object]{Type: watcherv1.EventType_EVENT_TYPE_DELETE, Key: c.Key, Revision: c.Revision, Object: c.Old})
	default:
		sub.q.Advance(c.Revision)
		return true
	}
	if !ok {
		sub.overflowed = true
		close(sub.overflow)
		return false
	}
	select {
	case sub.ready <- struct{}{}:
	default:
	}
	return true
}

// Ready has a value when events may be waiting; drain with Next until it
// reports none.
func (sub *Subscription) Ready() <-chan struct{} { return sub.ready }

// Overflowed is closed once the subscriber fell too far behind.
func (sub *Subscription) Overflowed() <-chan struct{} { return sub.overflow }

// Next pops the next event without blocking.
func (sub *Subscription) Next() (coalesce.Event[Object], bool) {
	sub.mu.Lock()
	defer sub.mu.Unlock()
	return sub.q.Pop()
}

// ResumeRevision is the revision up to which every change has been handed out.
func (sub *Subscription) ResumeRevision() uint64 {
	sub.mu.Lock()
	defer sub.mu.Unlock()
	return sub.q.ResumeRevision()
}

// Len is the number of distinct objects waiting.
func (sub *Subscription) Len() int {
	sub.mu.Lock()
	defer sub.mu.Unlock()
	return sub.q.Len()
}

// Merged is how many changes were coalesced into pending ones.
func (sub *Subscription) Merged() uint64 {
	sub.mu.Lock()
	defer sub.mu.Unlock()
	return sub.q.Merged()
}
