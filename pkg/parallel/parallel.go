// Package parallel is ipledger's one way of fanning out: n calls, a bounded
// number of them under way at once. ipam's quorum GETs and status writes,
// the ledger's fence and eipd's live Node reads all use it.
package parallel

import "sync"

// Limit bounds the calls under way at once across every Run that shares it:
// ipam's status writes of two passes in flight together take one Limit of
// StatusWorkers.
type Limit struct{ slots chan struct{} }

// NewLimit is a Limit of n calls at once (at least one).
func NewLimit(n int) *Limit { return &Limit{slots: make(chan struct{}, max(n, 1))} }

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
