package stream

import (
	"container/heap"
	"time"

	watcherv1 "github.com/ipledger/ipledger/proto/ipledger/watcher/v1"
)

// lagGuard is what the client remembers so that failing over to a replica
// that is behind never takes a consumer back in time: per kind, the newest
// version the current replica has shown; the held objects a replica said
// were gone before showing it was past them (held back until it does, or
// until the grace ends); and, for the grace, the version of every object
// the client deleted. Only the goroutine handling events uses it.
type lagGuard struct {
	grace    time.Duration
	progress map[watcherv1.Kind]string

	held      map[objectRef]*heldBack
	byVersion map[watcherv1.Kind]*heldHeap // held back, oldest version first
	heldQ     []*heldBack                  // held back, in deadline order

	tombs map[objectRef]*tombstone
	tombQ []*tombstone // in expiry order
}

type heldBack struct {
	ref      objectRef
	version  string
	deadline time.Time
	index    int  // in byVersion[ref.kind]
	done     bool // released, confirmed or expired
}

type tombstone struct {
	ref     objectRef
	version string
	expires time.Time
	done    bool
}

func newLagGuard(grace time.Duration) *lagGuard {
	return &lagGuard{grace: grace, progress: map[watcherv1.Kind]string{}, held: map[objectRef]*heldBack{},
		byVersion: map[watcherv1.Kind]*heldHeap{}, tombs: map[objectRef]*tombstone{}}
}

// newReplica forgets what the previous stream showed: a fresh snapshot may
// come from a replica that is further behind.
func (g *lagGuard) newReplica() { g.progress = map[watcherv1.Kind]string{} }

// observe records that the current replica has shown version of kind.
func (g *lagGuard) observe(kind watcherv1.Kind, version string) {
	g.progress[kind] = newerVersion(g.progress[kind], version)
}

// holdBack starts holding back the deletion of ref, held at version, unless
// it is held back already (the first deadline stands: reconnecting does not
// extend the grace).
func (g *lagGuard) holdBack(ref objectRef, version string, now time.Time) {
	if g.held[ref] != nil {
		return
	}
	h := &heldBack{ref: ref, version: version, deadline: now.Add(g.grace)}
	g.held[ref] = h
	q := g.byVersion[ref.kind]
	if q == nil {
		q = &heldHeap{}
		g.byVersion[ref.kind] = q
	}
	heap.Push(q, h)
	g.heldQ = append(g.heldQ, h)
}

// release stops holding ref back: a replica showed it, or deleted it for good.
func (g *lagGuard) release(ref objectRef) {
	h := g.held[ref]
	if h == nil {
		return
	}
	heap.Remove(g.byVersion[ref.kind], h.index)
	g.finish(h)
}

func (g *lagGuard) finish(h *heldBack) {
	h.done = true
	delete(g.held, h.ref)
}

// confirmed returns the objects of kind held back at versions the current
// replica is now past: their absence is a deletion.
func (g *lagGuard) confirmed(kind watcherv1.Kind) []objectRef {
	q := g.byVersion[kind]
	var out []objectRef
	for q != nil && q.Len() > 0 {
		if c, ok := compareVersions((*q)[0].version, g.progress[kind]); !ok || c > 0 {
			break
		}
		h := heap.Pop(q).(*heldBack)
		g.finish(h)
		out = append(out, h.ref)
	}
	return out
}

// expired returns the objects held back past the grace: the replica is
// believed.
func (g *lagGuard) expired(now time.Time) []objectRef {
	var out []objectRef
	for len(g.heldQ) > 0 {
		h := g.heldQ[0]
		if !h.done {
			if h.deadline.After(now) {
				break
			}
			heap.Remove(g.byVersion[h.ref.kind], h.index)
			g.finish(h)
			out = append(out, h.ref)
		}
		g.heldQ[0] = nil
		g.heldQ = g.heldQ[1:]
	}
	return out
}

// heldBackCount is how many deletions are held back.
func (g *lagGuard) heldBackCount() int { return len(g.held) }

// tombstone remembers, for the grace, that ref was deleted at version.
func (g *lagGuard) tombstone(ref objectRef, version string, now time.Time) {
	if !wellFormed(version) {
		return
	}
	if t := g.tombs[ref]; t != nil {
		t.done = true
	}
	t := &tombstone{ref: ref, version: version, expires: now.Add(g.grace)}
	g.tombs[ref] = t
	g.tombQ = append(g.tombQ, t)
}

// tomb returns the version ref had when deleted, "" if none is remembered.
func (g *lagGuard) tomb(ref objectRef) string {
	if t := g.tombs[ref]; t != nil {
		return t.version
	}
	return ""
}

// forgetTomb drops ref's tombstone: a newer state of it arrived.
func (g *lagGuard) forgetTomb(ref objectRef) {
	if t := g.tombs[ref]; t != nil {
		t.done = true
		delete(g.tombs, ref)
	}
}

// expireTombs drops the tombstones older than the grace.
func (g *lagGuard) expireTombs(now time.Time) {
	for len(g.tombQ) > 0 {
		t := g.tombQ[0]
		if !t.done {
			if t.expires.After(now) {
				break
			}
			delete(g.tombs, t.ref)
		}
		g.tombQ[0] = nil
		g.tombQ = g.tombQ[1:]
	}
}

// heldHeap orders held-back deletions of one kind by version.
type heldHeap []*heldBack

func (q heldHeap) Len() int { return len(q) }
func (q heldHeap) Less(i, j int) bool {
	c, _ := compareVersions(q[i].version, q[j].version)
	return c < 0
}
func (q heldHeap) Swap(i, j int) {
	q[i], q[j] = q[j], q[i]
	q[i].index, q[j].index = i, j
}
func (q *heldHeap) Push(x any) {
	h := x.(*heldBack)
	h.index = len(*q)
	*q = append(*q, h)
}
func (q *heldHeap) Pop() any {
	old := *q
	h := old[len(old)-1]
	old[len(old)-1] = nil
	*q = old[:len(old)-1]
	return h
}
