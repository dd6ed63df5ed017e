package controller

import (
	"sync"
)

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
