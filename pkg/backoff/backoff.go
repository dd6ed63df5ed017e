// Package backoff is the one retry delay of ipledger's loops outside ipam's
// term: a first delay after a failure, doubled after each further failure in
// a row, never above a cap. Loops that wait themselves step apimachinery's
// wait.Backoff through Policy.Start; workqueues take client-go's controller
// rate limiter through Queue.
//
// The stream client's reconnects are the one documented variant: they draw
// their delay with equal jitter (Backoff.NextJittered), in [d/2, d] for the
// policy's delay d, so that the clients of a restarted watcher spread out and
// the documented bound on the delay holds. wait.Backoff's own jitter is
// added on top of its cap (up to 1.5× with a jitter of 0.5), which would break
// that bound, so it is drawn here around an unjittered step.
package backoff

import (
	"math"
	"math/rand/v2"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/util/workqueue"
)

// Policy is a retry policy: wait First after the first failure in a row,
// twice as long after each further one, never more than Max.
type Policy struct {
	First, Max time.Duration
}

// Delay is the wait after the failures-th failure in a row (0 for none).
func (p Policy) Delay(failures int) time.Duration {
	if failures < 1 {
		return 0
	}
	b := p.Start()
	d := b.Next()
	// Once at the cap, wait.Backoff returns it for ever: no need to step on.
	for i := 1; i < failures && d < p.Max; i++ {
		d = b.Next()
	}
	return d
}

// Start returns the state of one retry loop that follows p, before its first
// failure.
func (p Policy) Start() *Backoff {
	b := &Backoff{p: p}
	b.Reset()
	return b
}

// Backoff is the state of one retry loop: how many failures in a row it has
// seen. It is not safe for concurrent use; each loop keeps its own.
type Backoff struct {
	p Policy
	w wait.Backoff
}

// Next returns the wait after one more failure: the policy's First, then
// twice the wait before, up to its Max.
func (b *Backoff) Next() time.Duration { return b.w.Step() }

// NextJittered is Next drawn with equal jitter: a wait in [d/2, d] for the
// wait d that Next would return, so never above the policy's Max.
func (b *Backoff) NextJittered() time.Duration {
	d := b.Next()
	return d/2 + rand.N(d/2+1)
}

// Reset forgets the failures: the next wait is the policy's First again.
func (b *Backoff) Reset() {
	b.w = wait.Backoff{Duration: b.p.First, Factor: 2, Cap: b.p.Max, Steps: math.MaxInt32}
}

// Queue returns the rate limiter of a workqueue's retries (AddRateLimited):
// client-go's controller rate limiter — per item 5 ms doubling up to 1000 s,
// Forget starting an item over, and overall at most 10 retries a second
// (burst 100) — with every delay capped at max when max > 0, so that an item
// that failed however often is retried within max.
func Queue[T comparable](max time.Duration) workqueue.TypedRateLimiter[T] {
	return Capped(workqueue.DefaultTypedControllerRateLimiter[T](), max)
}

// Capped caps the delays of rl at max (none when max <= 0).
func Capped[T comparable](rl workqueue.TypedRateLimiter[T], max time.Duration) workqueue.TypedRateLimiter[T] {
	if max <= 0 {
		return rl
	}
	return capped[T]{TypedRateLimiter: rl, max: max}
}

type capped[T comparable] struct {
	workqueue.TypedRateLimiter[T]
	max time.Duration
}

func (l capped[T]) When(item T) time.Duration { return min(l.TypedRateLimiter.When(item), l.max) }
