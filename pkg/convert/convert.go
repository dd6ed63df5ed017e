// Package convert turns Kubernetes objects into the compact watcherv1.Object
// messages that the watcher streams: only the fields consumers use, the labels
// and the annotations consumers read (carried.go), each bounded in size. It is
// shared so tests and tools build exactly what the watcher sends.
package convert

import (
	"fmt"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"

	watcherv1 "github.com/ipledger/ipledger/proto/ipledger/watcher/v1"
)

// GroupVersion of ipledger's CRDs.
var GroupVersion = schema.GroupVersion{Group: "ipledger.io", Version: "v1alpha1"}

// Resources of ipledger's CRDs, for dynamic clients and informers.
var (
	IPPoolResource           = GroupVersion.WithResource("ippools")
	ExternalWorkloadResource = GroupVersion.WithResource("externalworkloads")
)

// Object converts any supported object (typed core/discovery objects, a
// Lease of Cilium's L2 announcer, or an unstructured IPPool,
// ExternalWorkload, Gateway, GatewayClass, ServiceCIDR or MetalLB object)
// to its compact form.
func Object(obj runtime.Object) (*watcherv1.Object, error) {
	switch o := obj.(type) {
	case *corev1.Service:
		return Service(o), nil
	case *corev1.Node:
		return Node(o), nil
	case *corev1.Namespace:
		return Namespace(o), nil
	case *corev1.Pod:
		return Pod(o), nil
	case *discoveryv1.EndpointSlice:
		return EndpointSlice(o), nil
	case *corev1.ConfigMap:
		return ConfigMap(o), nil
	case *coordinationv1.Lease:
		return Lease(o), nil
	case *unstructured.Unstructured:
		switch o.GetKind() {
		case "IPPool":
			return IPPool(o)
		case "ExternalWorkload":
			return ExternalWorkload(o)
		case "Gateway":
			if isGatewayAPI(o) {
				return Gateway(o)
			}
		case "GatewayClass":
			if isGatewayAPI(o) {
				return GatewayClass(o)
			}
		case ServiceCIDRKind.Kind:
			if o.GroupVersionKind().Group == ServiceCIDRKind.Group {
				return ServiceCIDR(o)
			}
		default:
			if isMetalLB(o) {
				return MetalLB(o)
			}
		}
		return nil, fmt.Errorf("convert: unsupported kind %q of %q", o.GetKind(), o.GetAPIVersion())
	}
	return nil, fmt.Errorf("convert: unsupported type %T", obj)
}

// Meta converts object metadata.
func Meta(m metav1.Object) *watcherv1.ObjectMeta {
	out := &watcherv1.ObjectMeta{
		Namespace:         m.GetNamespace(),
		Name:              m.GetName(),
		Uid:               string(m.GetUID()),
		ResourceVersion:   m.GetResourceVersion(),
		Generation:        m.GetGeneration(),
		CreationTimestamp: unixNano(m.GetCreationTimestamp()),
	}
	if dt := m.GetDeletionTimestamp(); dt != nil {
		out.DeletionTimestamp = dt.UnixNano()
	}
	if f := m.GetFinalizers(); len(f) > 0 {
		out.Finalizers = append([]string(nil), f...)
	}
	out.Labels = Labels(m.GetLabels())
	out.Annotations = Annotations(m)
	for _, r := range m.GetOwnerReferences() {
		out.OwnerReferences = append(out.OwnerReferences, &watcherv1.OwnerReference{
			ApiVersion: r.APIVersion, Kind: r.Kind, Name: r.Name, Uid: string(r.UID), Controller: r.Controller != nil && *r.Controller,
		})
	}
	return out
}

func unixNano(t metav1.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}

// Conditions converts metav1.Conditions.
func Conditions(in []metav1.Condition) []*watcherv1.Condition {
	var out []*watcherv1.Condition
	for _, c := range in {
		out = append(out, &watcherv1.Condition{
			Type: c.Type, Status: string(c.Status), Reason: c.Reason, Message: c.Message,
			ObservedGeneration: c.ObservedGeneration, LastTransitionTime: unixNano(c.LastTransitionTime),
		})
	}
	return out
}

// Service converts a core/v1 Service.
func Service(s *corev1.Service) *watcherv1.Object {
	body := &watcherv1.Service{
		Type:                  string(s.Spec.Type),
		ClusterIps:            s.Spec.ClusterIPs,
		LoadBalancerIp:        s.Spec.LoadBalancerIP, //nolint:staticcheck // read for migration
		ExternalTrafficPolicy: string(s.Spec.ExternalTrafficPolicy),
		HasSelector:           s.Spec.Selector != nil,
		Conditions:            Conditions(s.Status.Conditions),
		// Before managedFields go (the watcher converts first): whether ipam
		// wrote it is told by them.
		IpamKubeVipLoadBalancerIps: IPAMKubeVIPLoadBalancerIPs(s),
	}
	if len(body.ClusterIps) == 0 && s.Spec.ClusterIP != "" {
		body.ClusterIps = []string{s.Spec.ClusterIP}
	}
	if s.Spec.LoadBalancerClass != nil {
		body.LoadBalancerClass = *s.Spec.LoadBalancerClass
	}
	if s.Spec.IPFamilyPolicy != nil {
		body.IpFamilyPolicy = string(*s.Spec.IPFamilyPolicy)
	}
	for _, f := range s.Spec.IPFamilies {
		body.IpFamilies = append(body.IpFamilies, string(f))
	}
	if len(s.Spec.Selector) > 0 {
		body.Selector = make(map[string]string, len(s.Spec.Selector))
		for k, v := range s.Spec.Selector {
			body.Selector[k] = v
		}
	}
	for _, p := range s.Spec.Ports {
		sp := &watcherv1.ServicePort{Name: p.Name, Protocol: string(p.Protocol), Port: p.Port}
		if p.TargetPort.Type == 0 {
			sp.TargetPortNumber = p.TargetPort.IntVal
		} else {
			sp.TargetPortName = p.TargetPort.StrVal
		}
		if p.AppProtocol != nil {
			sp.AppProtocol = *p.AppProtocol
		}
		body.Ports = append(body.Ports, sp)
	}
	for _, in := range s.Status.LoadBalancer.Ingress {
		i := &watcherv1.LoadBalancerIngress{Ip: in.IP, Hostname: in.Hostname}
		if in.IPMode != nil {
			i.IpMode = string(*in.IPMode)
		}
		body.Ingress = append(body.Ingress, i)
	}
	return &watcherv1.Object{Kind: watcherv1.Kind_KIND_SERVICE, Meta: Meta(s), Body: &watcherv1.Object_Service{Service: body}}
}

