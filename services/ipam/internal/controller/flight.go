package controller

import (
	"context"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/ipledger/ipledger/pkg/expect"
	"github.com/ipledger/ipledger/pkg/parallel"
)

// expectationTimeout bounds how long a status this term wrote stands in
// for the streamed one (expectation) while the stream does not show it.
// The stream brings every version, so it only matters if one is lost, and
// every status write is conditional on the version it was decided on: a
// write from a stale view is refused, never applied. So it is a constant,
// not a flag: no deployment is safer or faster with another value.
const expectationTimeout = 2 * time.Minute

// expectations are what this term wrote to each Service (ownWrites.expect):
// pkg/expect, as endpoints and eipd expect their own writes.
type expectations = expect.Set[string, expectation]

func newExpectations() *expectations {
	return expect.New[string, expectation](expectationTimeout, nil)
}

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
	// held are the Services of writes marked dirty while in flight, with
	// their marks: they are marked again once the flight has landed.
	held marks
}

type writeResult struct {
	rv  string
	err error
}

// writesInFlight are a term's status writes under way: at most maxFlights
// passes' flights, at most one Limit of writes at once across them, and
// the Services they write. A Service with a write in flight is not decided
// again until its write has returned (hold): the decision would read a
// status the write is about to replace. Only the loop calls its methods.
type writesInFlight struct {
	limit   *parallel.Limit
	flights []*flight
	keys    map[string]struct{}
	held    marks
	// landed has a value when a flight finished since the loop last looked.
	landed chan struct{}
}

func newWritesInFlight(writers int) *writesInFlight {
	return &writesInFlight{limit: parallel.NewLimit(writers), keys: map[string]struct{}{}, held: marks{},
		landed: make(chan struct{}, 1)}
}

// launch starts writes, each by do, and returns at once with the flights
// that landed meanwhile (oldest first, to be settled): when maxFlights are
// under way it first waits for the oldest.
func (f *writesInFlight) launch(writes []*write, do func(*write) writeResult) (landed []*flight) {
	if len(writes) == 0 {
		return nil
	}
	for len(f.flights) >= maxFlights {
		<-f.flights[0].done
		landed = append(landed, f.land()...)
	}
	fl := &flight{writes: writes, results: make([]writeResult, len(writes)), done: make(chan struct{})}
	for _, wr := range writes {
		f.keys[wr.key] = struct{}{}
	}
	f.flights = append(f.flights, fl)
	go func() {
		f.limit.Run(len(writes), func(i int) { fl.results[i] = do(writes[i]) })
		close(fl.done)
		select {
		case f.landed <- struct{}{}:
		default:
		}
	}()
	return landed
}

// hold says whether key has a write in flight; if so, its mark (marks)
// is made again once that write has landed.
func (f *writesInFlight) hold(key, updateRV string) bool {
	if _, ok := f.keys[key]; !ok {
		return false
	}
	f.held.add(key, updateRV)
	return true
}

// land returns every flight that has finished, oldest first, up to the
// first one still under way; their Services are no longer in flight.
func (f *writesInFlight) land() []*flight {
	var out []*flight
	for len(f.flights) > 0 {
		select {
		case <-f.flights[0].done:
		default:
			return out
		}
		fl := f.flights[0]
		f.flights = f.flights[1:]
		for _, wr := range fl.writes {
			delete(f.keys, wr.key)
			if rv, ok := f.held[wr.key]; ok {
				delete(f.held, wr.key)
				if fl.held == nil {
					fl.held = marks{}
				}
				fl.held[wr.key] = rv
			}
		}
		out = append(out, fl)
	}
	return out
}

// landAll waits for every flight and returns them, oldest first: before
// the allocator is rebuilt from the ledger, nothing of the old one may
// still be written.
func (f *writesInFlight) landAll() []*flight {
	var out []*flight
	for len(f.flights) > 0 {
		<-f.flights[0].done
		out = append(out, f.land()...)
	}
	return out
}

// wait waits for the writes still under way when the term ends, so that
// none outlives the term's loop; their results are not settled.
func (f *writesInFlight) wait() {
	for _, fl := range f.flights {
		<-fl.done
	}
	f.flights = nil
}

// launch starts a pass's status writes (writesInFlight.launch) and
// settles the flights that landed meanwhile.
func (w *worker) launch(ctx context.Context, writes []*write) {
	w.settle(w.writes.launch(writes, func(wr *write) writeResult {
		rv, err := w.c.writeService(ctx, wr)
		w.c.metrics.statusWrites.WithLabelValues(writeOutcome(err)).Inc()
		return writeResult{rv: rv, err: err}
	})...)
}

// settle records what landed flights' writes did: the expectation of
// each write that landed (until the stream shows it), retries for the
// others, and a new pass for the Services that changed while their write
// was in flight.
func (w *worker) settle(flights ...*flight) {
	for _, f := range flights {
		w.settleFlight(f)
	}
}

func (w *worker) settleFlight(f *flight) {
	// After the expectations below: a held echo of a write is then known as one.
	defer w.dirty.remark(f.held)
	for i, wr := range f.writes {
		key, r := wr.key, f.results[i]
		switch {
		case r.err == nil:
			w.retries.forget(key)
			w.expect.Wrote(key, expectation{rv: r.rv, status: wr.want})
			if wr.decideAgain {
				w.mark(key)
			}
			if e := wr.event; e != nil {
				w.event(wr.ref, e.Type, e.Reason, e.Message)
				if wr.gateway != nil {
					w.event(wr.gateway, e.Type, e.Reason, fmt.Sprintf("Service %s: %s", key, e.Message))
				}
			}
		case apierrors.IsNotFound(r.err):
			w.mark(key) // gone: its delete releases it
		case apierrors.IsConflict(r.err):
			// Decided on a version that is no longer current: the stream
			// brings the new one, and the Service is decided again.
			w.requeue(key, false)
		default:
			w.log.Warn("Cannot write Service status; retrying", "service", key, "err", r.err)
			w.expect.Forget(key)
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
