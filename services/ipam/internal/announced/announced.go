// Package announced keeps, while ipam leads, whether every address ipam gave
// is announced (package announce decides): it exports how many addresses an
// announcer is known to serve but does not announce, and puts an Event on a
// Service whose announcer changed (a failover to another node, or on one
// node a speaker restart). It runs beside ipam's allocating loop, never in
// it: its own goroutine, fed by the same stream, reading only the stream's
// store, writing only Events.
package announced

import (
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ipledger/ipledger/pkg/leader"
	"github.com/ipledger/ipledger/pkg/promreg"
	"github.com/ipledger/ipledger/pkg/stream"
	watcherv1 "github.com/ipledger/ipledger/proto/ipledger/watcher/v1"
	"github.com/ipledger/ipledger/services/ipam/internal/announce"
	"github.com/ipledger/ipledger/services/ipam/internal/objects"
)

// MetalLBKinds are MetalLB's stream kinds the verdicts read.
var MetalLBKinds = []watcherv1.Kind{
	watcherv1.Kind_KIND_METALLB_IP_ADDRESS_POOL, watcherv1.Kind_KIND_METALLB_L2_ADVERTISEMENT,
	watcherv1.Kind_KIND_METALLB_BGP_ADVERTISEMENT, watcherv1.Kind_KIND_METALLB_SERVICE_L2_STATUS,
	watcherv1.Kind_KIND_METALLB_SERVICE_BGP_STATUS,
}

// Kinds are the announcers' stream kinds the verdicts read, MetalLB's and
// Cilium's L2 announcement Leases: ipam asks for them as optional kinds (a
// watcher without them, or a cluster without MetalLB's CRDs or Cilium,
// streams none).
var Kinds = append(slices.Clone(MetalLBKinds), watcherv1.Kind_KIND_CILIUM_L2_ANNOUNCEMENT_LEASE)

// MinInterval bounds how often the verdicts are decided again: a burst of
// changes (a cold start writing 10,000 statuses) is one pass a second, not
// one per change.
const MinInterval = time.Second

// Source is what the tracker reads: a *stream.Client.
type Source interface {
	Store() *stream.Store
	Follow(h stream.Handler) stream.Registration
	RemoveHandler(r stream.Registration)
}

// Tracker lives as long as the process; Run runs it for one term.
type Tracker struct {
	src   Source
	class objects.Class
	pools *objects.PoolSet
	log   *slog.Logger
	m     *metrics
	now   func() time.Time
}

// New builds the tracker. class is the Services ipam serves; pools parses
// the IPPools (the verdicts ask which IPPool holds an address).
func New(src Source, class objects.Class, pools *objects.PoolSet, log *slog.Logger, reg prometheus.Registerer) (*Tracker, error) {
	m, err := newMetrics(reg)
	if err != nil {
		return nil, err
	}
	return &Tracker{src: src, class: class, pools: pools, log: log, m: m, now: time.Now}, nil
}

type metrics struct {
	unannounced leader.Gauge
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{unannounced: leader.NewGauge(prometheus.GaugeOpts{
		Name: "ipledger_ipam_addresses_unannounced",
		Help: "Addresses ipam gave that an announcer is known to serve (a MetalLB IPAddressPool holds them or overlaps their IPPool, a Cilium L2 Lease names their Service) but does not announce; exported by the leader only. ExplainService says why for each (docs/reachability.md#is-it-announced).",
	})}
	if err := promreg.Register(reg, m.unannounced); err != nil {
		return nil, err
	}
	return m, nil
}

// term is one term's state.
type term struct {
	t    *Tracker
	rec  func(ref *corev1.ObjectReference, typ, reason, msg string)
	mu   sync.Mutex
	all  bool                // every Service is to be decided again
	keys map[string]struct{} // Services to decide again, "namespace/name"
	wake chan struct{}

	// verdicts and announcing identities by Service key, kept across gaps
	// (not announced for a while) so that a return on another node is told.
	verdicts map[string][]announce.Verdict
	last     map[string]string // by "namespace/name ip": the last announcing identity

	// world is what the announcers published at gens, the store's
	// generations of worldKinds: a pass of Service changes alone reuses it.
	world *announce.World
	gens  [len(worldKinds)]uint64
}

