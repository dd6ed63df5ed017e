package controller

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"time"

	"google.golang.org/protobuf/proto"
	corev1 "k8s.io/api/core/v1"

	"github.com/ipledger/ipledger/pkg/leader"
	"github.com/ipledger/ipledger/pkg/stream"
	"github.com/ipledger/ipledger/pkg/stream/objkey"
	watcherv1 "github.com/ipledger/ipledger/proto/ipledger/watcher/v1"
	"github.com/ipledger/ipledger/services/ipam/internal/allocator"
	"github.com/ipledger/ipledger/services/ipam/internal/history"
	"github.com/ipledger/ipledger/services/ipam/internal/ledger"
	"github.com/ipledger/ipledger/services/ipam/internal/objects"
	"github.com/ipledger/ipledger/services/ipam/internal/plan"
	"github.com/ipledger/ipledger/services/ipam/internal/poolplan"
)

// worker is one term's state. Only the loop goroutine touches the allocator,
// the ledger writer and the expectations; handlers only mark keys dirty.
type worker struct {
	c    *Controller
	term *leader.Term
	log  *slog.Logger

	ldg          *ledger.Ledger
	alloc        *allocator.Allocator
	invalidPools map[string]error
	conflicts    []plan.Conflict
	// lifecycle is the term's phase (term.go); w.ldg is set only while
	// serving.
	lifecycle

	// expect is what this term wrote to each Service, until the stream
	// shows it (a lagging stream must never make us decide again).
	expect *expectations
	// poolStatuses are the IPPool statuses this term wrote (poolstatus.go).
	poolStatuses poolStatusBook
	// retries are the consecutive failures by key (retry.go).
	retries retries
	pending map[string]pendingService

	// writes are the status writes under way (flight.go).
	writes *writesInFlight

	dirty *dirtySet
	// verify are the Services the last rebuild found holding addresses,
	// in allocation order: decided again (a pool or spec may have changed
	// while no term ran) once nothing else is dirty, a batch at a time, so
	// that a restart over many Services serves new ones first.
	verify    []string
	mutations chan mutation
	// expiry fires when the next kept address's grace period ends.
	expiry *time.Timer
	// hist writes the history of the term's changes (history.Writer);
	// opened is the ledger the last open read, handed to it.
	hist   *history.Writer
	opened ledger.State
}

func newWorker(c *Controller, term *leader.Term) *worker {
	return &worker{
		c: c, term: term, log: c.log.With("term", term.ID()),
		expect: newExpectations(), poolStatuses: poolStatusBook{written: map[string]poolplan.Written{}},
		retries: retries{}, pending: map[string]pendingService{},
		dirty: newDirtySet(), mutations: make(chan mutation),
		writes: newWritesInFlight(c.cfg.StatusWorkers),
	}
}

func (w *worker) store() *stream.Store { return w.c.source.Store() }

// handler only marks work; the loop does it.
func (w *worker) handler() stream.Handler {
	on := func(obj *watcherv1.Object) {
		switch obj.GetKind() {
		case watcherv1.Kind_KIND_SERVICE:
			w.mark(objkey.Of(obj))
		case watcherv1.Kind_KIND_IP_POOL:
			w.dirty.markPools()
		case watcherv1.Kind_KIND_NAMESPACE:
			for _, s := range w.store().ListNamespace(watcherv1.Kind_KIND_SERVICE, obj.GetMeta().GetName()) {
				w.mark(objkey.Of(s))
			}
		case watcherv1.Kind_KIND_GATEWAY:
			w.mark(w.servicesOfGateways(obj)...)
		case watcherv1.Kind_KIND_GATEWAY_CLASS:
			var gws []*watcherv1.Object
			for _, gw := range w.store().List(watcherv1.Kind_KIND_GATEWAY) {
				if gw.GetGateway().GetGatewayClassName() == obj.GetMeta().GetName() {
					gws = append(gws, gw)
				}
			}
			w.mark(w.servicesOfGateways(gws...)...)
		}
	}
	return stream.HandlerFuncs{
		AddFunc: on,
		UpdateFunc: func(o, n *watcherv1.Object) {
			// Every pass writes the pools' usage into their status: its
			// echo changes nothing the allocator reads, and must not make
			// every Service be decided again.
			// A Gateway's controller rewrites its status often; only its
			// class, addresses and annotations shape a request.
			if (n.GetKind() == watcherv1.Kind_KIND_GATEWAY || n.GetKind() == watcherv1.Kind_KIND_GATEWAY_CLASS) && !gatewayRequestChanged(o, n) {
				return
			}
			if n.GetKind() == watcherv1.Kind_KIND_IP_POOL && !poolSpecChanged(o, n) {
				if !slices.Equal(o.GetMeta().GetFinalizers(), n.GetMeta().GetFinalizers()) {
					w.dirty.markPoolWrites()
				}
				return
			}
			// A Service's update may be the echo of this term's own
			// status write: the pass tells (marks, worker.ownEcho).
			if n.GetKind() == watcherv1.Kind_KIND_SERVICE {
				w.dirty.markUpdate(objkey.Of(n), n.GetMeta().GetResourceVersion())
				return
			}
			on(n)
		},
		DeleteFunc: on,
	}
}

