// Package controller keeps the EndpointSlices of Services that select
// ExternalWorkloads. It reads only from the watcher stream (Services,
// ExternalWorkloads, and the EndpointSlices ipledger manages), writes with
// client-go, and acts only while this replica holds the Lease: every term
// gets a fresh queue and a fresh tracker of its own writes, registers its
// event handlers (which replays the cached world), and removes them and
// drains its queue when the term ends. What the slices should be is decided
// by package planner; this package gathers its inputs and sends its writes.
// Each term also runs a prober (package prober) fed by the same handler: it
// probes the workloads that have a readiness probe and writes their Ready
// condition, which comes back through the stream like any workload change.
package controller

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"iter"
	"log/slog"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/record"

	"github.com/ipledger/ipledger/pkg/leader"
	"github.com/ipledger/ipledger/pkg/stream"
	watcherv1 "github.com/ipledger/ipledger/proto/ipledger/watcher/v1"
	"github.com/ipledger/ipledger/services/endpoints/internal/clusternet"
	"github.com/ipledger/ipledger/services/endpoints/internal/grants"
	"github.com/ipledger/ipledger/services/endpoints/internal/planner"
	"github.com/ipledger/ipledger/services/endpoints/internal/probepolicy"
	"github.com/ipledger/ipledger/services/endpoints/internal/prober"
)

// Component is the name Events are reported under.
const Component = "ipledger-endpoints"

// Store indexes the controller reads by.
const (
	// IndexServiceSlices finds managed EndpointSlices by "namespace/service".
	IndexServiceSlices = "endpoints.ipledger.io/service"
	// IndexWorkloadLabels finds ExternalWorkloads by "namespace/key=value",
	// one value per label.
	IndexWorkloadLabels = "endpoints.ipledger.io/labels"
	// IndexServiceSelector finds Services by "namespace/key=value", one value
	// per selector term.
	IndexServiceSelector = "endpoints.ipledger.io/selector"
)

// Kinds are the kinds the controller streams.
var Kinds = []watcherv1.Kind{
	watcherv1.Kind_KIND_SERVICE,
	watcherv1.Kind_KIND_EXTERNAL_WORKLOAD,
	watcherv1.Kind_KIND_ENDPOINT_SLICE,
	watcherv1.Kind_KIND_NODE,
	watcherv1.Kind_KIND_NAMESPACE,
}

// OptionalKinds are streamed where the watcher serves them (a watcher of
// 0.3.0 or older serves neither): the rest of what the cluster's own
// networks are learnt from (clusternet).
var OptionalKinds = []watcherv1.Kind{
	watcherv1.Kind_KIND_SERVICE_CIDR,
	watcherv1.Kind_KIND_KUBERNETES_ENDPOINT_SLICE,
}

// DefaultWorkers is the default number of Services synced concurrently.
const DefaultWorkers = 16

// Config tunes the controller.
type Config struct {
	// MaxEndpointsPerSlice caps the endpoints of one slice.
	MaxEndpointsPerSlice int
	// Workers is the number of Services synced concurrently.
	Workers int
	// ExpectationTimeout bounds how long a sync waits for the stream to show
	// this term's own write before it stops waiting (the timeout of the
	// tracker's pkg/expect Sets); zero waits forever.
	ExpectationTimeout time.Duration
	// Probe tunes the readiness probes of ExternalWorkloads.
	Probe prober.Config
	// WorkloadGrants is how the Namespaces' grants of workload addresses
	// are applied (package grants): off, report or enforce.
	WorkloadGrants grants.Mode
}

// Defaults fills the fields left unset.
func (c *Config) Defaults() {
	if c.MaxEndpointsPerSlice == 0 {
		c.MaxEndpointsPerSlice = planner.DefaultMaxEndpointsPerSlice
	}
	if c.Workers == 0 {
		// Syncs mostly wait on the API server: on a cold start 16 keep it
		// busy where 4 left it idle between writes (BENCHMARKS.md,
		// endpoints). The process's write budget (--kube-api-qps) still
		// bounds the rate.
		c.Workers = DefaultWorkers
	}
	if c.ExpectationTimeout == 0 {
		c.ExpectationTimeout = time.Minute
	}
	c.Probe.Defaults()
	if c.WorkloadGrants == "" {
		c.WorkloadGrants = grants.Off
	}
}