// worldKinds are the kinds a World is made of.
var worldKinds = [...]watcherv1.Kind{watcherv1.Kind_KIND_IP_POOL,
	watcherv1.Kind_KIND_METALLB_IP_ADDRESS_POOL, watcherv1.Kind_KIND_METALLB_L2_ADVERTISEMENT,
	watcherv1.Kind_KIND_METALLB_BGP_ADVERTISEMENT, watcherv1.Kind_KIND_METALLB_SERVICE_L2_STATUS,
	watcherv1.Kind_KIND_METALLB_SERVICE_BGP_STATUS, watcherv1.Kind_KIND_CILIUM_L2_ANNOUNCEMENT_LEASE}

// Run decides every Service's verdicts, then again for what changes, until
// the term stops; the gauge is forgotten when it does.
func (t *Tracker) Run(lt *leader.Term) {
	rec := lt.Recorder()
	tm := t.newTerm(func(ref *corev1.ObjectReference, typ, reason, msg string) { rec.Event(ref, typ, reason, msg) })
	reg := t.src.Follow(tm.handler())
	defer t.src.RemoveHandler(reg)
	defer t.m.unannounced.Forget()
	tm.run(lt.StoppingContext())
}

func (t *Tracker) newTerm(rec func(ref *corev1.ObjectReference, typ, reason, msg string)) *term {
	return &term{t: t, rec: rec, all: true, keys: map[string]struct{}{}, wake: make(chan struct{}, 1),
		verdicts: map[string][]announce.Verdict{}, last: map[string]string{}}
}

func (tm *term) handler() stream.Handler {
	mark := func(o *watcherv1.Object) {
		tm.mu.Lock()
		switch o.GetKind() {
		case watcherv1.Kind_KIND_SERVICE:
			tm.keys[o.GetMeta().GetNamespace()+"/"+o.GetMeta().GetName()] = struct{}{}
		case watcherv1.Kind_KIND_METALLB_SERVICE_L2_STATUS, watcherv1.Kind_KIND_METALLB_SERVICE_BGP_STATUS:
			s := o.GetMetallbServiceStatus()
			tm.keys[s.GetServiceNamespace()+"/"+s.GetServiceName()] = struct{}{}
		case watcherv1.Kind_KIND_CILIUM_L2_ANNOUNCEMENT_LEASE:
			// Renewed every few seconds: only its Service is decided again.
			for _, key := range announce.CiliumLeaseServices(o.GetMeta().GetName()) {
				tm.keys[key] = struct{}{}
			}
		case watcherv1.Kind_KIND_IP_POOL, watcherv1.Kind_KIND_METALLB_IP_ADDRESS_POOL,
			watcherv1.Kind_KIND_METALLB_L2_ADVERTISEMENT, watcherv1.Kind_KIND_METALLB_BGP_ADVERTISEMENT:
			tm.all = true
		default:
			// The ledger, Namespaces, Gateways: no verdict reads them (the
			// ledger changes with every allocation).
			tm.mu.Unlock()
			return
		}
		tm.mu.Unlock()
		select {
		case tm.wake <- struct{}{}:
		default:
		}
	}
	return stream.HandlerFuncs{AddFunc: mark, DeleteFunc: mark, UpdateFunc: func(old, new *watcherv1.Object) {
		if old.GetKind() == watcherv1.Kind_KIND_METALLB_SERVICE_L2_STATUS || old.GetKind() == watcherv1.Kind_KIND_METALLB_SERVICE_BGP_STATUS {
			mark(old) // a status may change Service
		}
		mark(new)
	}}
}

func (tm *term) run(ctx context.Context) {
	for {
		expiry, expires := tm.pass()
		select {
		case <-ctx.Done():
			return
		case <-time.After(MinInterval):
		}
		// A Cilium Lease that lapses changes a verdict with no object
		// changing: decide again then.
		var lapse <-chan time.Time
		if expires {
			lapse = time.After(time.Until(expiry))
		}
		select {
		case <-ctx.Done():
			return
		case <-tm.wake:
		case <-lapse:
			tm.mu.Lock()
			tm.all = true
			tm.mu.Unlock()
		}
	}
}