// poolSpecChanged reports whether an IPPool update changes what the
// allocator reads (objects.PoolSpec): anything but the status and the
// finalizers.
func poolSpecChanged(o, n *watcherv1.Object) bool {
	om, nm := o.GetMeta(), n.GetMeta()
	if o.GetIpPool() == nil || n.GetIpPool() == nil || om.GetName() != nm.GetName() || om.GetUid() != nm.GetUid() ||
		om.GetCreationTimestamp() != nm.GetCreationTimestamp() || om.GetDeletionTimestamp() != nm.GetDeletionTimestamp() {
		return true
	}
	a, b := proto.Clone(o.GetIpPool()).(*watcherv1.IPPool), proto.Clone(n.GetIpPool()).(*watcherv1.IPPool)
	a.Conditions, b.Conditions = nil, nil
	return !proto.Equal(a, b)
}

// gatewayRequestChanged reports whether a Gateway or GatewayClass update
// changes what its Services ask for (objects.Request): the streamed body
// (class name, addresses; controller name) or the annotations.
func gatewayRequestChanged(o, n *watcherv1.Object) bool {
	return !proto.Equal(o.GetGateway(), n.GetGateway()) || !proto.Equal(o.GetGatewayClass(), n.GetGatewayClass()) ||
		!maps.Equal(o.GetMeta().GetAnnotations(), n.GetMeta().GetAnnotations())
}

func (w *worker) mark(keys ...string) { w.dirty.mark(keys...) }

// servicesOfGateways are the keys of the Services serving gws: those of
// each Gateway's namespace and of the --gateway-service-namespaces that
// link to it (objects.LinkedGateway).
func (w *worker) servicesOfGateways(gws ...*watcherv1.Object) []string {
	want := map[string]bool{}
	namespaces := slices.Clone(w.c.cfg.GatewayServiceNamespaces)
	for _, gw := range gws {
		want[objkey.Of(gw)] = true
		if !slices.Contains(namespaces, gw.GetMeta().GetNamespace()) {
			namespaces = append(namespaces, gw.GetMeta().GetNamespace())
		}
	}
	var keys []string
	for _, ns := range namespaces {
		for _, s := range w.store().ListNamespace(watcherv1.Kind_KIND_SERVICE, ns) {
			if link, ok, _ := objects.LinkedGateway(s, w.c.cfg.GatewayServiceNamespaces); ok && want[link.Key()] {
				keys = append(keys, objkey.Of(s))
			}
		}
	}
	return keys
}

// requeue marks key dirty again: after its backoff when its work failed,
// else after recheckAfter (retry.go).
func (w *worker) requeue(key string, failed bool) {
	d := recheckAfter
	if failed {
		d = w.retries.failed(key)
	}
	w.markAfter(d, func() { w.mark(key) })
}

// markAfter calls mark (a mark of the dirty set) after d, unless the term
// has stopped by then: the one way a term's retries and timers come back to
// its loop.
func (w *worker) markAfter(d time.Duration, mark func()) *time.Timer {
	return time.AfterFunc(d, func() {
		select {
		case <-w.term.Stopping():
		default:
			mark()
		}
	})
}