// Flags registers the controller's flags with the current values (after
// Defaults) as their defaults.
func (c *Config) Flags(fs *flag.FlagSet) {
	c.Defaults()
	fs.IntVar(&c.MaxEndpointsPerSlice, "max-endpoints-per-slice", c.MaxEndpointsPerSlice, "maximum number of endpoints in one EndpointSlice (1-1000)")
	fs.IntVar(&c.Workers, "workers", c.Workers, "Services synced concurrently")
	fs.DurationVar(&c.ExpectationTimeout, "expectation-timeout", c.ExpectationTimeout,
		"how long a sync waits for the watcher stream to show this replica's own EndpointSlice write before acting anyway")
	c.Probe.Flags(fs)
	fs.Func("workload-grants", "how the address ranges an operator grants to a namespace (Namespace annotation "+grants.Annotation+
		") apply to its ExternalWorkloads: off (default: not checked), report (served, but each workload outside its grants says it "+
		"would be refused, in its AddressAccepted condition, an Event and ipledger_endpoints_workloads_refused) or enforce (not "+
		"served nor probed); create the grants and watch report mode before enforcing (docs/security.md)", func(s string) error {
		m, err := grants.ParseMode(s)
		c.WorkloadGrants = m
		return err
	})
}

// Validate reports a Config that cannot work.
func (c *Config) Validate() error {
	if c.MaxEndpointsPerSlice < 1 || c.MaxEndpointsPerSlice > 1000 {
		return fmt.Errorf("--max-endpoints-per-slice=%d: must be between 1 and 1000 (the API server's limit)", c.MaxEndpointsPerSlice)
	}
	if c.Workers < 1 {
		return fmt.Errorf("--workers=%d: must be at least 1", c.Workers)
	}
	return c.Probe.Validate()
}

// Store is the read side of the stream the controller uses (*stream.Store).
type Store interface {
	Get(kind watcherv1.Kind, namespace, name string) (*watcherv1.Object, bool)
	List(kind watcherv1.Kind) []*watcherv1.Object
	All(kind watcherv1.Kind) iter.Seq[*watcherv1.Object]
	ListNamespace(kind watcherv1.Kind, namespace string) []*watcherv1.Object
	ByIndex(kind watcherv1.Kind, name, value string) []*watcherv1.Object
	IndexKeys(kind watcherv1.Kind, name, value string) []string
	Attribute(kind watcherv1.Kind, name, key string) (any, bool)
}

// Source delivers the stream's events (*stream.Client).
type Source interface {
	AddHandler(h stream.Handler) stream.Registration
	RemoveHandler(r stream.Registration)
}

// Indexes are the store indexes the controller reads by, per kind.
var Indexes = map[watcherv1.Kind]map[string]func(*watcherv1.Object) []string{
	watcherv1.Kind_KIND_ENDPOINT_SLICE:    {IndexServiceSlices: sliceServiceIndex},
	watcherv1.Kind_KIND_EXTERNAL_WORKLOAD: {IndexWorkloadLabels: workloadLabelsIndex},
	watcherv1.Kind_KIND_SERVICE:           {IndexServiceSelector: serviceSelectorIndex},
}

// AttrSelector is the store attribute holding spec.selector of each
// Service that selects (planner.Selects; nil for the others): a workload's
// change finds the Services selecting it by index keys and this attribute,
// without decoding every Service that shares one of its labels.
const AttrSelector = "endpoints.ipledger.io/selector"

// selectorAttr derives AttrSelector.
func selectorAttr(o *watcherv1.Object) any {
	if !planner.Selects(o.GetService()) {
		return map[string]string(nil)
	}
	return o.GetService().GetSelector()
}

