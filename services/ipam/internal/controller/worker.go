package controller

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"google.golang.org/protobuf/proto"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ipledger/ipledger/pkg/leader"
	"github.com/ipledger/ipledger/pkg/stream"
	watcherv1 "github.com/ipledger/ipledger/proto/ipledger/watcher/v1"
	"github.com/ipledger/ipledger/services/ipam/internal/allocator"
	"github.com/ipledger/ipledger/services/ipam/internal/ledger"
	"github.com/ipledger/ipledger/services/ipam/internal/objects"
)

// worker is one term's state. Only the loop goroutine touches the allocator,
// the ledger writer and the expectations; handlers only mark keys dirty.
type worker struct {
	c    *Controller
	term *leader.Term
	log  *slog.Logger

	ldg          *ledger.Ledger
	alloc        *allocator.Allocator
	ledgerBySvc  map[string][]ledger.Allocation
	invalidPools map[string]error
	conflicts    []Conflict
	corrupt      *ledger.CorruptError
	fenced       bool
	reopenAt     time.Time // when w.ldg is nil: the next attempt to re-read it

	// expect is what this term wrote to each Service, until the stream
	// shows it (a lagging stream must never make us decide again).
	expect      map[string]expectation
	poolWritten map[string]string // pool -> the status patch last written
	retries     map[string]int
	pending     map[string]pendingService

	mu         sync.Mutex
	dirty      map[string]struct{}
	poolsDirty bool
	// finalizersDirty: an IPPool's finalizers changed; a pass re-checks them
	// without deciding any Service again.
	finalizersDirty bool
	// finalizerBackoff is the delay before the next retry of a failed
	// finalizer patch (0 after a success).
	finalizerBackoff time.Duration
	wake             chan struct{}
	mutations        chan mutation
}

func newWorker(c *Controller, term *leader.Term) *worker {
	return &worker{
		c: c, term: term, log: c.log.With("term", term.ID()),
		expect: map[string]expectation{}, poolWritten: map[string]string{},
		retries: map[string]int{}, pending: map[string]pendingService{},
		dirty: map[string]struct{}{}, wake: make(chan struct{}, 1), mutations: make(chan mutation),
	}
}

func (w *worker) store() *stream.Store { return w.c.source.Store() }