// open fences the ledger and rebuilds every allocation from it, the pools
// and the Services, before anything is allocated. The allocator is rebuilt,
// and the suspect entries are asked about, while the shards after the head
// are fenced (ledger.Opener): nothing is acted on until they are, and an
// attempt another writer got in on is rebuilt again from the next read.
func (w *worker) open(ctx context.Context) error {
	o := ledger.NewOpener(w.c.client, ledger.Options{
		Namespace: w.c.cfg.Namespace, Term: w.term.ID(), ShardLimit: w.c.cfg.ShardLimit,
		Metrics: w.c.ledgerM, Log: w.log, Holds: w.term.Holds,
	})
	for o.Next(ctx) {
		w.ldg = o.Ledger()
		if overruled := w.overrule(ctx, w.rebuild(nil)); len(overruled) > 0 {
			w.rebuild(overruled)
		}
	}
	l, err := o.Ledger(), o.Err()
	if err != nil {
		return err
	}
	w.ldg = l
	w.hist.Opened(w.opened, l.Epoch(), len(l.ForeignWrites()) > 0)
	w.opened = ledger.State{}
	for _, f := range l.ForeignWrites() {
		w.event(configMapRef(w.c.cfg.Namespace, f.Shard), "Warning", "LedgerForeignWrite", fmt.Sprintf(
			"Written by %q at %s, not by ipam; ipam obeys its entries only where the Services' statuses do not contradict them. "+
				"Only ipam and the break-glass group may write the ledger (docs/security.md)", f.Manager, f.At.UTC().Format(time.RFC3339)))
	}
	for _, cf := range w.conflicts {
		w.log.Warn("Conflicting claim to an IP", "service", cf.Service, "ip", addrs(cf.IPs), "source", string(cf.Source), "reason", cf.Message)
		if ns, name, ok := strings.Cut(cf.Service, "/"); ok {
			if obj, ok := w.store().Get(watcherv1.Kind_KIND_SERVICE, ns, name); ok {
				w.event(serviceRef(obj), "Warning", "IPConflict",
					fmt.Sprintf("The %s of this Service names %s, which is already held: %s", cf.Source, addrs(cf.IPs), cf.Message))
			}
		}
	}
	return nil
}

// release ends the term's ledger writing. A term that stopped gracefully
// (its context still live: the process is shutting down) says on the
// ledger's head that every write of it was answered, if that is so, and the
// next term fences the head alone instead of every shard (ledger.Release).
// A term that lost its Lease says nothing, nor does one that holds no open
// ledger (fenced, corrupt, reopening): the next one fences every shard.
func (w *worker) release(ctx context.Context) {
	if ctx.Err() != nil || w.phase != serving || w.ldg == nil {
		return
	}
	start := time.Now()
	if err := w.ldg.Release(ctx); err != nil {
		w.log.Info("Stopped without releasing the ledger cleanly; the next term fences every shard", "reason", err)
		return
	}
	w.log.Info("Released the ledger cleanly; the next term fences its head only", "epoch", w.ldg.Epoch(), "took", time.Since(start))
}

// overrule asks the API server about each ledger entry the stream's
// statuses contradict (plan.Suspect) and returns those plan.Overrule
// decides to overrule, with their Events.
func (w *worker) overrule(ctx context.Context, suspects []plan.Suspect) []ledger.Allocation {
	p := plan.Overrule(checkSuspects(ctx, w.c.client, suspects))
	for _, c := range p.Unchecked {
		w.log.Warn("Cannot confirm a ledger entry the statuses contradict; it is obeyed", "ip", c.Entry.IP.String(), "service", c.Entry.Service.Key(), "err", c.Err)
	}
	for _, o := range p.Overrule {
		w.c.metrics.ledgerOverruled.Inc()
		w.log.Warn("A ledger entry contradicts the Services' statuses and is not obeyed", "ip", o.Entry.IP.String(), "service", o.Entry.Service.Key(), "shownBy", o.Shows)
		w.event(configMapRef(w.c.cfg.Namespace, ledger.HeadName), "Warning", "LedgerEntryOverruled", o.Message)
	}
	return p.Entries()
}

