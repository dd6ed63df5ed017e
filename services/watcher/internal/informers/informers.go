// Package informers runs the watcher's Kubernetes informers, the only ones in
// ipledger, and feeds every change, converted to the compact form, into a Sink.
//
// The informers' caches hold the compact, encoded objects the Sink gets, not
// the API objects: each object is converted once, as it arrives, and the
// cache and the store share that one copy.
//
// The Gateway API's kinds are optional: their informers run only while
// discovery serves their resources (optional.go).
package informers

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"maps"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	authorizationv1client "k8s.io/client-go/kubernetes/typed/authorization/v1"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/tools/cache"

	"github.com/ipledger/ipledger/pkg/convert"
	"github.com/ipledger/ipledger/pkg/promreg"
	watcherv1 "github.com/ipledger/ipledger/proto/ipledger/watcher/v1"
	"github.com/ipledger/ipledger/services/watcher/internal/store"
)

// Selectors the API server filters on. "Pods carrying any ipledger.io/ label"
// cannot be expressed as a label selector (keys cannot be matched by prefix),
// so the watcher asks for the one label consumers need on Pods: eipd counts
// Pods labelled ipledger.io/externalip=<ip>.
const (
	PodLabelSelector           = "ipledger.io/externalip"
	EndpointSliceLabelSelector = "endpointslice.kubernetes.io/managed-by=endpoints.ipledger.io"
	LedgerLabelSelector        = "ipledger.io/ledger=true"
)

// crdKinds are the kinds read through the dynamic client, whose list items
// may lack apiVersion and kind (convert tells kinds apart by them).
var crdKinds = map[watcherv1.Kind]schema.GroupVersionKind{
	watcherv1.Kind_KIND_IP_POOL:                    convert.GroupVersion.WithKind("IPPool"),
	watcherv1.Kind_KIND_EXTERNAL_WORKLOAD:          convert.GroupVersion.WithKind("ExternalWorkload"),
	watcherv1.Kind_KIND_GATEWAY:                    convert.GatewayGroupVersion.WithKind("Gateway"),
	watcherv1.Kind_KIND_GATEWAY_CLASS:              convert.GatewayGroupVersion.WithKind("GatewayClass"),
	watcherv1.Kind_KIND_SERVICE_CIDR:               convert.ServiceCIDRKind,
	watcherv1.Kind_KIND_METALLB_IP_ADDRESS_POOL:    convert.MetalLBGroupVersion.WithKind("IPAddressPool"),
	watcherv1.Kind_KIND_METALLB_L2_ADVERTISEMENT:   convert.MetalLBGroupVersion.WithKind("L2Advertisement"),
	watcherv1.Kind_KIND_METALLB_BGP_ADVERTISEMENT:  convert.MetalLBGroupVersion.WithKind("BGPAdvertisement"),
	watcherv1.Kind_KIND_METALLB_SERVICE_L2_STATUS:  convert.MetalLBGroupVersion.WithKind("ServiceL2Status"),
	watcherv1.Kind_KIND_METALLB_SERVICE_BGP_STATUS: convert.MetalLBGroupVersion.WithKind("ServiceBGPStatus"),
}

// Sink receives converted objects; it must not block.
type Sink interface {
	Upsert(obj *store.Object)
	Delete(obj *store.Object)
}

// Config says where the ledger ConfigMaps live and how often to look for the
// optional kinds' CRDs.
type Config struct {
	// Namespace holds the ledger ConfigMaps.
	Namespace string
	// DiscoveryInterval: how often discovery is asked whether the Gateway
	// API's CRDs are installed; DefaultDiscoveryInterval when 0.
	DiscoveryInterval time.Duration
	// LedgerReadInterval: how often, at most, a ledger shard that keeps
	// changing is read (ledger.go); DefaultLedgerReadInterval when 0.
	LedgerReadInterval time.Duration
	// CiliumNamespace holds Cilium's L2 announcement Leases; empty: the
	// kind is not served (synced and empty).
	CiliumNamespace string
}

// Set is the running informers.
type Set struct {
	synced   []namedSync
	optional *optionalInformers
	log      *slog.Logger
	m        *metrics
	once     sync.Once
	done     chan struct{}
}

type namedSync struct {
	kind   watcherv1.Kind
	synced cache.InformerSynced
}

type metrics struct {
	synced      *prometheus.GaugeVec
	served      *prometheus.GaugeVec
	convertErr  *prometheus.CounterVec
	ledgerReads *prometheus.CounterVec
}

