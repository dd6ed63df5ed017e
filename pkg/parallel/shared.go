package parallel

import (
	"context"
	"slices"
	"sync"
)

// Grants is the policy behind a Shared bound: which key's waiting call takes
// a free slot. It is plain Go (no clock, no goroutines); Shared calls it
// under its lock, so it need not be safe for concurrent use.
type Grants[K comparable] interface {
	// Enqueue: a call of k starts waiting.
	Enqueue(k K)
	// Dequeue: a waiting call of k gave up before it was granted.
	Dequeue(k K)
	// Release: a granted call of k ended.
	Release(k K)
	// Grant returns the key whose oldest waiting call runs now, if any, and
	// counts it as under way.
	Grant() (K, bool)
}

// Shared is a bound on the calls under way, shared among keys (tenants) as
// its Grants decide: endpoints' --probe-concurrency probe slots among
// namespaces (package probeslots). The calls of one key are granted first
// come first served.
type Shared[K comparable] struct {
	mu      sync.Mutex
	g       Grants[K]
	waiters map[K][]chan struct{} // by key, oldest first
}

// NewShared returns a Shared bound decided by g.
func NewShared[K comparable](g Grants[K]) *Shared[K] {
	return &Shared[K]{g: g, waiters: map[K][]chan struct{}{}}
}

// Update runs f, which changes the policy's inputs (a tenant's share), under
// the lock, then grants whatever the policy now allows.
func (s *Shared[K]) Update(f func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	f()
	s.dispatch()
}

// Acquire waits for a slot for a call of k; false when ctx ended first. A
// true Acquire is followed by one Release(k).
func (s *Shared[K]) Acquire(ctx context.Context, k K) bool {
	ch := make(chan struct{})
	s.mu.Lock()
	s.g.Enqueue(k)
	s.waiters[k] = append(s.waiters[k], ch)
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
		s.g.Release(k)
	default:
		s.waiters[k] = slices.DeleteFunc(s.waiters[k], func(c chan struct{}) bool { return c == ch })
		if len(s.waiters[k]) == 0 {
			delete(s.waiters, k)
		}
		s.g.Dequeue(k)
	}
	s.dispatch()
	return false
}

// Release gives back the slot of a call of k.
func (s *Shared[K]) Release(k K) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.g.Release(k)
	s.dispatch()
}

// dispatch wakes the calls the policy grants a slot; s.mu is held.
func (s *Shared[K]) dispatch() {
	for {
		k, ok := s.g.Grant()
		if !ok {
			return
		}
		q := s.waiters[k]
		close(q[0])
		if len(q) == 1 {
			delete(s.waiters, k)
		} else {
			s.waiters[k] = q[1:]
		}
	}
}