// handler only marks work; the loop does it.
func (w *worker) handler() stream.Handler {
	on := func(obj *watcherv1.Object) {
		switch obj.GetKind() {
		case watcherv1.Kind_KIND_SERVICE:
			w.mark(objects.Key(obj))
		case watcherv1.Kind_KIND_IP_POOL:
			w.mu.Lock()
			w.poolsDirty = true
			w.mu.Unlock()
			w.poke()
		case watcherv1.Kind_KIND_NAMESPACE:
			for _, s := range w.store().ListNamespace(watcherv1.Kind_KIND_SERVICE, obj.GetMeta().GetName()) {
				w.mark(objects.Key(s))
			}
		}
	}
	return stream.HandlerFuncs{
		AddFunc: on,
		UpdateFunc: func(o, n *watcherv1.Object) {
			// Every pass writes the pools' usage into their status: its
			// echo changes nothing the allocator reads, and must not make
			// every Service be decided again.
			if n.GetKind() == watcherv1.Kind_KIND_IP_POOL && !poolSpecChanged(o, n) {
				if !slices.Equal(o.GetMeta().GetFinalizers(), n.GetMeta().GetFinalizers()) {
					w.mu.Lock()
					w.finalizersDirty = true
					w.mu.Unlock()
					w.poke()
				}
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

func (w *worker) mark(keys ...string) {
	w.mu.Lock()
	for _, k := range keys {
		w.dirty[k] = struct{}{}
	}
	w.mu.Unlock()
	w.poke()
}

func (w *worker) poke() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// requeue marks key dirty again after a backoff that grows with failures.
func (w *worker) requeue(key string, failed bool) {
	d := 2 * time.Second
	if failed {
		n := w.retries[key]
		w.retries[key] = n + 1
		d = min(100*time.Millisecond<<min(n, 9), time.Minute)
	}
	time.AfterFunc(d, func() {
		select {
		case <-w.term.Stopping():
		default:
			w.mark(key)
		}
	})
}

// open fences the ledger and rebuilds every allocation from it, the pools
// and the Services, before anything is allocated.
func (w *worker) open(ctx context.Context) error {
	l, err := ledger.Open(ctx, w.c.client, ledger.Options{
		Namespace: w.c.cfg.Namespace, Term: w.term.ID(), ShardLimit: w.c.cfg.ShardLimit,
		Metrics: w.c.ledgerM, Log: w.log, Holds: w.term.Holds,
	})
	if err != nil {
		return err
	}
	w.ldg = l
	if w.corrupt != nil {
		w.log.Info("The ledger is readable again; allocation resumes")
		w.corrupt = nil
	}
	w.c.metrics.ledgerCorrupt.Set(0)
	w.rebuild()
	for _, cf := range w.conflicts {
		w.log.Warn("Conflicting claim to an IP", "service", cf.Service, "ip", addrs(cf.IPs), "source", string(cf.Source), "reason", cf.Message)
		if ns, name, ok := strings.Cut(cf.Service, "/"); ok {
			if obj, ok := w.store().Get(watcherv1.Kind_KIND_SERVICE, ns, name); ok {
				w.c.event(serviceRef(obj), "Warning", "IPConflict",
					fmt.Sprintf("The %s of this Service names %s, which is already held: %s", cf.Source, addrs(cf.IPs), cf.Message))
			}
		}
	}
	return nil
}

// rebuild resets the allocator from the ledger writer's state and the
// stream, and marks every Service for a pass.
func (w *worker) rebuild() {
	// Clear the flag before reading the pools, never after: a pool event
	// that lands while the rebuild runs must leave it set, or that pool
	// would be ignored until the next pool change (seen in e2e: a pool
	// created during a slow rebuild served nothing).
	w.mu.Lock()
	w.poolsDirty = false
	w.mu.Unlock()
	st := w.ldg.State()
	pools, invalid := w.c.pools.Parse(w.store().List(watcherv1.Kind_KIND_IP_POOL))
	nss := map[string]*watcherv1.Object{}
	for _, n := range w.store().List(watcherv1.Kind_KIND_NAMESPACE) {
		nss[n.GetMeta().GetName()] = n
	}
	services := w.store().List(watcherv1.Kind_KIND_SERVICE)
	r := Rebuild(Inputs{Ledger: st, Pools: pools, Services: services, Namespaces: nss, LBClass: w.c.cfg.LBClass, RequireLBClass: w.c.cfg.RequireLBClass})
	w.alloc, w.invalidPools, w.conflicts = r.Alloc, invalid, r.Conflicts
	w.ledgerBySvc = objects.ByService(st.Allocations)
	keys := make([]string, 0, len(services)+len(w.ledgerBySvc))
	for _, s := range services {
		keys = append(keys, objects.Key(s))
	}
	for k := range w.ledgerBySvc {
		keys = append(keys, k)
	}
	w.mark(keys...)
	clear(w.poolWritten)
}

// reportCorrupt stops allocation with an Event on the shard and a condition
// on every pool. The shard itself is never touched.
func (w *worker) reportCorrupt(ctx context.Context, ce *ledger.CorruptError) {
	first := w.corrupt == nil || w.corrupt.Error() != ce.Error()
	w.corrupt = ce
	w.c.metrics.ledgerCorrupt.Set(1)
	if first {
		w.log.Error("The ledger cannot be read; no address is allocated until it is repaired", "configMap", ce.Shard, "err", ce.Err)
		w.c.event(configMapRef(w.c.cfg.Namespace, ce.Shard), "Warning", "LedgerCorrupt", ce.Error())
	}
	w.writePoolStatuses(ctx, nil)
}

func (w *worker) loop(ctx context.Context, term *leader.Term) {
	for {
		select {
		case <-term.Stopping():
			return
		case <-w.wake:
		case m := <-w.mutations:
			m.reply <- w.apply(term.Context(), m)
		}
		for !w.fenced && w.hasWork() {
			select {
			case <-term.Stopping():
				return
			case m := <-w.mutations:
				m.reply <- w.apply(term.Context(), m)
			default:
			}
			w.pass(term.Context())
		}
	}
}

func (w *worker) hasWork() bool {
	if w.ldg == nil {
		return time.Now().After(w.reopenAt)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.dirty) > 0 || w.poolsDirty || w.finalizersDirty
}

// reopen reads and fences the ledger again after a failed write. Until it
// succeeds nothing is decided; a corrupt ledger is reported and retried.
func (w *worker) reopen(ctx context.Context) {
	err := w.open(ctx)
	if err == nil {
		return
	}
	w.ldg = nil
	delay := 2 * time.Second
	var ce *ledger.CorruptError
	switch {
	case errors.As(err, &ce):
		w.reportCorrupt(ctx, ce)
		delay = 10 * time.Second
	case errors.Is(err, ledger.ErrFenced):
		w.fenced = true
		return
	default:
		w.log.Error("Cannot re-read the ledger; retrying", "err", err, "retryIn", delay)
	}
	w.reopenAt = time.Now().Add(delay)
	time.AfterFunc(delay, w.poke)
}

// take returns up to n dirty Services in allocation order, and every dirty
// key the stream does not show.
func (w *worker) take(n int) (present []*watcherv1.Object, absent []string, poolsChanged bool) {
	w.mu.Lock()
	keys := slices.Collect(maps.Keys(w.dirty))
	clear(w.dirty)
	poolsChanged, w.poolsDirty = w.poolsDirty, false
	w.finalizersDirty = false
	w.mu.Unlock()
	for _, k := range keys {
		ns, name, _ := strings.Cut(k, "/")
		if obj, ok := w.store().Get(watcherv1.Kind_KIND_SERVICE, ns, name); ok {
			present = append(present, obj)
		} else {
			absent = append(absent, k)
		}
	}
	slices.SortFunc(present, objects.Less)
	slices.Sort(absent)
	if len(present) > n {
		rest := present[n:]
		present = present[:n]
		w.mu.Lock()
		for _, o := range rest {
			w.dirty[objects.Key(o)] = struct{}{}
		}
		w.mu.Unlock()
		w.poke()
	}
	return present, absent, poolsChanged
}

// write is one Service's write of a pass: status and allocated-from-pool
// annotation in one status-subresource patch.
type write struct {
	obj     *watcherv1.Object
	key     string
	cur     svcStatus
	want    svcStatus
	release bool // clear our IPs and condition: the Service is no longer ours
	event   *eventSpec
}

type eventSpec struct{ typ, reason, msg string }

// pass decides a batch, commits the ledger once, then writes the statuses.
func (w *worker) pass(ctx context.Context) {
	start := time.Now()
	if w.ldg == nil {
		w.reopen(ctx)
		return
	}
	present, absent, poolsChanged := w.take(w.c.cfg.BatchSize)
	if poolsChanged {
		w.setPools()
	}
	var (
		change   ledger.Change
		releases []string // released from the allocator once the ledger says so
		reask    []string // allocate again after the release
		writes   []*write
	)
	release := func(key string) {
		change.Release = append(change.Release, w.ledgerBySvc[key]...)
		releases = append(releases, key)
	}

	for _, key := range absent {
		if len(w.alloc.Allocations(key)) == 0 && len(w.ledgerBySvc[key]) == 0 {
			delete(w.expect, key)
			continue
		}
		// The stream may lag behind a Service created a moment ago: ask
		// the API server before giving its address back.
		ns, name, _ := strings.Cut(key, "/")
		svc, err := w.c.client.CoreV1().Services(ns).Get(ctx, name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err) || (err == nil && svc.DeletionTimestamp != nil):
			w.log.Info("Service is gone; releasing its addresses", "service", key)
			delete(w.expect, key)
			release(key)
		case err != nil:
			w.log.Warn("Cannot confirm that a Service is gone", "service", key, "err", err)
			w.requeue(key, true)
		default:
			w.requeue(key, false)
		}
	}

	// Claim what every Service of the batch requests before allocating any
	// of them, so an older pending Service is never handed an IP that a
	// younger one in the same batch asks for (Rebuild does the same for all
	// Services at the start of a term).
	for _, obj := range present {
		if !w.c.class().Serves(obj) {
			continue
		}
		if req, err := objects.Request(obj, w.namespace(obj)); err == nil {
			_ = w.alloc.Claim(req) // a refused claim: Allocate says why
		}
	}

	for _, obj := range present {
		key := objects.Key(obj)
		cur := w.current(obj)
		held := w.alloc.Allocations(key)
		if !w.c.class().Serves(obj) {
			delete(w.pending, key)
			switch {
			case cur.showsAny(held) || cur.cond != nil || cur.pool != "":
				// Clear the status and annotation first; the ledger entry
				// goes after.
				want := cur.without(held)
				writes = append(writes, &write{obj: obj, key: key, cur: cur, release: true, want: want})
			case len(held) > 0 || len(w.ledgerBySvc[key]) > 0:
				release(key)
			}
			continue
		}

		var want svcStatus
		want.cond = &condition{observedGeneration: obj.GetMeta().GetGeneration()}
		req, perr := objects.Request(obj, w.namespace(obj))
		var res allocator.Result
		var err error = perr
		if perr == nil {
			res, err = w.alloc.Allocate(req)
		}
		if allocator.IsUnfit(err) {
			if cur.showsAny(held) {
				want = cur.without(held)
				want.cond = cur.cond
				w.log.Info("Service holds an address that no longer fits; clearing its status before releasing", "service", key, "reason", err.Error())
				writes = append(writes, &write{obj: obj, key: key, cur: cur, want: want})
			} else {
				release(key)
				reask = append(reask, key)
			}
			continue
		}
		held = w.alloc.Allocations(key)
		want.ingress = ingressOf(held)
		want.pool = poolOf(held)
		if err != nil {
			var ae *allocator.Error
			if !errors.As(err, &ae) {
				ae = &allocator.Error{Reason: allocator.ReasonInvalidRequest, Message: err.Error()}
			}
			want.cond.status, want.cond.reason, want.cond.message = "False", string(ae.Reason), ae.Message
			w.c.metrics.failures.WithLabelValues(string(ae.Reason)).Inc()
		} else if res.Outside != "" {
			// The pool no longer offers what the Service holds: it keeps it,
			// and says so (never re-allocated behind the operator's back).
			want.cond.status, want.cond.reason = "True", string(allocator.ReasonHeldOutsidePool)
			want.cond.message = fmt.Sprintf("Keeps %s, held outside its pool: %s. ipam never moves an address a Service holds; "+
				"to move it, request an address (%s) or name a pool (%s)", addrs(res.IPs), res.Outside, allocator.AnnotationLoadBalancerIPs, allocator.AnnotationAddressPool)
			if want.pool == "" {
				want.pool = cur.pool
			}
		} else {
			want.cond.status, want.cond.reason = "True", string(allocator.ReasonAllocated)
			want.cond.message = fmt.Sprintf("Allocated %s from pool %s", addrs(res.IPs), res.Pool)
			if res.New {
				w.c.metrics.allocations.Inc()
			}
		}
		if len(held) == 0 {
			w.pending[key] = w.stillPending(key, cur, want.cond)
		} else {
			delete(w.pending, key)
		}
		// Commit before status: every held IP must be in the ledger, as
		// this Service (uid, pool, sharing key) holds it now.
		change.Allocate = append(change.Allocate, w.ledgerEdits(obj, held)...)
		if !cur.equal(want) {
			wr := &write{obj: obj, key: key, cur: cur, want: want}
			if cur.cond == nil || cur.cond.reason != want.cond.reason || cur.cond.status != want.cond.status || !slices.Equal(cur.ingress, want.ingress) {
				typ := "Normal"
				if want.cond.status != "True" || want.cond.reason == string(allocator.ReasonHeldOutsidePool) {
					typ = "Warning"
				}
				msg := want.cond.message
				wr.event = &eventSpec{typ: typ, reason: want.cond.reason, msg: msg}
			}
			writes = append(writes, wr)
		}
	}

	// One ledger write (per shard touched) for the whole batch.
	if !change.Empty() {
		if err := w.ldg.Commit(ctx, change); err != nil {
			if errors.Is(err, ledger.ErrFenced) {
				w.fenced = true
				w.log.Error("A newer term fenced the ledger; this term writes nothing more", "err", err)
				return
			}
			// Some shards may be written and others not: start over from
			// the ledger as stored (fenced again under this same term).
			w.log.Error("Ledger commit failed; re-reading the ledger", "err", err)
			w.ldg = nil
			w.reopen(ctx)
			return
		}
		for _, a := range change.Release {
			w.ledgerBySvc[a.Service.Key()] = slices.DeleteFunc(w.ledgerBySvc[a.Service.Key()], func(x ledger.Allocation) bool { return x.IP == a.IP })
		}
		for _, a := range change.Allocate {
			k := a.Service.Key()
			w.ledgerBySvc[k] = append(slices.DeleteFunc(w.ledgerBySvc[k], func(x ledger.Allocation) bool { return x.IP == a.IP }), a)
		}
		for k, v := range w.ledgerBySvc {
			if len(v) == 0 {
				delete(w.ledgerBySvc, k)
			}
		}
	}
	for _, key := range releases {
		w.alloc.Release(key)
		delete(w.pending, key)
	}
	if len(releases) > 0 {
		// Freed addresses: pending Services may take them now.
		for k := range w.pending {
			reask = append(reask, k)
		}
	}
	w.mark(reask...)

	w.writeStatuses(ctx, writes)
	holders := w.holders()
	w.writePoolStatuses(ctx, holders)
	w.syncPoolFinalizers(ctx, holders)
	w.c.metrics.setPending(w.pending)
	w.c.metrics.passSeconds.Observe(time.Since(start).Seconds())
}

// stillPending is the pending record of a Service that holds no address
// after this pass: pending since this term first saw it so, or, when the
// Service's condition already said False, since that condition's
// lastTransitionTime (a Service that waited before this term began keeps
// its age); the reason is the one this pass decided.
func (w *worker) stillPending(key string, cur svcStatus, decided *condition) pendingService {
	p := pendingService{since: time.Now(), reason: "Unknown"}
	if decided != nil && decided.reason != "" {
		p.reason = decided.reason
	}
	if old, ok := w.pending[key]; ok {
		p.since = old.since
	} else if c := cur.cond; c != nil && c.status == "False" && c.lastTransition.Unix() > 0 && c.lastTransition.Before(p.since) {
		p.since = c.lastTransition
	}
	return p
}

// ledgerEdits returns the ledger entries to write so that the ledger says
// exactly what the Service holds.
func (w *worker) ledgerEdits(obj *watcherv1.Object, held []allocator.Allocation) []ledger.Allocation {
	var out []ledger.Allocation
	ref := objects.Ref(obj)
	for _, h := range held {
		entries := w.ledgerBySvc[h.Service]
		i := slices.IndexFunc(entries, func(a ledger.Allocation) bool { return a.IP == h.IP })
		// The ledger records the pool an address was handed out from, not
		// the one a later pool edit put it in.
		pool := ledgerPool(h)
		if i >= 0 && pool == allocator.NoPool {
			pool = entries[i].Pool
		}
		if i >= 0 {
			if e := entries[i]; e.Pool == pool && e.Service.UID == ref.UID && e.SharingKey == h.SharingKey {
				continue
			}
		}
		out = append(out, ledger.Allocation{IP: h.IP, Pool: pool, Service: ref, SharingKey: h.SharingKey, AllocatedAt: time.Now().UTC().Truncate(time.Second)})
	}
	return out
}

// ledgerPool is the pool the ledger records for a held address: the pool it
// was handed out from, else the pool containing it, else NoPool.
func ledgerPool(h allocator.Allocation) string {
	switch {
	case h.From != "":
		return h.From
	case h.Pool != "":
		return h.Pool
	}
	return allocator.NoPool
}

func (w *worker) namespace(obj *watcherv1.Object) *watcherv1.Object {
	ns, _ := w.store().Get(watcherv1.Kind_KIND_NAMESPACE, "", obj.GetMeta().GetNamespace())
	return ns
}

// setPools applies a changed pool set and marks every Service.
func (w *worker) setPools() {
	pools, invalid := w.c.pools.Parse(w.store().List(watcherv1.Kind_KIND_IP_POOL))
	w.alloc.SetPools(pools)
	w.invalidPools = invalid
	for name, err := range invalid {
		w.log.Warn("IPPool spec is invalid and does not take effect", "pool", name, "err", err)
	}
	// Which pool would serve a requester may have changed: claim every
	// Service's requested IPs again before any batch allocates, or an older
	// pending Service could take an IP a younger one may now claim.
	var keys []string
	for _, s := range w.store().List(watcherv1.Kind_KIND_SERVICE) {
		keys = append(keys, objects.Key(s))
		if w.c.class().Serves(s) {
			if req, err := objects.Request(s, w.namespace(s)); err == nil && len(req.RequestedIPs) > 0 {
				_ = w.alloc.Claim(req)
			}
		}
	}
	w.mark(keys...)
}

// writeStatuses writes the statuses with a bounded pool of workers, each
// Service in one status-subresource write that carries its
// allocated-from-pool annotation too.
func (w *worker) writeStatuses(ctx context.Context, writes []*write) {
	if len(writes) == 0 {
		return
	}
	type result struct {
		wr  *write
		rv  string
		err error
	}
	results := make([]result, len(writes))
	jobs := make(chan int)
	var wg sync.WaitGroup
	for range min(w.c.cfg.StatusWorkers, len(writes)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range jobs {
				rv, err := w.c.writeService(ctx, writes[i])
				results[i] = result{wr: writes[i], rv: rv, err: err}
			}
		}()
	}
	for i := range writes {
		jobs <- i
	}
	close(jobs)
	wg.Wait()
	for _, r := range results {
		key := r.wr.key
		switch {
		case r.err == nil:
			delete(w.retries, key)
			w.c.metrics.statusWrites.WithLabelValues("ok").Inc()
			w.expect[key] = expectation{rv: r.rv, status: r.wr.want, at: time.Now()}
			if r.wr.release || len(r.wr.want.ingress) < len(r.wr.cur.ingress) {
				// The status no longer shows the IPs: release them next.
				w.mark(key)
			}
			if e := r.wr.event; e != nil {
				w.c.event(serviceRef(r.wr.obj), e.typ, e.reason, e.msg)
			}
		case apierrors.IsNotFound(r.err):
			w.c.metrics.statusWrites.WithLabelValues("notfound").Inc()
			w.mark(key) // gone: its delete releases it
		case apierrors.IsConflict(r.err):
			// Decided on a version that is no longer current: the stream
			// brings the new one, and the Service is decided again.
			w.c.metrics.statusWrites.WithLabelValues("conflict").Inc()
			w.requeue(key, false)
		default:
			w.c.metrics.statusWrites.WithLabelValues("error").Inc()
			w.log.Warn("Cannot write Service status; retrying", "service", key, "err", r.err)
			delete(w.expect, key)
			w.requeue(key, true)
		}
	}
}

func ingressOf(held []allocator.Allocation) []string {
	var out []string
	for _, h := range held {
		out = append(out, h.IP.String())
	}
	return out
}

// poolOf is the pool the Service's addresses were handed out from
// (ipledger.io/allocated-from-pool), "" when unknown.
func poolOf(held []allocator.Allocation) string {
	for _, h := range held {
		if p := ledgerPool(h); p != allocator.NoPool {
			return p
		}
	}
	return ""
}
