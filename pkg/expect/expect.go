// Package expect is ipledger's one way of expecting its own writes: what
// this process just wrote, remembered per key until what it sees (the
// watcher stream, an eventually consistent cloud listing) shows the write,
// or until a deadline passes.
//
// A controller that reads its state from a view that lags behind the store
// must not act on a view older than its own last write: it would decide
// again, re-create what it just created or undo an update. A Set answers
// "is what I see now older than what I wrote?" and forgets a write once it
// is seen or once its deadline has passed. The deadline only bounds the
// waiting: the view brings every change unless an event is lost, and
// ipam's and endpoints' writes are conditional (resourceVersions,
// deterministic names), so dropping an old write never lets a stale view do
// harm. eipd's are not (EC2's CreateTags overwrites, and DescribeAddresses
// answers may be applied out of order): it keeps a claim EC2 shows (Shown)
// until its deadline.
//
// The meaning of "seen" is the caller's: ipam compares resourceVersions
// (Services), endpoints the UIDs and generations of EndpointSlices, eipd
// what DescribeAddresses lists. Each says it with a func returning a Seen.
// Every record lives for one leadership term: a new term starts empty.
//
// ipam's status expectations (two minutes, a constant), endpoints'
// --expectation-timeout and eipd's --ec2-consistency-timeout are each the
// timeout of a Set.
package expect

import (
	"iter"
	"time"
)

// Seen is how what the view shows of a key compares with the write
// recorded for it, as the func passed to Check judges it.
type Seen int

const (
	// Behind: the view is older than the write. Check keeps the record
	// and says so until the deadline, then forgets it.
	Behind Seen = iota
	// Shown: the view shows the write. Nothing is waited for, and the
	// record stays, deadline or not, until forgotten (its echo, a later
	// event of the same write, can still be recognised with Get).
	Shown
	// Done: the view shows the write or has moved past it, and the record
	// is of no more use: Check forgets it.
	Done
)

// Set remembers, per key, the last write this process made. It is not safe
// for concurrent use: its users hold their own lock (or use it from one
// goroutine), since they keep state of their own beside it.
type Set[K comparable, V any] struct {
	timeout time.Duration
	now     func() time.Time
	m       map[K]record[V]
}

type record[V any] struct {
	v        V
	deadline time.Time // zero: never expires
}

// New returns an empty Set whose writes are waited for at most timeout
// (none expires when timeout <= 0). now is the clock (nil: time.Now).
func New[K comparable, V any](timeout time.Duration, now func() time.Time) *Set[K, V] {
	if now == nil {
		now = time.Now
	}
	return &Set[K, V]{timeout: timeout, now: now, m: map[K]record[V]{}}
}

// Wrote records v as this process's write of k, replacing any earlier one;
// its deadline is timeout from now.
func (s *Set[K, V]) Wrote(k K, v V) {
	r := record[V]{v: v}
	if s.timeout > 0 {
		r.deadline = s.now().Add(s.timeout)
	}
	s.m[k] = r
}

// Check asks seen how the view compares with k's write and returns the
// write and true while the view is Behind it and its deadline has not
// passed: the caller must not trust the view for k (wait, or overlay the
// write on it). A write found Done, or Behind past its deadline, is
// forgotten. Without a write for k, seen is not called and Check returns
// false.
func (s *Set[K, V]) Check(k K, seen func(V) Seen) (V, bool) {
	r, ok := s.m[k]
	if !ok {
		var zero V
		return zero, false
	}
	switch seen(r.v) {
	case Behind:
		if !s.expired(r) {
			return r.v, true
		}
	case Shown:
		var zero V
		return zero, false
	}
	delete(s.m, k)
	var zero V
	return zero, false
}

// Get returns k's write, whether or not the view shows it and whether or
// not its deadline has passed, until it is forgotten.
func (s *Set[K, V]) Get(k K) (V, bool) {
	r, ok := s.m[k]
	return r.v, ok
}

// Expired reports whether k has a write whose deadline has passed.
func (s *Set[K, V]) Expired(k K) bool {
	r, ok := s.m[k]
	return ok && s.expired(r)
}

func (s *Set[K, V]) expired(r record[V]) bool {
	return !r.deadline.IsZero() && !s.now().Before(r.deadline)
}

// Forget drops k's write (it failed, or k is gone).
func (s *Set[K, V]) Forget(k K) { delete(s.m, k) }

// All yields every write, expired or not, in no particular order. Check
// and Forget may be called while iterating; a key written meanwhile may or
// may not be yielded.
func (s *Set[K, V]) All() iter.Seq2[K, V] {
	return func(yield func(K, V) bool) {
		for k, r := range s.m {
			if !yield(k, r.v) {
				return
			}
		}
	}
}

// Len returns how many writes are remembered.
func (s *Set[K, V]) Len() int { return len(s.m) }
