package controller

import (
	"maps"
	"slices"
	"sync"
)

// dirtySet is the work handed to a term's loop: the Services to decide
// again, whether the IPPools changed (the allocator's pools are set again
// and every Service decided), whether an IPPool's status or finalizers must
// be written again (a pass, with no Service decided for it), and a wake-up. The
// stream's handlers, retries and timers mark it from their goroutines;
// only the loop takes from it.
type dirtySet struct {
	mu         sync.Mutex
	keys       map[string]struct{}
	pools      bool
	poolWrites bool
	// expiry: a kept address's grace period ended (a pass frees it).
	expiry bool
	// wake has a value when something was marked since the loop last
	// looked; marks coalesce into one.
	wake chan struct{}
}

func newDirtySet() *dirtySet {
	return &dirtySet{keys: map[string]struct{}{}, wake: make(chan struct{}, 1)}
}

// mark makes the Services of keys dirty.
func (d *dirtySet) mark(keys ...string) {
	d.mu.Lock()
	for _, k := range keys {
		d.keys[k] = struct{}{}
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
	return len(d.keys) > 0 || d.pools || d.poolWrites || d.expiry
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

// take empties the set: the dirty keys (in no order), whether the pools
// changed; the pool-writes and expiry flags are cleared too, as every pass
// checks them.
func (d *dirtySet) take() (keys []string, pools bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	keys = slices.Collect(maps.Keys(d.keys))
	clear(d.keys)
	pools, d.pools, d.poolWrites, d.expiry = d.pools, false, false, false
	return keys, pools
}
