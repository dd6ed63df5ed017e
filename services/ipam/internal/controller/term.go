package controller

import (
	"context"
	"errors"
	"time"

	"github.com/ipledger/ipledger/pkg/leader"
	"github.com/ipledger/ipledger/services/ipam/internal/history"
	"github.com/ipledger/ipledger/services/ipam/internal/ledger"
)

// afterLedger is the phase that an attempt to open the ledger or a commit
// leads to, and how long until the next attempt to open it (the loop's
// retry policy for ledgerKey, retry.go). failures counts the consecutive failed opens,
// this one included (0 after a failed commit: the ledger is re-read at
// once, since the failure may only be a conflict with a foreign write).
func afterLedger(err error, failures int) (phase, time.Duration) {
	var ce *ledger.CorruptError
	switch {
	case err == nil:
		return serving, 0
	case errors.Is(err, ledger.ErrFenced):
		return fenced, 0
	case errors.As(err, &ce):
		return corrupt, corruptRetry
	case failures == 0:
		return reopening, 0
	default:
		return reopening, ledgerBackoff.after(failures)
	}
}

// Run is the body of a term: sync, fence, rebuild, then batches until the
// term stops.
func (w *worker) Run(term *leader.Term) error {
	log := w.log
	ctx := term.StoppingContext()
	if err := w.c.source.WaitForSync(ctx); err != nil {
		return nil // the term ended before the stream synced
	}

	// Handlers only mark keys dirty; registering before the rebuild means
	// nothing that happens during it is missed, and the rebuild marks
	// every Service itself (no replay: it would decode every object).
	// The history is written beside the term, never in its loop: a slow
	// or failing history write delays no allocation.
	w.hist = history.Start(term.Context(), w.c.client, history.Options{
		Namespace: w.c.cfg.Namespace, Term: term.ID(), Retention: w.c.cfg.History, Log: w.log,
		Metrics: w.c.histM, Now: w.c.cfg.HistoryNow, WaitForBegin: true})
	// The writer reads the history and compares it with the ledger once
	// the term has decided every Service the rebuild marked (the loop
	// finds nothing ready: beginHistory), or historyBeginBound after the
	// term started if a storm of changes keeps it busy: that comparison
	// holds three maps of every address (and reads the sealed history
	// segments one at a time), and made during the first passes it adds to
	// the restart's peak at 10,000 Services (BENCHMARKS.md).
	begin := time.AfterFunc(historyBeginBound, w.hist.Begin)
	defer begin.Stop()
	reg := w.c.source.Follow(w.handler())
	defer w.c.source.RemoveHandler(reg)

	// Opening: until the ledger is read, fenced and rebuilt from, the term
	// neither decides nor takes mutations (it is not active yet).
	w.loop(ctx, term, func(p phase) bool { return p == serving || p == fenced })
	if w.phase != serving {
		<-term.Stopping() // fenced, or the term ended while opening
		return nil
	}
	log.Info("Term started: ledger fenced and allocations rebuilt",
		"services", w.ldg.ServiceCount(), "conflicts", len(w.conflicts))
	w.c.setActive(w)
	defer w.c.setActive(nil)
	defer w.c.metrics.forgetLeaderGauges()
	defer w.c.ledgerM.Forget()
	defer w.writes.wait()
	w.loop(term.Context(), term, func(phase) bool { return false })
	w.drainHistory(term.Context())
	w.release(term.Context())
	return nil
}

// enter moves the term to the phase that err (from opening the ledger or
// committing to it; nil for success) leads to, with what that phase needs:
// the retry time, the corrupt ledger reported, the log line.
func (w *worker) enter(err error, opened bool) {
	failures := 0
	switch {
	case err == nil:
		w.retries.forget(ledgerKey)
	case opened:
		w.retries[ledgerKey]++
		failures = w.retries[ledgerKey]
	}
	next, delay := afterLedger(err, failures)
	var ce *ledger.CorruptError
	switch next {
	case serving:
		if w.corrupt != nil {
			w.log.Info("The ledger is readable again; allocation resumes")
			w.corrupt = nil
		}
		w.c.metrics.ledgerCorrupt.Set(0)
	case fenced:
		w.log.Error("A newer term owns the ledger; this term writes nothing more", "err", err, "phase", w.phase)
		w.ldg = nil
	case corrupt:
		errors.As(err, &ce)
		w.ldg = nil
		w.reportCorrupt(ce)
	case reopening:
		w.ldg = nil
		w.log.Error("Cannot use the ledger; reading it again", "err", err, "phase", w.phase, "retryIn", delay)
	}
	w.phase, w.retryAt = next, time.Now().Add(delay)
	if delay > 0 {
		w.markAfter(delay, w.dirty.poke)
	}
}

// openLedger is the step of the opening, reopening and corrupt phases:
// once the retry time has come, wait for the status writes under way (they
// were decided on the ledger being replaced), then read and fence the
// ledger and rebuild the allocator.
func (w *worker) openLedger(ctx context.Context) {
	if time.Now().Before(w.retryAt) {
		return
	}
	w.settle(w.writes.landAll()...)
	w.enter(w.open(ctx), true)
}

// step does the one thing the phase calls for, if there is anything to do,
// after the pool statuses a phase transition owes.
func (w *worker) step(ctx context.Context) {
	if w.statusesOwed {
		w.statusesOwed = false
		w.writePoolStatuses(ctx, nil)
	}
	switch w.phase {
	case opening, reopening, corrupt:
		w.openLedger(ctx)
	case serving:
		if w.dirty.any() || len(w.verify) > 0 {
			w.pass(ctx)
		}
	case fenced:
	}
}

// ready reports whether step has work now (the loop then does not block).
func (w *worker) ready() bool {
	if w.statusesOwed {
		return true
	}
	switch w.phase {
	case opening, reopening, corrupt:
		return !time.Now().Before(w.retryAt)
	case serving:
		return w.dirty.any() || len(w.verify) > 0
	}
	return false
}

// closed is a channel that is always ready.
var closed = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

// loop runs steps under ctx until until(phase) or the term stops; between steps it serves one
// mutation (a reservation) if one is waiting, settles the status writes
// that landed, and blocks only when the phase has nothing to do.
func (w *worker) loop(ctx context.Context, term *leader.Term, until func(phase) bool) {
	for !until(w.phase) {
		var now <-chan struct{}
		if w.ready() {
			now = closed
		}
		select {
		case <-term.Stopping():
			return
		case m := <-w.mutations:
			m.reply <- w.apply(ctx, m)
		case <-w.dirty.wake:
		case <-w.writes.landed:
		case <-now:
		}
		w.settle(w.writes.land()...)
		w.step(ctx)
		w.beginHistory()
	}
}

// historyBeginBound is how long after a term's start its history writer
// begins at the latest (worker.Run).
const historyBeginBound = time.Minute

// beginHistory lets the term's history writer begin once the term serves
// and has nothing ready: the first passes over every Service are done.
func (w *worker) beginHistory() {
	if w.phase == serving && !w.ready() {
		w.hist.Begin()
	}
}
