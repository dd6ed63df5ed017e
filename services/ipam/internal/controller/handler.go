package controller

import (
	"maps"
	"slices"

	"google.golang.org/protobuf/proto"

	"github.com/ipledger/ipledger/pkg/stream"
	"github.com/ipledger/ipledger/pkg/stream/objkey"
	watcherv1 "github.com/ipledger/ipledger/proto/ipledger/watcher/v1"
	"github.com/ipledger/ipledger/services/ipam/internal/objects"
)

// The stream's handlers of a term: they only mark the Services an event
// may change a decision of (the queue, queue.go); the loop decides them.

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