func newMetrics() *metrics {
	return &metrics{
		synced: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "ipledger_watcher_informer_synced",
			Help: "1 once the informer of a kind has synced its initial list."}, []string{"kind"}),
		served: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "ipledger_watcher_optional_kind_served",
			Help: "1 while the CRD of an optional kind (the Gateway API's) is installed and the watcher serves the kind, 0 while it is not."}, []string{"kind"}),
		convertErr: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "ipledger_watcher_convert_errors_total",
			Help: "Objects that could not be converted to the compact form (skipped)."}, []string{"kind"}),
		ledgerReads: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "ipledger_watcher_ledger_shard_reads_total",
			Help: "Reads of a ledger ConfigMap after the metadata informer saw it change, by result: ok, gone (deleted meanwhile), error (retried)."}, []string{"result"}),
	}
}

// StripManagedFields drops what nothing in ipledger reads: managedFields, the
// largest part of most objects, every annotation but convert.CarriedAnnotations
// (such as kubectl's last-applied-configuration, a copy of the whole object,
// or 200 KB under ipledger.io/ that no consumer reads), and it bounds what
// stays: a carried value longer than convert.MaxAnnotationBytes becomes its
// marker, labels larger than convert.MaxLabelBytes the one
// convert.LabelsTruncatedLabel. The informers' transform converts every object
// first (convert.Meta applies the same table and bounds), so the cache holds
// only the compact form; it applies StripManagedFields to an object that does
// not convert, which is cached as it came, so that it is cached small.
//
// Annotations are filtered before managedFields go, by convert.Carried: a
// request annotation ipam itself wrote (kube-vip.io/loadbalancerIPs under
// ipam's field manager) is dropped, as convert.Meta drops it.
func StripManagedFields(obj any) (any, error) {
	a, ok := obj.(metav1.Object)
	if !ok {
		return obj, nil
	}
	if ann := a.GetAnnotations(); len(ann) > 0 {
		if kept := convert.Annotations(a); !maps.Equal(kept, ann) {
			a.SetAnnotations(kept)
		}
	}
	if l := a.GetLabels(); convert.LabelBytes(l) > convert.MaxLabelBytes {
		a.SetLabels(convert.Labels(l))
	}
	a.SetManagedFields(nil)
	return obj, nil
}

