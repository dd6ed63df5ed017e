package informers

import (
	"context"
	"log/slog"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/tools/cache"

	"github.com/ipledger/ipledger/pkg/convert"
	watcherv1 "github.com/ipledger/ipledger/proto/ipledger/watcher/v1"
)

// DefaultDiscoveryInterval is how often the watcher asks discovery whether
// the optional kinds' CRDs are installed.
const DefaultDiscoveryInterval = 30 * time.Second

// optionalKind is a kind served only while its resource is: the Gateway
// API's and MetalLB's, which ipledger reads but does not ship, and
// ServiceCIDR, which the API serves from Kubernetes 1.33. An informer started without
// its resource would list in vain forever and hold the watcher unsynced.
type optionalKind struct {
	kind     watcherv1.Kind
	resource schema.GroupVersionResource
}

var optionalKinds = []optionalKind{
	{watcherv1.Kind_KIND_GATEWAY, convert.GatewayResource},
	{watcherv1.Kind_KIND_GATEWAY_CLASS, convert.GatewayClassResource},
	{watcherv1.Kind_KIND_SERVICE_CIDR, convert.ServiceCIDRResource},
	{watcherv1.Kind_KIND_METALLB_IP_ADDRESS_POOL, convert.MetalLBIPAddressPoolResource},
	{watcherv1.Kind_KIND_METALLB_L2_ADVERTISEMENT, convert.MetalLBL2AdvertisementResource},
	{watcherv1.Kind_KIND_METALLB_BGP_ADVERTISEMENT, convert.MetalLBBGPAdvertisementResource},
	{watcherv1.Kind_KIND_METALLB_SERVICE_L2_STATUS, convert.MetalLBServiceL2StatusResource},
	{watcherv1.Kind_KIND_METALLB_SERVICE_BGP_STATUS, convert.MetalLBServiceBGPStatusResource},
}

// optionalInformers starts an optional kind's informer once discovery lists
// its resource and stops it once discovery no longer does, deleting what it
// had delivered (a deleted CRD deletes its objects). Until discovery is
// first asked, the kinds are not synced; a kind whose resource is absent,
// or not known to be served (discovery failed), is synced and empty.
type optionalInformers struct {
	disc     discovery.DiscoveryInterface
	dyn      dynamic.Interface
	interval time.Duration
	handler  func(watcherv1.Kind) *handler
	log      *slog.Logger
	m        *metrics

	mu      sync.Mutex
	checked bool
	running map[watcherv1.Kind]*runningInformer
}

type runningInformer struct {
	informer cache.SharedIndexInformer
	synced   cache.InformerSynced
	handler  *handler
	cancel   context.CancelFunc
	done     chan struct{}
}

// synced reports whether kind has delivered its initial list, or is known
// to be absent.
func (o *optionalInformers) synced(kind watcherv1.Kind) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	if !o.checked {
		return false
	}
	r := o.running[kind]
	return r == nil || r.synced()
}

// run asks discovery every interval until ctx ends, then stops every
// informer it started.
func (o *optionalInformers) run(ctx context.Context) {
	t := time.NewTicker(o.interval)
	defer t.Stop()
	for {
		o.reconcile(ctx)
		select {
		case <-ctx.Done():
			o.mu.Lock()
			defer o.mu.Unlock()
			for kind, r := range o.running {
				r.cancel()
				<-r.done
				delete(o.running, kind)
			}
			return
		case <-t.C:
		}
	}
}

// reconcile starts and stops informers after what discovery serves now.
func (o *optionalInformers) reconcile(ctx context.Context) {
	served, err := o.served()
	if err != nil {
		// An optional kind never holds the watcher unsynced: a kind not
		// known to be served yet is synced and empty, and is asked for
		// again at the next interval.
		o.log.Warn("Cannot ask discovery which optional kinds are served; keeping them as they are, asking again later", "err", err, "retryIn", o.interval)
		o.mu.Lock()
		o.checked = true
		o.mu.Unlock()
		return
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, k := range optionalKinds {
		r := o.running[k.kind]
		switch {
		case served[k.resource] && r == nil:
			o.running[k.kind] = o.start(ctx, k)
			o.log.Info("Serving an optional kind: its CRD is installed", "kind", k.kind.String(), "resource", k.resource.String())
		case !served[k.resource] && r != nil:
			o.stop(r)
			delete(o.running, k.kind)
			o.log.Info("No longer serving an optional kind: its CRD is gone", "kind", k.kind.String(), "resource", k.resource.String())
		}
		present := 0.0
		if served[k.resource] {
			present = 1
		}
		o.m.served.WithLabelValues(k.kind.String()).Set(present)
	}
	o.checked = true
}

// served asks discovery which optional resources exist. A group version
// discovery does not know is an answer (none), not an error.
func (o *optionalInformers) served() (map[schema.GroupVersionResource]bool, error) {
	served := map[schema.GroupVersionResource]bool{}
	byGV := map[schema.GroupVersion]bool{}
	for _, k := range optionalKinds {
		gv := k.resource.GroupVersion()
		if byGV[gv] {
			continue
		}
		byGV[gv] = true
		list, err := o.disc.ServerResourcesForGroupVersion(gv.String())
		if apierrors.IsNotFound(err) {
			continue
		}
		if err != nil {
			return nil, err
		}
		for _, r := range list.APIResources {
			served[gv.WithResource(r.Name)] = true
		}
	}
	return served, nil
}

func (o *optionalInformers) start(ctx context.Context, k optionalKind) *runningInformer {
	inf := dynamicinformer.NewFilteredDynamicInformer(o.dyn, k.resource, "", 0, cache.Indexers{}, nil).Informer()
	h := o.handler(k.kind)
	// Neither fails on an informer that has not started.
	_ = inf.SetTransform(h.transform)
	reg, _ := inf.AddEventHandler(h)
	ctx, cancel := context.WithCancel(ctx)
	r := &runningInformer{informer: inf, synced: reg.HasSynced, handler: h, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(r.done)
		inf.Run(ctx.Done())
	}()
	return r
}

// stop ends an informer and deletes every object it holds: once Run has
// returned no more events arrive, so none is deleted and then upserted.
func (o *optionalInformers) stop(r *runningInformer) {
	r.cancel()
	<-r.done
	for _, obj := range r.informer.GetStore().List() {
		r.handler.OnDelete(obj)
	}
}