// rebuild resets the allocator from the ledger writer's state and the
// stream, leaving out the overruled ledger entries, and marks every
// Service for a pass. It returns the entries the statuses contradict.
func (w *worker) rebuild(overruled []ledger.Allocation) []plan.Suspect {
	// Clear the flag before reading the pools, never after: a pool event
	// that lands while the rebuild runs must leave it set, or that pool
	// would be ignored until the next pool change (seen in e2e: a pool
	// created during a slow rebuild served nothing).
	w.dirty.takePools()
	st := w.ldg.State()
	w.opened = st
	pools, invalid := w.c.pools.Parse(w.store().List(watcherv1.Kind_KIND_IP_POOL))
	// Every Service is decided again: those the rebuild reads, those a
	// handler adds meanwhile (it marks them itself), and those only the
	// ledger names. Those the stream shows holding addresses are verified
	// after the others (w.verify).
	var keys []string
	services := func(yield func(*watcherv1.Object) bool) {
		for obj := range w.store().All(watcherv1.Kind_KIND_SERVICE) {
			keys = append(keys, objkey.Of(obj))
			if !yield(obj) {
				return
			}
		}
	}
	r := plan.Rebuild(plan.Inputs{Ledger: st, Pools: pools, Services: services, ServiceCount: w.store().Len(watcherv1.Kind_KIND_SERVICE),
		Env: w.env(), LBClass: w.c.cfg.LBClass,
		RequireLBClass: w.c.cfg.RequireLBClass, Overruled: overruled})
	w.alloc, w.invalidPools, w.conflicts = r.Alloc, invalid, r.Conflicts
	keys = append(keys, w.ldg.Services()...)
	// A Service the stream does not show is not verified later: if it is
	// gone, the addresses it frees may be what a pending Service needs.
	first, verify := splitHolders(keys, func(k string) bool {
		_, shown := w.store().Attribute(watcherv1.Kind_KIND_SERVICE, attrCreated, k)
		return shown && len(w.alloc.Allocations(k)) > 0
	})
	w.mark(first...)
	w.verify = w.inAllocationOrder(verify)
	clear(w.poolStatuses.written)
	return r.Suspects
}

// splitHolders splits keys (without repeats) into those that hold no
// address (holds false) and those that do.
func splitHolders(keys []string, holds func(string) bool) (none, holding []string) {
	seen := make(map[string]bool, len(keys))
	for _, k := range keys {
		if seen[k] {
			continue
		}
		seen[k] = true
		if holds(k) {
			holding = append(holding, k)
		} else {
			none = append(none, k)
		}
	}
	return none, holding
}

// inAllocationOrder sorts keys in allocation order (objects.Less: oldest
// first, then by key) by the store's creation-time attribute, keys the
// stream does not show first.
func (w *worker) inAllocationOrder(keys []string) []string {
	cs := make([]aged, len(keys))
	for i, k := range keys {
		cs[i] = w.aged(k)
	}
	slices.SortFunc(cs, compareAged)
	for i, c := range cs {
		keys[i] = c.key
	}
	return keys
}

// aged is a Service's key and its creation time as the store's attribute
// has it: 0 when the stream does not show the Service (gone, or never seen).
type aged struct {
	key     string
	created int64
}

func (w *worker) aged(key string) aged {
	created, _ := w.store().Attribute(watcherv1.Kind_KIND_SERVICE, attrCreated, key)
	ts, _ := created.(int64)
	return aged{key, ts}
}

// compareAged is allocation order (objects.Less) by the attribute.
func compareAged(a, b aged) int { return objects.CompareByAge(a.created, a.key, b.created, b.key) }

// reportCorrupt stops allocation with an Event on the shard, and owes a
// condition on every pool (the loop's next step writes it). The shard
// itself is never touched.
func (w *worker) reportCorrupt(ce *ledger.CorruptError) {
	first := w.corrupt == nil || w.corrupt.Error() != ce.Error()
	w.corrupt = ce
	w.c.metrics.ledgerCorrupt.Set(1)
	if first {
		w.log.Error("The ledger cannot be read; no address is allocated until it is repaired", "configMap", ce.Shard, "err", ce.Err)
		w.event(configMapRef(w.c.cfg.Namespace, ce.Shard), "Warning", "LedgerCorrupt", ce.Error())
	}
	w.statusesOwed = true
}

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

// write is one Service's write of a pass: status and allocated-from-pool
// annotation in one status-subresource patch.
type write struct {
	// ref names the Service (and the version decided on, for its Event).
	// A write outlives its pass, and two passes' writes may be under way:
	// keeping the decoded Service instead kept two batches of them alive.
	ref  *corev1.ObjectReference
	key  string
	cur  svcStatus
	want svcStatus
	// decideAgain: once written, the Service is decided again (its
	// addresses are released once the status no longer shows them;
	// plan.Write.DecideAgain).
	decideAgain bool
	event       *plan.Event
	// gateway names the Gateway the Service serves, which is told event too
	// (its controller owns its status; ipam writes only Events on it).
	gateway *corev1.ObjectReference
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

// confirmGoneWorkers bounds the concurrent GETs that confirm a Service is
// gone.
const confirmGoneWorkers = 8

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

// env finds, in the stream, what requests depend on besides the Services:
// a new one for each decision (objects.Memo).
func (w *worker) env() objects.Env {
	return objects.Env{Objects: objects.Memo(w.store()), GatewayServiceNamespaces: w.c.cfg.GatewayServiceNamespaces}
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