// Start creates and starts the informers; they run until ctx ends.
func Start(ctx context.Context, cfg Config, client kubernetes.Interface, dyn dynamic.Interface, meta metadata.Interface, sink Sink,
	log *slog.Logger, reg prometheus.Registerer) (*Set, error) {
	m := newMetrics()
	if err := promreg.Register(reg, m.synced, m.served, m.convertErr, m.ledgerReads); err != nil {
		return nil, err
	}
	s := &Set{log: log, m: m, done: make(chan struct{})}
	s.optional = &optionalInformers{disc: client.Discovery(), dyn: dyn, interval: cmp.Or(cfg.DiscoveryInterval, DefaultDiscoveryInterval),
		handler: func(kind watcherv1.Kind) *handler { return &handler{kind: kind, sink: sink, log: log, m: m} },
		log:     log, m: m, running: map[watcherv1.Kind]*runningInformer{}}
	for _, k := range optionalKinds {
		s.synced = append(s.synced, namedSync{kind: k.kind, synced: func() bool { return s.optional.synced(k.kind) }})
		m.synced.WithLabelValues(k.kind.String()).Set(0)
	}

	all := informers.NewSharedInformerFactory(client, 0)
	pods := informers.NewSharedInformerFactoryWithOptions(client, 0,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = PodLabelSelector }))
	slices := informers.NewSharedInformerFactoryWithOptions(client, 0,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = EndpointSliceLabelSelector }))
	// The API server's own addresses: the slices of default/kubernetes.
	apiServer := informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithNamespace(metav1.NamespaceDefault),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = convert.KubernetesServiceLabelSelector }))
	crds := dynamicinformer.NewDynamicSharedInformerFactory(dyn, 0)

	list := []kindInformer{
		{watcherv1.Kind_KIND_SERVICE, all.Core().V1().Services().Informer()},
		{watcherv1.Kind_KIND_NODE, all.Core().V1().Nodes().Informer()},
		{watcherv1.Kind_KIND_NAMESPACE, all.Core().V1().Namespaces().Informer()},
		{watcherv1.Kind_KIND_POD, pods.Core().V1().Pods().Informer()},
		{watcherv1.Kind_KIND_ENDPOINT_SLICE, slices.Discovery().V1().EndpointSlices().Informer()},
		{watcherv1.Kind_KIND_KUBERNETES_ENDPOINT_SLICE, apiServer.Discovery().V1().EndpointSlices().Informer()},
		{watcherv1.Kind_KIND_IP_POOL, crds.ForResource(convert.IPPoolResource).Informer()},
		{watcherv1.Kind_KIND_EXTERNAL_WORKLOAD, crds.ForResource(convert.ExternalWorkloadResource).Informer()},
	}
	var leases informers.SharedInformerFactory
	if cfg.CiliumNamespace != "" && !mayWatchLeases(ctx, client.AuthorizationV1(), cfg.CiliumNamespace, log) {
		cfg.CiliumNamespace = ""
	}
	if cfg.CiliumNamespace != "" {
		// Only Cilium's namespace; the API server cannot select names by
		// prefix, so the transform keeps of every other Lease only its key.
		leases = informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithNamespace(cfg.CiliumNamespace))
		list = append(list, kindInformer{watcherv1.Kind_KIND_CILIUM_L2_ANNOUNCEMENT_LEASE, leases.Coordination().V1().Leases().Informer()})
	} else {
		s.synced = append(s.synced, namedSync{kind: watcherv1.Kind_KIND_CILIUM_L2_ANNOUNCEMENT_LEASE, synced: func() bool { return true }})
	}
	if err := s.handle(list, sink); err != nil {
		return nil, err
	}
	// The ledger ConfigMaps: a metadata informer, each shard read as it
	// changes (ledger.go).
	ledger, err := newLedgerShards(meta, client, cfg.Namespace, cmp.Or(cfg.LedgerReadInterval, DefaultLedgerReadInterval), sink, log, m.ledgerReads)
	if err != nil {
		return nil, fmt.Errorf("ledger shards: %w", err)
	}
	s.synced = append(s.synced, namedSync{kind: watcherv1.Kind_KIND_LEDGER_CONFIG_MAP, synced: ledger.synced})
	m.synced.WithLabelValues(watcherv1.Kind_KIND_LEDGER_CONFIG_MAP.String()).Set(0)
	all.Start(ctx.Done())
	pods.Start(ctx.Done())
	slices.Start(ctx.Done())
	apiServer.Start(ctx.Done())
	if leases != nil {
		leases.Start(ctx.Done())
	}
	go ledger.run(ctx)
	crds.Start(ctx.Done())
	go s.optional.run(ctx)
	go s.watchSync(ctx)
	return s, nil
}

// kindInformer is the informer of one kind.
type kindInformer struct {
	kind     watcherv1.Kind
	informer cache.SharedIndexInformer
}

// handle sends what each informer of list sees to sink, converted as it
// arrives (the informer's transform), and counts its initial list toward
// the set's sync.
func (s *Set) handle(list []kindInformer, sink Sink) error {
	for _, i := range list {
		h := &handler{kind: i.kind, sink: sink, log: s.log, m: s.m}
		if i.kind == watcherv1.Kind_KIND_CILIUM_L2_ANNOUNCEMENT_LEASE {
			h.keep = convert.IsCiliumL2Lease
		}
		if err := i.informer.SetTransform(h.transform); err != nil {
			return fmt.Errorf("informer %v: %w", i.kind, err)
		}
		reg, err := i.informer.AddEventHandler(h)
		if err != nil {
			return fmt.Errorf("informer %v: %w", i.kind, err)
		}
		// HasSynced of the registration: true once the handler has seen the
		// initial list, not merely once the cache has it.
		s.synced = append(s.synced, namedSync{kind: i.kind, synced: reg.HasSynced})
		s.m.synced.WithLabelValues(i.kind.String()).Set(0)
	}
	return nil
}

// mayWatchLeases reports whether the watcher may list and watch the Leases
// of ns (the Role ipledger:watcher:cilium-l2-leases). Without it a Lease
// informer would list in vain forever and hold the watcher, and every
// consumer, unsynced — as when an overlay moves that Role out of
// kube-system — so the kind is then served empty, and the log says what to
// grant. Asked once, at start.
func mayWatchLeases(ctx context.Context, authz authorizationv1client.AuthorizationV1Interface, ns string, log *slog.Logger) bool {
	for _, verb := range []string{"list", "watch"} {
		review, err := authz.SelfSubjectAccessReviews().Create(ctx, &authorizationv1.SelfSubjectAccessReview{
			Spec: authorizationv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &authorizationv1.ResourceAttributes{
				Namespace: ns, Verb: verb, Group: "coordination.k8s.io", Resource: "leases"}},
		}, metav1.CreateOptions{})
		if err != nil || !review.Status.Allowed {
			log.Warn("not reading Cilium's L2 announcement Leases: the watcher may not "+verb+" Leases in "+ns+
				"; bind it the Role ipledger:watcher:cilium-l2-leases there, or set --cilium-namespace to where Cilium runs (- for none), and restart it",
				"namespace", ns, "err", err)
			return false
		}
	}
	return true
}

