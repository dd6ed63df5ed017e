package prober

import (
	"context"
	"slices"
	"sync"

	"github.com/ipledger/ipledger/services/endpoints/internal/probeslots"
)

// slots are the --probe-concurrency probe slots, shared among namespaces as
// package probeslots decides: each due probe waits in its namespace's queue
// (first come first served within it) until the table grants its namespace
// a slot.
type slots struct {
	mu      sync.Mutex
	table   *probeslots.Table
	waiters map[string][]chan struct{} // by namespace, oldest first
}

func newSlots(limit int) *slots {
	return &slots{table: probeslots.New(limit), waiters: map[string][]chan struct{}{}}
}

// setWorkloads says how many probed workloads ns has: the shares follow.
func (s *slots) setWorkloads(ns string, n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.table.SetWorkloads(ns, n)
	s.dispatch()
}

// acquire waits for a slot for a probe of ns; false when ctx ended first.
// A true acquire is followed by one release(ns).
func (s *slots) acquire(ctx context.Context, ns string) bool {
	ch := make(chan struct{})
	s.mu.Lock()
	s.table.Enqueue(ns)
	s.waiters[ns] = append(s.waiters[ns], ch)
	s.dispatch()
	s.mu.Unlock()
	select {
	case <-ch:
		return true
	case <-ctx.Done():
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	select {
	case <-ch: // granted meanwhile: give it back
		s.table.Release(ns)
	default:
		s.waiters[ns] = slices.DeleteFunc(s.waiters[ns], func(c chan struct{}) bool { return c == ch })
		if len(s.waiters[ns]) == 0 {
			delete(s.waiters, ns)
		}
		s.table.Dequeue(ns)
	}
	s.dispatch()
	return false
}

// release gives back the slot of a probe of ns.
func (s *slots) release(ns string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.table.Release(ns)
	s.dispatch()
}

// dispatch wakes the probes the table grants a slot; s.mu is held.
func (s *slots) dispatch() {
	for {
		ns, ok := s.table.Grant()
		if !ok {
			return
		}
		q := s.waiters[ns]
		close(q[0])
		if len(q) == 1 {
			delete(s.waiters, ns)
		} else {
			s.waiters[ns] = q[1:]
		}
	}
}