// AddIndexes adds Indexes and AttrSelector to the store; call before the
// stream runs.
func AddIndexes(s *stream.Store) {
	for kind, idx := range Indexes {
		for name, fn := range idx {
			s.AddIndex(kind, name, fn)
		}
	}
	s.AddAttribute(watcherv1.Kind_KIND_SERVICE, AttrSelector, selectorAttr)
}

func sliceServiceIndex(o *watcherv1.Object) []string {
	if k := planner.ServiceKeyOfSlice(o); k != "" {
		return []string{k}
	}
	return nil
}

func labelTerm(ns, k, v string) string { return ns + "/" + k + "=" + v }

func workloadLabelsIndex(o *watcherv1.Object) []string {
	m := o.GetMeta()
	out := make([]string, 0, len(m.GetLabels()))
	for k, v := range m.GetLabels() {
		out = append(out, labelTerm(m.GetNamespace(), k, v))
	}
	return out
}

func serviceSelectorIndex(o *watcherv1.Object) []string {
	if !planner.Selects(o.GetService()) {
		return nil
	}
	ns := o.GetMeta().GetNamespace()
	out := make([]string, 0, len(o.GetService().GetSelector()))
	for k, v := range o.GetService().GetSelector() {
		out = append(out, labelTerm(ns, k, v))
	}
	return out
}

// Controller builds one worker per leadership term.
type Controller struct {
	cfg     Config
	client  kubernetes.Interface
	status  prober.StatusWriter
	source  Source
	store   Store
	log     *slog.Logger
	reg     prometheus.Registerer
	Metrics *Metrics
	// ProbeMetrics are the readiness probes' metrics.
	ProbeMetrics *prober.Metrics
	now          func() time.Time

	mu      sync.Mutex
	current *worker // the running term's worker, nil while not leading
}

// Pending is the number of Services queued or being synced in the current
// term (zero while not leading). Tests and benchmarks wait for it to reach
// zero to know the controller has caught up with what it has seen.
func (c *Controller) Pending() int {
	c.mu.Lock()
	w := c.current
	c.mu.Unlock()
	if w == nil {
		return 0
	}
	n := w.queue.Len() + int(w.st.inflight.Load())
	if w.st.replaying.Load() {
		n++ // what the replay has not queued yet
	}
	return n
}

// New builds the controller; status writes the Ready condition of probed
// workloads; reg receives its metrics and each term's workqueue metrics.
func New(cfg Config, client kubernetes.Interface, status prober.StatusWriter, source Source, store Store, log *slog.Logger, reg prometheus.Registerer) (*Controller, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	m, err := NewMetrics(reg)
	if err != nil {
		return nil, err
	}
	probeM, err := prober.NewMetrics(reg)
	if err != nil {
		return nil, err
	}
	return &Controller{
		cfg: cfg, client: client, status: status, source: source, store: store, log: log, reg: reg,
		Metrics: m, ProbeMetrics: probeM, now: time.Now,
	}, nil
}

// NewWorker builds the fresh state of one term; it is leader.Run's newWorker.
func (c *Controller) NewWorker(term *leader.Term) (leader.Worker, error) {
	q := leader.NewQueue[string]("endpoints", c.reg).WithLogger(c.log)
	cq := leader.NewQueue[string]("endpoints-conditions", c.reg).WithLogger(c.log)
	st := c.newTermState(c.log.With("term", term.ID()))
	st.enqueue, st.enqueueCondition = q.Add, cq.Add
	// Events are writes too: the term's recorder writes them with the
	// term's context and drops what is still buffered when the term ends.
	st.recorder = term.Recorder()
	// Probes and their writes use the term's context: none outlives it.
	st.prober = prober.New(term.Context(), c.cfg.Probe, c.status, c.ProbeMetrics, st.log).WithEvents(st.recorder).
		WithRefusal(func(ns string, a netip.Addr) probepolicy.Refusal { return st.admission(ns).probe(a) })
	return &worker{st: st, queue: q, conditions: cq}, nil
}

