package controller

import (
	"context"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
)

// maxFlights is how many passes' status writes may be under way at once.
// Two keep the API server busy: while one pass's writes drain, the next
// pass has been decided, committed to the ledger, and its writes take the
// writers as they free up. A third pass waits: decisions stay close to
// what the stream shows, and memory stays bounded.
const maxFlights = 2

// flight is one pass's status writes, launched once its ledger commit has
// succeeded (a status never shows an address the ledger does not hold)
// and written while the loop decides and commits the next batch. Only the
// loop reads the results, after done is closed.
type flight struct {
	writes  []*write
	results []writeResult
	done    chan struct{}
}

type writeResult struct {
	rv  string
	err error
}

// launch starts a pass's status writes on the term's writers (at most
// StatusWorkers at once across every flight) and returns at once. A
// Service with a write in flight is not decided again until its write
// has returned (take holds it back): the decision would read a status
// the write is about to replace.
func (w *worker) launch(ctx context.Context, writes []*write) {
	if len(writes) == 0 {
		return
	}
	for len(w.flights) >= maxFlights {
		<-w.flights[0].done
		w.landDone()
	}
	f := &flight{writes: writes, results: make([]writeResult, len(writes)), done: make(chan struct{})}
	for _, wr := range writes {
		w.inFlight[wr.key] = struct{}{}
	}
	w.flights = append(w.flights, f)
	go func() {
		w.writers.Run(len(writes), func(i int) {
			rv, err := w.c.writeService(ctx, writes[i])
			f.results[i] = writeResult{rv: rv, err: err}
			w.c.metrics.statusWrites.WithLabelValues(writeOutcome(err)).Inc()
		})
		close(f.done)
		select {
		case w.landed <- struct{}{}:
		default:
		}
	}()
}

// landDone settles every flight that has finished, oldest first, up to the
// first one still under way.
func (w *worker) landDone() {
	for len(w.flights) > 0 {
		select {
		case <-w.flights[0].done:
		default:
			return
		}
		f := w.flights[0]
		w.flights = w.flights[1:]
		w.settle(f)
	}
}

// landAll waits for every flight and settles it: before the allocator is
// rebuilt from the ledger, nothing of the old one may still be written.
func (w *worker) landAll() {
	for len(w.flights) > 0 {
		<-w.flights[0].done
		w.landDone()
	}
}

// waitFlights waits for the writes still under way when the term ends, so
// that none outlives the term's loop.
func (w *worker) waitFlights() {
	for _, f := range w.flights {
		<-f.done
	}
	w.flights = nil
}

// settle records what a flight's writes did: the expectation of each
// write that landed (until the stream shows it), retries for the others,
// and a new pass for the Services that changed while their write was in
// flight.
func (w *worker) settle(f *flight) {
	for i, wr := range f.writes {
		key, r := wr.key, f.results[i]
		delete(w.inFlight, key)
		if _, ok := w.held[key]; ok {
			delete(w.held, key)
			w.mark(key)
		}
		switch {
		case r.err == nil:
			delete(w.retries, key)
			w.expect[key] = expectation{rv: r.rv, status: wr.want, at: time.Now()}
			if wr.release || len(wr.want.Ingress) < len(wr.cur.Ingress) {
				// The status no longer shows the IPs: release them next.
				w.mark(key)
			}
			if e := wr.event; e != nil {
				w.event(wr.ref, e.Type, e.Reason, e.Message)
			}
		case apierrors.IsNotFound(r.err):
			w.mark(key) // gone: its delete releases it
		case apierrors.IsConflict(r.err):
			// Decided on a version that is no longer current: the stream
			// brings the new one, and the Service is decided again.
			w.requeue(key, false)
		default:
			w.log.Warn("Cannot write Service status; retrying", "service", key, "err", r.err)
			delete(w.expect, key)
			w.requeue(key, true)
		}
	}
}

// writeOutcome is the result label of a status write, counted as it
// returns.
func writeOutcome(err error) string {
	switch {
	case err == nil:
		return "ok"
	case apierrors.IsNotFound(err):
		return "notfound"
	case apierrors.IsConflict(err):
		return "conflict"
	}
	return "error"
}
