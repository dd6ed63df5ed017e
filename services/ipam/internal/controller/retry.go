package controller

import "time"

// The term loop's one retry policy, stated here once. Every requeue and
// timer of the loop comes back to it through markAfter (no other timer
// marks the dirty set or wakes the loop), and every delay comes from this
// file: per key, the consecutive failures of its work, and a backoff that
// doubles from the key's base with each failure up to its cap, forgotten
// on success. The keys are a Service's "namespace/name", finalizersKey
// and ledgerKey:
//
//	key                 what fails                                   backoff
//	a Service           confirming it is gone, writing its status    itemBackoff: 100 ms doubling, capped at 1 min
//	finalizersKey       the IPPools' finalizer patches (one key:     itemBackoff
//	                    one retry per pass, however many failed)
//	ledgerKey           opening the ledger (afterLedger)             ledgerBackoff: 1 s doubling, capped at 10 s;
//	                                                                 a corrupt ledger is read again at the cap
//
// What is not a failure waits a fixed pause: a Service the API server
// still shows, or whose write lost to a newer version, is decided again
// after recheckAfter; an IPPool status that changed only its counts is
// written poolplan.Interval after the last write; a failed commit reopens
// the ledger at once (afterLedger). Ledger.Commit retries nothing inside:
// its failures are the loop's to handle, here.
type backoff struct{ base, cap time.Duration }

var (
	// itemBackoff: a conflict clears at once, a refusal (RBAC, an
	// admission policy, an API server down) must not become a hot loop.
	itemBackoff = backoff{base: 100 * time.Millisecond, cap: time.Minute}
	// ledgerBackoff: reading the ledger again reads every shard and
	// rebuilds the allocator.
	ledgerBackoff = backoff{base: time.Second, cap: maxLedgerRetry}
)

const (
	// maxLedgerRetry caps the backoff of a ledger that cannot be read.
	maxLedgerRetry = 10 * time.Second
	// corruptRetry is how often a corrupt ledger is read again.
	corruptRetry = maxLedgerRetry
	// recheckAfter is when a Service is decided again after an answer that
	// is not a failure (still shown, a lost race with a newer version).
	recheckAfter = 2 * time.Second
)

// Keys of the retry policy besides the Services' (whose keys hold a "/").
const (
	finalizersKey = "IPPool finalizers"
	ledgerKey     = "ledger"
)

// after is the delay before the next attempt after failures consecutive
// failures (0 for none).
func (b backoff) after(failures int) time.Duration {
	if failures <= 0 {
		return 0
	}
	return min(b.base<<min(failures-1, 16), b.cap)
}

// backoffOf is the backoff of key.
func backoffOf(key string) backoff {
	if key == ledgerKey {
		return ledgerBackoff
	}
	return itemBackoff
}

// retries counts, per key, the consecutive failures (the policy above).
type retries map[string]int

// failed records a failure of key and returns the delay before it is tried
// again.
func (r retries) failed(key string) time.Duration {
	r[key]++
	return backoffOf(key).after(r[key])
}

// forget ends key's run of failures.
func (r retries) forget(key string) { delete(r, key) }