// Node converts a core/v1 Node.
func Node(n *corev1.Node) *watcherv1.Object {
	body := &watcherv1.Node{ProviderId: n.Spec.ProviderID, Unschedulable: n.Spec.Unschedulable, PodCidrs: n.Spec.PodCIDRs}
	if len(body.PodCidrs) == 0 && n.Spec.PodCIDR != "" {
		body.PodCidrs = []string{n.Spec.PodCIDR}
	}
	for _, a := range n.Status.Addresses {
		body.Addresses = append(body.Addresses, &watcherv1.NodeAddress{Type: string(a.Type), Address: a.Address})
	}
	for _, t := range n.Spec.Taints {
		body.TaintKeys = append(body.TaintKeys, t.Key)
	}
	return &watcherv1.Object{Kind: watcherv1.Kind_KIND_NODE, Meta: Meta(n), Body: &watcherv1.Object_Node{Node: body}}
}

// Namespace converts a core/v1 Namespace.
func Namespace(n *corev1.Namespace) *watcherv1.Object {
	return &watcherv1.Object{Kind: watcherv1.Kind_KIND_NAMESPACE, Meta: Meta(n),
		Body: &watcherv1.Object_Namespace{Namespace: &watcherv1.Namespace{Phase: string(n.Status.Phase)}}}
}

// Pod converts a core/v1 Pod.
func Pod(p *corev1.Pod) *watcherv1.Object {
	body := &watcherv1.Pod{NodeName: p.Spec.NodeName, Phase: string(p.Status.Phase)}
	for _, ip := range p.Status.PodIPs {
		body.PodIps = append(body.PodIps, ip.IP)
	}
	if len(body.PodIps) == 0 && p.Status.PodIP != "" {
		body.PodIps = []string{p.Status.PodIP}
	}
	return &watcherv1.Object{Kind: watcherv1.Kind_KIND_POD, Meta: Meta(p), Body: &watcherv1.Object_Pod{Pod: body}}
}

// EndpointSlice converts a discovery/v1 EndpointSlice.
func EndpointSlice(s *discoveryv1.EndpointSlice) *watcherv1.Object {
	body := &watcherv1.EndpointSlice{AddressType: string(s.AddressType)}
	for _, p := range s.Ports {
		ep := &watcherv1.EndpointPort{}
		if p.Name != nil {
			ep.Name = *p.Name
		}
		if p.Protocol != nil {
			ep.Protocol = string(*p.Protocol)
		}
		if p.Port != nil {
			ep.Port = *p.Port
		}
		if p.AppProtocol != nil {
			ep.AppProtocol = *p.AppProtocol
		}
		body.Ports = append(body.Ports, ep)
	}
	for _, e := range s.Endpoints {
		out := &watcherv1.Endpoint{Addresses: e.Addresses,
			Ready: e.Conditions.Ready != nil && *e.Conditions.Ready, Serving: e.Conditions.Serving != nil && *e.Conditions.Serving,
			Terminating: e.Conditions.Terminating != nil && *e.Conditions.Terminating}
		if e.Zone != nil {
			out.Zone = *e.Zone
		}
		if e.Hostname != nil {
			out.Hostname = *e.Hostname
		}
		if r := e.TargetRef; r != nil {
			out.TargetRefKind, out.TargetRefName, out.TargetRefNamespace, out.TargetRefUid = r.Kind, r.Name, r.Namespace, string(r.UID)
		}
		body.Endpoints = append(body.Endpoints, out)
	}
	return &watcherv1.Object{Kind: watcherv1.Kind_KIND_ENDPOINT_SLICE, Meta: Meta(s), Body: &watcherv1.Object_EndpointSlice{EndpointSlice: body}}
}

// ConfigMap converts a ledger ConfigMap (data only; binaryData is not part of
// the ledger format).
func ConfigMap(c *corev1.ConfigMap) *watcherv1.Object {
	body := &watcherv1.ConfigMap{}
	if len(c.Data) > 0 {
		body.Data = make(map[string]string, len(c.Data))
		for k, v := range c.Data {
			body.Data[k] = v
		}
	}
	return &watcherv1.Object{Kind: watcherv1.Kind_KIND_LEDGER_CONFIG_MAP, Meta: Meta(c), Body: &watcherv1.Object_ConfigMap{ConfigMap: body}}
}
