package parallel

import (
	"context"
	"testing"
	"time"
)

// TryAcquire admits up to the limit without waiting and refuses beyond it;
// a released slot admits again.
func TestTryAcquire(t *testing.T) {
	for _, tc := range []struct{ limit, tries, admitted int }{
		{limit: 2, tries: 3, admitted: 2},
		{limit: 0, tries: 2, admitted: 1}, // at least one
		{limit: 5, tries: 4, admitted: 4},
	} {
		l := NewLimit(tc.limit)
		n := 0
		for range tc.tries {
			if l.TryAcquire() {
				n++
			}
		}
		if n != tc.admitted || l.Size() != max(tc.limit, 1) {
			t.Errorf("NewLimit(%d): %d of %d admitted, Size %d; want %d admitted", tc.limit, n, tc.tries, l.Size(), tc.admitted)
		}
		l.Release()
		if !l.TryAcquire() {
			t.Errorf("NewLimit(%d): a released slot does not admit", tc.limit)
		}
	}
}

// fifo is a Grants of n slots for every key together, in order of arrival
// across keys: the simplest policy, enough to test the mechanism.
type fifo struct {
	n, inflight int
	waiting     []string
}

func (f *fifo) Enqueue(k string) { f.waiting = append(f.waiting, k) }
func (f *fifo) Dequeue(k string) {
	for i, w := range f.waiting {
		if w == k {
			f.waiting = append(f.waiting[:i], f.waiting[i+1:]...)
			return
		}
	}
}
func (f *fifo) Release(string) { f.inflight-- }
func (f *fifo) Grant() (string, bool) {
	if f.inflight >= f.n || len(f.waiting) == 0 {
		return "", false
	}
	k := f.waiting[0]
	f.waiting = f.waiting[1:]
	f.inflight++
	return k, true
}

// A Shared bound grants what its policy allows, wakes a waiter when a slot
// frees or the policy changes, and a waiter whose context ends gives up its
// place without taking a slot.
func TestShared(t *testing.T) {
	f := &fifo{n: 1}
	s := NewShared[string](f)
	if !s.Acquire(context.Background(), "a") {
		t.Fatal("the first call waits with a free slot")
	}
	// A call whose context ends while it waits gives up its place.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if s.Acquire(ctx, "b") {
		t.Fatal("a call with an ended context was granted with no free slot")
	}
	if len(f.waiting) != 0 || f.inflight != 1 {
		t.Fatalf("after giving up: waiting %v, in flight %d; want none waiting, 1 in flight", f.waiting, f.inflight)
	}
	// A waiter is woken when the slot frees.
	got := make(chan bool)
	go func() { got <- s.Acquire(context.Background(), "c") }()
	waitFor(t, func() bool { s.mu.Lock(); defer s.mu.Unlock(); return len(f.waiting) == 1 })
	s.Release("a")
	if !<-got {
		t.Fatal("the waiter was not granted the freed slot")
	}
	// A waiter is woken when the policy grows.
	go func() { got <- s.Acquire(context.Background(), "d") }()
	waitFor(t, func() bool { s.mu.Lock(); defer s.mu.Unlock(); return len(f.waiting) == 1 })
	s.Update(func() { f.n = 2 })
	if !<-got {
		t.Fatal("the waiter was not granted the slot Update added")
	}
	if f.inflight != 2 {
		t.Fatalf("%d in flight, want 2", f.inflight)
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not reached in 5s")
		}
		time.Sleep(time.Millisecond)
	}
}
