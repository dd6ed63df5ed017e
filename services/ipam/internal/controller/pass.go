package controller

import (
	"context"
	"slices"
	"strings"
	"time"

	"github.com/ipledger/ipledger/pkg/stream/objkey"
	watcherv1 "github.com/ipledger/ipledger/proto/ipledger/watcher/v1"
	"github.com/ipledger/ipledger/services/ipam/internal/history"
	"github.com/ipledger/ipledger/services/ipam/internal/ledger"
	"github.com/ipledger/ipledger/services/ipam/internal/objects"
	"github.com/ipledger/ipledger/services/ipam/internal/plan"
)

// A pass of a serving term: take a batch from the queue, gather its
// inputs, decide it (plan.Decide), commit the ledger, and launch the
// Services' status writes (flight.go) and the IPPools' (poolstatus.go).

// take returns up to n dirty Services in allocation order, and the dirty
// keys the stream does not show (first in that order: the stream gave them
// no creation time); the others stay dirty for the next pass. A Service
// with a status write in flight is held back until the write returns; one
// marked only by the echo of this term's write is dropped (ownEcho). The
// flags of the take come back as they were taken.
func (w *worker) take(n int) (present []*watcherv1.Object, absent []string, t taken) {
	t = w.dirty.take()
	// Top the batch up from the rebuild's holders (w.verify).
	for len(t.marks) < n && len(w.verify) > 0 {
		t.marks.add(w.verify[0], "")
		w.verify = w.verify[1:]
	}
	candidates := make([]aged, 0, len(t.marks))
	for k, updateRV := range t.marks {
		if w.writes.hold(k, updateRV) || updateRV != "" && w.ownEcho(k, updateRV) {
			continue
		}
		candidates = append(candidates, w.aged(k))
	}
	// Allocation order, read from the store's attribute; only the batch is
	// decoded.
	slices.SortFunc(candidates, compareAged)
	var rest []string
	for _, c := range candidates {
		if len(present) == n {
			rest = append(rest, c.key)
			continue
		}
		ns, name, _ := strings.Cut(c.key, "/")
		if obj, ok := w.store().Get(watcherv1.Kind_KIND_SERVICE, ns, name); ok {
			present = append(present, obj)
		} else {
			absent = append(absent, c.key)
		}
	}
	// An object may have changed since its attribute was read: the batch
	// is put in allocation order by the objects themselves.
	slices.SortFunc(present, objects.Less)
	slices.Sort(absent)
	if len(rest) > 0 {
		w.mark(rest...)
	}
	return present, absent, t
}

// ownEcho reports whether the update at rv that marked key is the echo of
// this term's own status write: the version that write produced, which is
// the version it was decided on plus the write (the write is conditional on
// that version), so deciding it again would decide the same. What else
// changes a decision marks the Service itself. Its expectation is done.
func (w *worker) ownEcho(key, rv string) bool {
	e, ok := w.expect.Get(key)
	if !ok || e.rv != rv {
		return false
	}
	w.expect.Forget(key)
	return true
}

// pass decides a batch (plan.Decide), commits the ledger once, then
// launches the statuses' writes, which run while the next pass decides and
// commits (flight.go).
func (w *worker) pass(ctx context.Context) {
	start := time.Now()
	present, absent, t := w.take(w.c.cfg.BatchSize)
	if len(present) == 0 && len(absent) == 0 && !t.pools && !t.poolWrites && !t.expiry {
		return // only echoes of this term's writes
	}
	if t.pools {
		w.setPools()
	}
	b := plan.Batch{
		Services: present, Current: map[string]plan.Status{}, Env: w.env(),
		Gone: w.confirmGone(ctx, absent), Absent: absent, Ledger: w.ldg.Entries(), Class: w.c.class(), Now: time.Now(),
		WriteKubeVIPAnnotation: w.c.cfg.WriteKubeVIPAnnotation,
	}
	current := make(map[string]svcStatus, len(present))
	for _, obj := range present {
		cur := w.current(obj)
		current[objkey.Of(obj)] = cur
		b.Current[objkey.Of(obj)] = cur.Status
	}
	p := plan.Decide(w.alloc, b)
	w.c.metrics.decided.Add(float64(len(present) + len(absent)))
	w.note(p)
	if !w.commit(ctx, p.Change) {
		return
	}
	w.mark(plan.AfterCommit(w.alloc, p, w.pending)...)

	writes := make([]*write, 0, len(p.Writes))
	for _, pw := range p.Writes {
		wr := &write{ref: serviceRef(pw.Service), key: pw.Key, cur: current[pw.Key], want: svcStatus{Status: pw.Want},
			decideAgain: pw.DecideAgain(current[pw.Key].Status), event: pw.Event}
		if pw.Event != nil {
			wr.gateway = w.gatewayRef(pw.Service)
		}
		writes = append(writes, wr)
	}
	w.launch(ctx, writes)
	w.scheduleExpiry()
	holders := w.holders()
	w.writePoolStatuses(ctx, holders)
	w.syncPoolFinalizers(ctx, holders)
	w.c.metrics.setPending(w.pending)
	w.c.metrics.passSeconds.Observe(time.Since(start).Seconds())
}

