// Package parallel is ipledger's one way of using more than one core or
// connection: n calls with a bounded number under way at once (ipam's
// quorum GETs and status writes, the ledger's fence, eipd's live Node
// reads), admission to a bound without waiting (Limit.TryAcquire: authz's
// token reviews, the gRPC servers' open streams), a bound shared among
// tenants by a policy (Shared: endpoints' probe slots), and a sequence
// computed ahead of its reader (Ahead: the stream store's decodes).
package parallel

import (
	"iter"
	"sync"
)

// Limit bounds the calls under way at once across every Run that shares it:
// ipam's status writes of two passes in flight together take one Limit of
// StatusWorkers.
type Limit struct{ slots chan struct{} }

// NewLimit is a Limit of n calls at once (at least one).
func NewLimit(n int) *Limit { return &Limit{slots: make(chan struct{}, max(n, 1))} }

// TryAcquire takes one of l's slots if one is free now, without waiting:
// admission, for a caller that refuses work beyond the bound rather than
// queue it (authz's token reviews, the gRPC servers' streams open without a
// token). A true TryAcquire is followed by one Release.
func (l *Limit) TryAcquire() bool {
	select {
	case l.slots <- struct{}{}:
		return true
	default:
		return false
	}
}

// Release gives back a slot that TryAcquire took.
func (l *Limit) Release() { <-l.slots }

// Size is how many calls l lets run at once.
func (l *Limit) Size() int { return cap(l.slots) }

// Run calls do(i) for every i < n, in order of i, each in a goroutine of
// its own once l has a free slot, and returns when every call has
// returned. do must be safe to call concurrently (write only out[i]).
func (l *Limit) Run(n int, do func(i int)) {
	var wg sync.WaitGroup
	for i := range n {
		l.slots <- struct{}{}
		wg.Go(func() {
			defer func() { <-l.slots }()
			do(i)
		})
	}
	wg.Wait()
}

// Each calls do(i) for every i < n, at most limit at a time, and returns
// when all have returned.
func Each(n, limit int, do func(i int)) { NewLimit(limit).Run(n, do) }

// EachErr is Each for calls that can fail: every call runs (one failing
// cancels nothing; pass a context for that), and the error is the first
// by index, so the same failures always give the same error.
func EachErr(n, limit int, do func(i int) error) error {
	errs := make([]error, n)
	Each(n, limit, func(i int) { errs[i] = do(i) })
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// Ahead yields f(x) for every x of in, in order, with f running in a
// goroutine of its own up to two chunks of chunk items ahead of the caller.
// A caller whose own work per item is about f's then takes about as long
// as the slower of the two instead of their sum: the store's decode of
// every Service beside ipam's rebuild reading them. Items are computed
// whether or not the caller reaches them: a caller that stops early waits
// for the chunk under way, and at most the rest of its own chunk and two
// more were computed for nothing. An input of at most one chunk is computed
// inline. f must be safe to call from another goroutine, and must not
// panic: a panic there ends the process, where the caller could recover.
func Ahead[T, U any](in []T, chunk int, f func(T) U) iter.Seq[U] {
	chunk = max(chunk, 1)
	return func(yield func(U) bool) {
		if len(in) <= chunk {
			for _, x := range in {
				if !yield(f(x)) {
					return
				}
			}
			return
		}
		chunks := make(chan []U, 1)
		stop, stopped := make(chan struct{}), make(chan struct{})
		defer func() {
			close(stop)
			<-stopped
		}()
		go func() {
			defer close(stopped)
			defer close(chunks)
			for start := 0; start < len(in); start += chunk {
				out := make([]U, min(chunk, len(in)-start))
				for i := range out {
					out[i] = f(in[start+i])
				}
				select {
				case chunks <- out:
				case <-stop:
					return
				}
			}
		}()
		for c := range chunks {
			for _, u := range c {
				if !yield(u) {
					return
				}
			}
		}
	}
}