func (c *Controller) newTermState(log *slog.Logger) *termState {
	return &termState{
		c:        c,
		log:      log,
		tracker:  newTracker(c.cfg.ExpectationTimeout, c.now),
		triggers: map[string]time.Time{},
		managed:  map[string]int{},
		refused:  map[string]string{},
		recorder: &record.FakeRecorder{},
		// NewWorker sets the queues.
		enqueue:          func(string) {},
		enqueueCondition: func(string) {},
	}
}

// worker is one term's work.
type worker struct {
	st    *termState
	queue *leader.Queue[string]
	// conditions writes the workloads' AddressAccepted condition
	// (admission.go).
	conditions *leader.Queue[string]
}

// Run registers the handlers (replaying the cached world into the queue),
// syncs until the term stops, removes the handlers and drains the queue.
func (w *worker) Run(term *leader.Term) error {
	st := w.st
	st.c.mu.Lock()
	st.c.current = w
	st.c.mu.Unlock()
	defer func() {
		st.c.mu.Lock()
		st.c.current = nil
		st.c.mu.Unlock()
	}()
	st.log.Info("Leading: registering handlers")
	// The replay runs beside the workers: it queues the Services first
	// (the store replays by kind, Services before everything else), and
	// a sync reads the store, which already holds the whole world, so the
	// first writes need not wait for 10,000 workloads to be replayed.
	st.networks.Store(st.learnNetworks())
	st.log.Info("Learnt the cluster's own networks", "networks", st.networks.Load().Len())
	st.replaying.Store(true)
	registered := make(chan stream.Registration, 1)
	go func() {
		registered <- st.c.source.AddHandler(st.handler())
		// What changed between the first learning and the replay.
		st.relearnNetworks()
		st.replaying.Store(false)
	}()
	done := make(chan struct{})
	var removed sync.WaitGroup
	removed.Go(func() {
		select {
		case <-term.Stopping():
		case <-done:
		}
		st.c.source.RemoveHandler(<-registered)
		// No update reaches the prober any more; end its probes.
		st.prober.Stop()
	})
	var conditions sync.WaitGroup
	// One worker: a condition says why a workload is left out, it moves
	// no traffic, and its writes share the process's budget with the
	// slices'. Once the term stops, what is queued is dropped rather than
	// drained (the next term judges every workload again).
	conditions.Go(func() {
		w.conditions.Run(term, 1, func(ctx context.Context, key string) error {
			select {
			case <-term.Stopping():
				return nil
			default:
				return st.syncCondition(ctx, key)
			}
		})
	})
	w.queue.Run(term, st.c.cfg.Workers, st.sync)
	conditions.Wait()
	close(done)
	removed.Wait()
	st.resetManaged()
	st.resetRefused()
	st.log.Info("Stopped leading: handlers removed, queue drained")
	return nil
}

// termState is everything one term owns. Nothing in it survives the term.
type termState struct {
	c       *Controller
	log     *slog.Logger
	tracker *tracker
	enqueue func(key string)
	// enqueueCondition queues a workload whose AddressAccepted condition
	// should change.
	enqueueCondition func(key string)
	recorder         record.EventRecorder
	inflight         atomic.Int32
	// replaying: AddHandler is still replaying the store into the queue.
	replaying atomic.Bool
	// prober probes the workloads with a readiness probe; nil probes none.
	prober *prober.Prober
	// networks are the cluster's own networks (admission.go); netMu
	// serializes learning them again.
	networks atomic.Pointer[clusternet.Networks]
	netMu    sync.Mutex

	mu       sync.Mutex
	triggers map[string]time.Time // service key -> earliest change not yet synced
	managed  map[string]int       // service key -> endpoints in its slices
	refused  map[string]string    // workload key -> why no slice may hold it
}

func (st *termState) handler() stream.Handler {
	return stream.HandlerFuncs{
		AddFunc:        func(o *watcherv1.Object) { st.onChange(nil, o) },
		InitialAddFunc: st.onReplay,
		UpdateFunc:     func(old, o *watcherv1.Object) { st.onChange(old, o) },
		DeleteFunc:     st.onDelete,
	}
}