func (s *Set) watchSync(ctx context.Context) {
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	for {
		all := true
		for _, n := range s.synced {
			if n.synced() {
				s.m.synced.WithLabelValues(n.kind.String()).Set(1)
			} else {
				all = false
			}
		}
		if all {
			s.log.Info("Informers synced", "kinds", len(s.synced))
			close(s.done)
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Synced reports whether every informer has delivered its initial list.
func (s *Set) Synced() bool {
	select {
	case <-s.done:
		return true
	default:
		return false
	}
}

// WaitForSync blocks until Synced or ctx ends.
func (s *Set) WaitForSync(ctx context.Context) error {
	select {
	case <-s.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

type handler struct {
	kind watcherv1.Kind
	sink Sink
	log  *slog.Logger
	m    *metrics
	// keep, when set, says which objects of the informer are streamed: the
	// others are cached as their key alone (ignored) and never delivered.
	keep func(metav1.Object) bool
}

// ignored is what the cache holds of an object the handler does not
// stream: its key and resourceVersion, so that the informer can tell its
// changes and deletion apart, and nothing more.
type ignored struct{ metav1.ObjectMeta }

// cached is what the informers' caches hold: the store's form of an object,
// with the metadata the cache keys and compares it by. (A struct of one
// pointer is held by an interface without an allocation of its own.)
type cached struct{ *store.Object }

// GetObjectMeta makes cached usable by meta.Accessor, through which the
// informer keys its cache and tells resyncs from updates.
func (c cached) GetObjectMeta() metav1.Object {
	return &metav1.ObjectMeta{Namespace: c.Namespace(), Name: c.Name(), ResourceVersion: c.ResourceVersion()}
}

// transform converts an API object to the compact, encoded form as it enters
// the informer, so that the cache never holds the API object. An object that
// does not convert is counted, logged and cached as it came (without
// managedFields), and the handler skips it.
func (h *handler) transform(obj any) (any, error) {
	switch obj.(type) {
	case cached, *ignored:
		return obj, nil
	}
	if a, ok := obj.(metav1.Object); ok && h.keep != nil && !h.keep(a) {
		return &ignored{metav1.ObjectMeta{Namespace: a.GetNamespace(), Name: a.GetName(), ResourceVersion: a.GetResourceVersion()}}, nil
	}
	if gvk, ok := crdKinds[h.kind]; ok {
		if u, ok := obj.(*unstructured.Unstructured); ok && u.GetKind() == "" {
			u.SetGroupVersionKind(gvk)
		}
	}
	// Converted with its managedFields, which tell who wrote
	// kube-vip.io/loadbalancerIPs (convert.Carried,
	// convert.IPAMKubeVIPLoadBalancerIPs); the compact form keeps none.
	ro, ok := obj.(runtime.Object)
	if !ok {
		h.m.convertErr.WithLabelValues(h.kind.String()).Inc()
		obj, _ = StripManagedFields(obj)
		return obj, nil
	}
	o, err := convert.Object(ro)
	if err != nil {
		h.m.convertErr.WithLabelValues(h.kind.String()).Inc()
		h.log.Warn("Skipping an object that does not convert", "kind", h.kind.String(), "err", err)
		obj, _ = StripManagedFields(obj)
		return obj, nil
	}
	// The informer's kind names what the object is served as: an
	// EndpointSlice of default/kubernetes is KIND_KUBERNETES_ENDPOINT_SLICE.
	o.Kind = h.kind
	return cached{store.Encode(o)}, nil
}

func (h *handler) OnAdd(obj any, _ bool) {
	if c, ok := obj.(cached); ok {
		h.sink.Upsert(c.Object)
	}
}

func (h *handler) OnUpdate(_, newObj any) {
	if c, ok := newObj.(cached); ok {
		h.sink.Upsert(c.Object)
	}
}

func (h *handler) OnDelete(obj any) {
	if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = tomb.Obj
	}
	if c, ok := obj.(cached); ok {
		h.sink.Delete(c.Object)
	}
}
