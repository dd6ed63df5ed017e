package controller

import (
	"sync"
	"time"
)

// queue is what a term's loop has to do, as client-go's rate-limited
// workqueue is a controller's: the Services marked dirty (and the rebuild's
// holders, verified once nothing else is), the failures by key that space
// their retries (retry.go), the timers that mark it later, the mutations
// asked over gRPC, and the Services waiting for an address. Handlers,
// retries and timers only mark the dirty set; everything else is the
// loop's alone.
type queue struct {
	dirty *dirtySet
	// verify are the Services the last rebuild found holding addresses,
	// in allocation order: decided again (a pool or spec may have changed
	// while no term ran) once nothing else is dirty, a batch at a time, so
	// that a restart over many Services serves new ones first.
	verify []string
	// retries are the consecutive failures by key (retry.go).
	retries retries
	// expiry fires when the next kept address's grace period ends.
	expiry *time.Timer
	// stopping is closed when the term stops: no timer marks after it.
	stopping  <-chan struct{}
	mutations chan mutation
	// pending are the Services waiting for an address, marked again when
	// one may have freed (plan.AfterCommit, a released reservation).
	pending map[string]pendingService
}

func newQueue(stopping <-chan struct{}) queue {
	return queue{
		dirty: newDirtySet(), retries: retries{}, stopping: stopping,
		mutations: make(chan mutation), pending: map[string]pendingService{},
	}
}

// mark marks keys dirty.
func (q *queue) mark(keys ...string) { q.dirty.mark(keys...) }

// requeue marks key dirty again: after its backoff when its work failed,
// else after recheckAfter (retry.go).
func (q *queue) requeue(key string, failed bool) {
	d := recheckAfter
	if failed {
		d = q.retries.failed(key)
	}
	q.markAfter(d, func() { q.mark(key) })
}

// markAfter calls mark (a mark of the dirty set) after d, unless the term
// has stopped by then: the one way a term's retries and timers come back to
// its loop.
func (q *queue) markAfter(d time.Duration, mark func()) *time.Timer {
	return time.AfterFunc(d, func() {
		select {
		case <-q.stopping:
		default:
			mark()
		}
	})
}

// dirtySet is the work handed to a term's loop: the Services to decide
// again, whether the IPPools changed (the allocator's pools are set again
// and every Service decided), whether an IPPool's status or finalizers must
// be written again (a pass, with no Service decided for it), and a wake-up. The
// stream's handlers, retries and timers mark it from their goroutines;
// only the loop takes from it.
type dirtySet struct {
	mu sync.Mutex
	// marks are the dirty Services (marks).
	marks      marks
	pools      bool
	poolWrites bool
	// expiry: a kept address's grace period ended (a pass frees it).
	expiry bool
	// wake has a value when something was marked since the loop last
	// looked; marks coalesce into one.
	wake chan struct{}
}

func newDirtySet() *dirtySet {
	return &dirtySet{marks: marks{}, wake: make(chan struct{}, 1)}
}

// marks are dirty Services by key, each with the resourceVersion of the
// update event of that Service that marked it when such an event is all
// that did, and "" when anything else did (an add, a delete, a pool or
// Namespace change, a retry). An update that is the echo of this term's
// own status write (worker.ownEcho) is not decided again: the Service is
// then the version the write was decided on plus the write, and deciding it
// would decide the same.
type marks map[string]string

// add records a mark of key: updateRV is the resourceVersion of the update
// event behind it, "" for any other cause. A key once marked for another
// cause stays so; a later update replaces an earlier one's version.
func (m marks) add(key, updateRV string) {
	if cur, ok := m[key]; ok && cur == "" {
		return
	}
	m[key] = updateRV
}

// mark makes the Services of keys dirty.
func (d *dirtySet) mark(keys ...string) {
	d.mu.Lock()
	for _, k := range keys {
		d.marks.add(k, "")
	}
	d.mu.Unlock()
	d.poke()
}

// markUpdate makes a Service dirty for an update event of it at rv.
func (d *dirtySet) markUpdate(key, rv string) {
	d.mu.Lock()
	d.marks.add(key, rv)
	d.mu.Unlock()
	d.poke()
}

// remark marks again what an earlier take handed out (marks.add for each).
func (d *dirtySet) remark(m marks) {
	if len(m) == 0 {
		return
	}
	d.mu.Lock()
	for k, rv := range m {
		d.marks.add(k, rv)
	}
	d.mu.Unlock()
	d.poke()
}

// markPools says the IPPools changed.
func (d *dirtySet) markPools() {
	d.mu.Lock()
	d.pools = true
	d.mu.Unlock()
	d.poke()
}

// markPoolWrites says an IPPool's status or finalizers must be written
// again.
func (d *dirtySet) markPoolWrites() {
	d.mu.Lock()
	d.poolWrites = true
	d.mu.Unlock()
	d.poke()
}

// markExpiry says a kept address's grace period ended.
func (d *dirtySet) markExpiry() {
	d.mu.Lock()
	d.expiry = true
	d.mu.Unlock()
	d.poke()
}

// poke wakes the loop without marking anything (a ledger to re-read).
func (d *dirtySet) poke() {
	select {
	case d.wake <- struct{}{}:
	default:
	}
}

// any says whether anything is marked.
func (d *dirtySet) any() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.marks) > 0 || d.pools || d.poolWrites || d.expiry
}

// takePools clears the pools flag and says whether it was set. A rebuild
// takes it before it reads the pools, never after: a pool event that lands
// while the rebuild runs must leave it set again.
func (d *dirtySet) takePools() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	was := d.pools
	d.pools = false
	return was
}

// taken is what one take emptied the set of.
type taken struct {
	marks marks
	// pools: the IPPools changed. poolWrites, expiry: a pass is due even
	// with no Service to decide (markPoolWrites, markExpiry).
	pools, poolWrites, expiry bool
}

// take empties the set and returns what it held.
func (d *dirtySet) take() taken {
	d.mu.Lock()
	defer d.mu.Unlock()
	t := taken{marks: d.marks, pools: d.pools, poolWrites: d.poolWrites, expiry: d.expiry}
	d.marks = marks{}
	d.pools, d.poolWrites, d.expiry = false, false, false
	return t
}