// onReplay takes one object of the world the store replays when the term
// starts. Every Service is queued by its own replay, so a workload needs no
// lookup of the Services selecting it (on a cold start that was most of
// the replay's cost: one index lookup per label of each of 10,000
// workloads); the prober still learns of it.
func (st *termState) onReplay(o *watcherv1.Object) {
	switch {
	case o.GetKind() == watcherv1.Kind_KIND_EXTERNAL_WORKLOAD:
		st.judge(o)
		st.prober.Update(o)
		return
	case isNetworkKind(o.GetKind()), o.GetKind() == watcherv1.Kind_KIND_NAMESPACE:
		return // learnt when the term started, and again after the replay; read when judging
	}
	st.onChange(nil, o)
}

func (st *termState) queue(key string) {
	st.mu.Lock()
	if _, ok := st.triggers[key]; !ok {
		st.triggers[key] = st.c.now()
	}
	st.mu.Unlock()
	st.enqueue(key)
}

func (st *termState) onChange(old, o *watcherv1.Object) {
	switch o.GetKind() {
	case watcherv1.Kind_KIND_SERVICE:
		st.queue(stream.Key(o))
	case watcherv1.Kind_KIND_EXTERNAL_WORKLOAD:
		st.judge(o)
		st.prober.Update(o)
		st.queueSelecting(old)
		st.queueSelecting(o)
	case watcherv1.Kind_KIND_NODE, watcherv1.Kind_KIND_SERVICE_CIDR, watcherv1.Kind_KIND_KUBERNETES_ENDPOINT_SLICE:
		if networkFieldsChanged(old, o) {
			st.relearnNetworks()
		}
	case watcherv1.Kind_KIND_NAMESPACE:
		if old == nil || grantsChanged(old, o) {
			st.regrant(o)
		}
	case watcherv1.Kind_KIND_ENDPOINT_SLICE:
		key := planner.ServiceKeyOfSlice(o)
		if key == "" {
			return
		}
		if st.tracker.ShouldSync(key, planner.SliceFromObject(o)) {
			st.queue(key)
		}
	}
}

func (st *termState) onDelete(o *watcherv1.Object) {
	switch o.GetKind() {
	case watcherv1.Kind_KIND_SERVICE:
		st.queue(stream.Key(o))
	case watcherv1.Kind_KIND_EXTERNAL_WORKLOAD:
		st.forget(o)
		st.prober.Delete(o)
		st.queueSelecting(o)
	case watcherv1.Kind_KIND_NODE, watcherv1.Kind_KIND_SERVICE_CIDR, watcherv1.Kind_KIND_KUBERNETES_ENDPOINT_SLICE:
		st.relearnNetworks()
	case watcherv1.Kind_KIND_ENDPOINT_SLICE:
		key := planner.ServiceKeyOfSlice(o)
		if key == "" {
			return
		}
		// A delete we did not make (out of band, or by an earlier term)
		// must be repaired: requeue the Service.
		if !st.tracker.HandleDeletion(key, planner.SliceFromObject(o)) {
			st.queue(key)
		}
	}
}

// queueSelecting queues every Service in the workload's namespace whose
// selector matches it, found through the selector index: a Service is
// indexed under each of its selector terms, so one of the workload's labels
// leads to it.
func (st *termState) queueSelecting(w *watcherv1.Object) {
	if w == nil {
		return
	}
	m := w.GetMeta()
	seen := map[string]bool{}
	for k, v := range m.GetLabels() {
		for _, key := range st.c.store.IndexKeys(watcherv1.Kind_KIND_SERVICE, IndexServiceSelector, labelTerm(m.GetNamespace(), k, v)) {
			if seen[key] {
				continue
			}
			seen[key] = true
			sel, _ := st.c.store.Attribute(watcherv1.Kind_KIND_SERVICE, AttrSelector, key)
			if sel, ok := sel.(map[string]string); ok && len(sel) > 0 && planner.SelectorMatchesLabels(sel, m.GetLabels()) {
				st.queue(key)
			}
		}
	}
}