// note records what a plan decided before it is applied: the logs, the
// failure and allocation counts, and which Services wait for an address.
func (w *worker) note(p plan.Plan) {
	for _, u := range p.Unfit {
		w.log.Info("Service holds an address that no longer fits; clearing its status before releasing", "service", u.Service, "reason", u.Reason)
	}
	for _, r := range p.Failures {
		w.c.metrics.failures.WithLabelValues(string(r)).Inc()
	}
	if p.Allocated > 0 {
		w.c.metrics.allocations.Add(float64(p.Allocated))
	}
	w.noteKept(p)
	for _, k := range p.Settled {
		delete(w.pending, k)
	}
	for _, pd := range p.Pending {
		// A Service keeps the age it had when this term first saw it wait.
		if old, ok := w.pending[pd.Service]; ok {
			pd.Since = old.since
		}
		w.pending[pd.Service] = pendingService{since: pd.Since, reason: pd.Reason}
	}
}

// noteKept logs and counts what a plan did with kept addresses.
func (w *worker) noteKept(p plan.Plan) {
	m := w.c.metrics.kept
	m.WithLabelValues("kept").Add(float64(len(p.Keep)))
	m.WithLabelValues("returned").Add(float64(p.KeptReturned))
	m.WithLabelValues("requested").Add(float64(p.KeptRequested))
	m.WithLabelValues("taken").Add(float64(p.KeptTaken))
	m.WithLabelValues("expired").Add(float64(len(p.Expired)))
	for _, r := range p.Keep {
		w.log.Info("Keeping a released address for its Service", "ip", r.IP, "service", r.ForService, "until", w.alloc.KeptUntil(r).UTC())
	}
	for _, r := range p.Expired {
		w.log.Info("A kept address's grace period ended; it is free", "ip", r.IP, "keptFor", r.ForService)
	}
	if p.KeptTaken > 0 {
		w.log.Warn("Services took addresses kept for others: their pools had nothing else free", "count", p.KeptTaken)
	}
}

// scheduleExpiry marks the expiry when the first kept address's grace
// period ends (one timer, reset after every pass).
func (w *worker) scheduleExpiry() {
	if w.expiry != nil {
		w.expiry.Stop()
	}
	next, ok := w.alloc.NextKeptExpiry()
	if !ok {
		return
	}
	w.expiry = w.markAfter(time.Until(next), w.dirty.markExpiry)
}

// commit writes the pass's ledger change (one write per shard touched; the
// ledger's ByService follows). It reports false when the pass must stop: the
// ledger was fenced by a newer term, or must be read again.
func (w *worker) commit(ctx context.Context, change ledger.Change) bool {
	if change.Empty() {
		return true
	}
	if err := w.ldg.Commit(ctx, change); err != nil {
		// Some shards may be written and others not: start over from the
		// ledger as stored (fenced again under this same term), or stop
		// writing if a newer term fenced it.
		w.enter(err, false)
		return false
	}
	w.hist.Committed(change, time.Now(), history.IPAM)
	return true
}

// confirmGone returns the Services of absent that hold an address and that
// the API server confirms are gone (or being deleted): the worker asks,
// plan.ToConfirm and plan.ConfirmGone decide. The stream may lag behind a
// Service created a moment ago: the API server is asked before an address
// is given back. Services it still shows, or that it cannot answer for,
// are tried again later.
func (w *worker) confirmGone(ctx context.Context, absent []string) []string {
	ask, nothing := plan.ToConfirm(absent, func(key string) bool { return len(w.alloc.Allocations(key)) > 0 || w.ldg.Records(key) })
	for _, key := range nothing {
		w.expect.Forget(key)
	}
	if len(ask) == 0 {
		return nil
	}
	p := plan.ConfirmGone(askGone(ctx, w.c.client, ask))
	for _, key := range p.Gone {
		w.log.Info("Service is gone; releasing its addresses", "service", key)
		w.expect.Forget(key)
	}
	for _, a := range p.Failed {
		w.log.Warn("Cannot confirm that a Service is gone", "service", a.Key, "err", a.Err)
		w.requeue(a.Key, true)
	}
	for _, key := range p.Shown {
		w.requeue(key, false)
	}
	return p.Gone
}

// setPools applies a changed pool set and marks every Service.
func (w *worker) setPools() {
	pools, invalid := w.c.pools.Parse(w.store().List(watcherv1.Kind_KIND_IP_POOL))
	w.invalidPools = invalid
	for name, err := range invalid {
		w.log.Warn("IPPool spec is invalid and does not take effect", "pool", name, "err", err)
	}
	services := w.store().List(watcherv1.Kind_KIND_SERVICE)
	plan.SetPools(w.alloc, pools, services, w.env(), w.c.class())
	keys := make([]string, 0, len(services))
	for _, s := range services {
		keys = append(keys, objkey.Of(s))
	}
	w.mark(keys...)
}