// pass decides the marked Services again; it says when a Cilium Lease
// next lapses unless renewed.
func (tm *term) pass() (expiry time.Time, expires bool) {
	tm.mu.Lock()
	all, keys := tm.all, tm.keys
	tm.all, tm.keys = false, map[string]struct{}{}
	tm.mu.Unlock()
	store := tm.t.src.Store()
	var gens [len(worldKinds)]uint64
	for i, k := range worldKinds {
		gens[i] = store.Generation(k)
	}
	if tm.world == nil || gens != tm.gens {
		tm.world, tm.gens = World(store, tm.t.pools), gens
	}
	w := tm.world
	now := tm.t.now()
	if all {
		seen := map[string]struct{}{}
		for obj := range store.All(watcherv1.Kind_KIND_SERVICE) {
			key := obj.GetMeta().GetNamespace() + "/" + obj.GetMeta().GetName()
			seen[key] = struct{}{}
			tm.decide(key, obj, w, now)
		}
		for key := range tm.verdicts {
			if _, ok := seen[key]; !ok {
				tm.forget(key)
			}
		}
	} else {
		for key := range keys {
			ns, name := splitKey(key)
			obj, ok := store.Get(watcherv1.Kind_KIND_SERVICE, ns, name)
			if !ok {
				tm.forget(key)
				continue
			}
			tm.decide(key, obj, w, now)
		}
	}
	// An address two Services share counts once.
	unannounced := map[netip.Addr]struct{}{}
	for _, vs := range tm.verdicts {
		for _, v := range vs {
			if v.Served && v.State == announce.NotAnnounced {
				unannounced[v.IP] = struct{}{}
			}
		}
	}
	tm.t.m.unannounced.Set(float64(len(unannounced)))
	return w.NextExpiry(now)
}

func (tm *term) decide(key string, obj *watcherv1.Object, w *announce.World, now time.Time) {
	if !tm.t.class.Serves(obj) || len(obj.GetService().GetIngress()) == 0 {
		tm.forget(key)
		return
	}
	vs := w.Decide(announce.ServiceOf(obj), now)
	tm.verdicts[key] = vs
	for _, v := range vs {
		id := v.Identity()
		if id == "" {
			continue
		}
		ipKey := key + " " + v.IP.String()
		before, seen := tm.last[ipKey]
		tm.last[ipKey] = id
		if seen && before != id {
			tm.rec(serviceRef(obj), corev1.EventTypeNormal, "AnnouncerChanged",
				fmt.Sprintf("%s is now %s (before: %s)", v.IP, v.Message, before))
		}
	}
}

func (tm *term) forget(key string) {
	for _, v := range tm.verdicts[key] {
		delete(tm.last, key+" "+v.IP.String())
	}
	delete(tm.verdicts, key)
}

// World gathers what the announcers publish from the stream's store.
func World(store *stream.Store, pools *objects.PoolSet) *announce.World {
	var metalLB []*watcherv1.Object
	for _, k := range MetalLBKinds {
		metalLB = append(metalLB, store.List(k)...)
	}
	var leases []announce.Lease
	for _, o := range store.List(watcherv1.Kind_KIND_CILIUM_L2_ANNOUNCEMENT_LEASE) {
		leases = append(leases, announce.LeaseOf(o))
	}
	parsed, _ := pools.Parse(store.List(watcherv1.Kind_KIND_IP_POOL))
	return announce.NewWorld(metalLB, leases, parsed)
}

func serviceRef(obj *watcherv1.Object) *corev1.ObjectReference {
	m := obj.GetMeta()
	return &corev1.ObjectReference{Kind: "Service", APIVersion: "v1", Namespace: m.GetNamespace(), Name: m.GetName(),
		UID: types.UID(m.GetUid()), ResourceVersion: m.GetResourceVersion()}
}

func splitKey(key string) (ns, name string) {
	ns, name, _ = strings.Cut(key, "/")
	return ns, name
}