// candidates are the workloads that may match the Service: those carrying
// one of its selector terms (the planner checks the whole selector).
func (st *termState) candidates(ns string, svc *watcherv1.Service) []*watcherv1.Object {
	if !planner.Selects(svc) {
		return nil
	}
	sel := svc.GetSelector()
	var first string
	for k := range sel {
		if first == "" || k < first {
			first = k
		}
	}
	return st.c.store.ByIndex(watcherv1.Kind_KIND_EXTERNAL_WORKLOAD, IndexWorkloadLabels, labelTerm(ns, first, sel[first]))
}

// errStale says the view lags what this term wrote; the sync is retried.
type errStale struct{ reason string }

func (e errStale) Error() string { return "stale view: " + e.reason }

func (st *termState) sync(ctx context.Context, key string) (err error) {
	st.inflight.Add(1)
	defer st.inflight.Add(-1)
	start := st.c.now()
	m := st.c.Metrics
	defer func() {
		m.SyncDuration.Observe(st.c.now().Sub(start).Seconds())
		var stale errStale
		switch {
		case err == nil:
			m.Syncs.WithLabelValues(resultSuccess).Inc()
		case errors.As(err, &stale):
			m.Syncs.WithLabelValues(resultStale).Inc()
			m.StaleRetries.Inc()
			st.log.Debug("Stale view, retrying", "service", key, "reason", stale.reason)
		default:
			m.Syncs.WithLabelValues(resultError).Inc()
			st.log.Warn("Sync failed", "service", key, "err", err)
		}
	}()

	ns, name, _ := strings.Cut(key, "/")
	svc, ok := st.c.store.Get(watcherv1.Kind_KIND_SERVICE, ns, name)
	if !ok {
		// Its slices go with it: the garbage collector follows the ownerRef.
		st.tracker.Forget(key)
		st.setManaged(key, 0)
		st.takeTrigger(key)
		return nil
	}
	objs := st.c.store.ByIndex(watcherv1.Kind_KIND_ENDPOINT_SLICE, IndexServiceSlices, key)
	existing := make([]*discoveryv1.EndpointSlice, 0, len(objs))
	for _, o := range objs {
		existing = append(existing, planner.SliceFromObject(o))
	}
	if reason := st.tracker.Stale(key, existing); reason != "" {
		return errStale{reason}
	}

	trigger := st.takeTrigger(key)
	plan := planner.Compute(planner.Input{
		Service:              svc,
		Workloads:            st.candidates(ns, svc.GetService()),
		Existing:             existing,
		MaxEndpointsPerSlice: st.c.cfg.MaxEndpointsPerSlice,
		TriggerTime:          trigger,
		TakenNames:           st.tracker.TakenNames(key),
		Refuse:               st.admission(ns).slice,
	})
	if plan.Writes() > 0 {
		ref := &corev1.ObjectReference{APIVersion: "v1", Kind: "Service", Namespace: ns, Name: name, UID: types.UID(svc.GetMeta().GetUid())}
		for _, s := range plan.Skipped {
			st.recorder.Eventf(ref, corev1.EventTypeWarning, "ExternalWorkloadSkipped", "ExternalWorkload %s gets no endpoint: it %s", s.Workload, s.Reason)
		}
		if err := st.apply(ctx, key, plan); err != nil {
			st.restoreTrigger(key, trigger)
			if !errors.As(err, new(errStale)) {
				st.recorder.Eventf(ref, corev1.EventTypeWarning, "FailedToUpdateEndpointSlices", "Error updating EndpointSlices: %v", err)
			}
			return err
		}
		st.log.Debug("Synced", "service", key, "created", len(plan.Create), "updated", len(plan.Update), "deleted", len(plan.Delete), "endpoints", plan.Endpoints)
	}
	st.setManaged(key, plan.Endpoints)
	return nil
}

// apply sends the plan's writes: creates first (so endpoints are never
// missing in between), then updates, then deletes. Each carries a
// precondition, so a write computed from a view the API server has moved
// past is refused rather than applied: updates and deletes name the
// resourceVersion they saw, and creates use deterministic names.
func (st *termState) apply(ctx context.Context, key string, plan planner.Plan) error {
	m := st.c.Metrics
	api := st.c.client.DiscoveryV1()
	for _, s := range plan.Create {
		created, err := api.EndpointSlices(s.Namespace).Create(ctx, s, metav1.CreateOptions{})
		if err != nil {
			m.SliceWrites.WithLabelValues(opCreate, resultError).Inc()
			switch {
			case apierrors.IsAlreadyExists(err):
				st.tracker.Taken(key, s.Name)
				return errStale{fmt.Sprintf("slice %s exists but is not in the view", s.Name)}
			case apierrors.HasStatusCause(err, corev1.NamespaceTerminatingCause):
				return nil
			}
			return fmt.Errorf("create EndpointSlice %s/%s: %w", s.Namespace, s.Name, err)
		}
		m.SliceWrites.WithLabelValues(opCreate, resultSuccess).Inc()
		st.tracker.Wrote(key, created)
	}
	for _, s := range plan.Update {
		updated, err := api.EndpointSlices(s.Namespace).Update(ctx, s, metav1.UpdateOptions{})
		if err != nil {
			m.SliceWrites.WithLabelValues(opUpdate, resultError).Inc()
			if apierrors.IsConflict(err) {
				return errStale{fmt.Sprintf("slice %s changed since resourceVersion %s", s.Name, s.ResourceVersion)}
			}
			return fmt.Errorf("update EndpointSlice %s/%s: %w", s.Namespace, s.Name, err)
		}
		m.SliceWrites.WithLabelValues(opUpdate, resultSuccess).Inc()
		st.tracker.Wrote(key, updated)
	}
	for _, s := range plan.Delete {
		pre := &metav1.Preconditions{UID: &s.UID, ResourceVersion: &s.ResourceVersion}
		err := api.EndpointSlices(s.Namespace).Delete(ctx, s.Name, metav1.DeleteOptions{Preconditions: pre})
		switch {
		case err == nil, apierrors.IsNotFound(err):
			m.SliceWrites.WithLabelValues(opDelete, resultSuccess).Inc()
			st.tracker.Deleted(key, s.Name, s.UID)
		case apierrors.IsConflict(err):
			m.SliceWrites.WithLabelValues(opDelete, resultError).Inc()
			return errStale{fmt.Sprintf("slice %s changed since resourceVersion %s", s.Name, s.ResourceVersion)}
		default:
			m.SliceWrites.WithLabelValues(opDelete, resultError).Inc()
			return fmt.Errorf("delete EndpointSlice %s/%s: %w", s.Namespace, s.Name, err)
		}
	}
	return nil
}

// takeTrigger returns and forgets the time of the earliest change the
// Service's next sync reacts to; changes after this moment set a new one.
func (st *termState) takeTrigger(key string) time.Time {
	st.mu.Lock()
	defer st.mu.Unlock()
	t := st.triggers[key]
	delete(st.triggers, key)
	return t
}

// restoreTrigger puts back the trigger time of a sync that failed.
func (st *termState) restoreTrigger(key string, t time.Time) {
	if t.IsZero() {
		return
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	if cur, ok := st.triggers[key]; !ok || t.Before(cur) {
		st.triggers[key] = t
	}
}

func (st *termState) setManaged(key string, n int) {
	st.mu.Lock()
	old := st.managed[key]
	if n == 0 {
		delete(st.managed, key)
	} else {
		st.managed[key] = n
	}
	st.mu.Unlock()
	st.c.Metrics.EndpointsManaged.Add(float64(n - old))
}

func (st *termState) resetManaged() {
	st.mu.Lock()
	total := 0
	for _, n := range st.managed {
		total += n
	}
	st.managed = map[string]int{}
	st.mu.Unlock()
	st.c.Metrics.EndpointsManaged.Sub(float64(total))
}
