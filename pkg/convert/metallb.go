package convert

import (
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"

	watcherv1 "github.com/ipledger/ipledger/proto/ipledger/watcher/v1"
)

// MetalLBGroupVersion is MetalLB's API (metallb.io/v1beta1), read in its
// v0.16.1 source. The watcher serves its kinds while discovery lists them:
// ipledger does not ship MetalLB's CRDs.
var MetalLBGroupVersion = schema.GroupVersion{Group: "metallb.io", Version: "v1beta1"}

// Resources of MetalLB that tell whether, and from where, an address is
// announced (docs/reachability.md#is-it-announced).
var (
	MetalLBIPAddressPoolResource    = MetalLBGroupVersion.WithResource("ipaddresspools")
	MetalLBL2AdvertisementResource  = MetalLBGroupVersion.WithResource("l2advertisements")
	MetalLBBGPAdvertisementResource = MetalLBGroupVersion.WithResource("bgpadvertisements")
	MetalLBServiceL2StatusResource  = MetalLBGroupVersion.WithResource("servicel2statuses")
	MetalLBServiceBGPStatusResource = MetalLBGroupVersion.WithResource("servicebgpstatuses")
)

// metalLBKinds are the stream kinds of MetalLB's kinds.
var metalLBKinds = map[string]watcherv1.Kind{
	"IPAddressPool":    watcherv1.Kind_KIND_METALLB_IP_ADDRESS_POOL,
	"L2Advertisement":  watcherv1.Kind_KIND_METALLB_L2_ADVERTISEMENT,
	"BGPAdvertisement": watcherv1.Kind_KIND_METALLB_BGP_ADVERTISEMENT,
	"ServiceL2Status":  watcherv1.Kind_KIND_METALLB_SERVICE_L2_STATUS,
	"ServiceBGPStatus": watcherv1.Kind_KIND_METALLB_SERVICE_BGP_STATUS,
}

type metalLBObject struct {
	Spec struct {
		Addresses              []string               `json:"addresses"`
		IPAddressPools         []string               `json:"ipAddressPools"`
		IPAddressPoolSelectors []metav1.LabelSelector `json:"ipAddressPoolSelectors"`
		ServiceSelectors       []metav1.LabelSelector `json:"serviceSelectors"`
		NodeSelectors          []metav1.LabelSelector `json:"nodeSelectors"`
		Interfaces             []string               `json:"interfaces"`
	} `json:"spec"`
	Status struct {
		Node             string   `json:"node"`
		ServiceName      string   `json:"serviceName"`
		ServiceNamespace string   `json:"serviceNamespace"`
		Peers            []string `json:"peers"`
	} `json:"status"`
}

// isMetalLB reports whether u is one of MetalLB's kinds the watcher serves.
func isMetalLB(u *unstructured.Unstructured) bool {
	_, ok := metalLBKinds[u.GetKind()]
	return ok && u.GroupVersionKind().Group == MetalLBGroupVersion.Group
}

// MetalLB converts an unstructured MetalLB IPAddressPool, L2Advertisement,
// BGPAdvertisement, ServiceL2Status or ServiceBGPStatus.
func MetalLB(u *unstructured.Unstructured) (*watcherv1.Object, error) {
	kind, ok := metalLBKinds[u.GetKind()]
	if !ok || u.GroupVersionKind().Group != MetalLBGroupVersion.Group {
		return nil, fmt.Errorf("convert: %q of %q is not a MetalLB kind ipledger reads", u.GetKind(), u.GetAPIVersion())
	}
	var m metalLBObject
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.UnstructuredContent(), &m); err != nil {
		return nil, fmt.Errorf("convert MetalLB %s %s/%s: %w", u.GetKind(), u.GetNamespace(), u.GetName(), err)
	}
	out := &watcherv1.Object{Kind: kind, Meta: Meta(u)}
	switch kind {
	case watcherv1.Kind_KIND_METALLB_IP_ADDRESS_POOL:
		out.Body = &watcherv1.Object_MetallbIpAddressPool{MetallbIpAddressPool: &watcherv1.MetalLBIPAddressPool{Addresses: m.Spec.Addresses}}
	case watcherv1.Kind_KIND_METALLB_L2_ADVERTISEMENT, watcherv1.Kind_KIND_METALLB_BGP_ADVERTISEMENT:
		a := &watcherv1.MetalLBAdvertisement{IpAddressPools: m.Spec.IPAddressPools, Interfaces: m.Spec.Interfaces}
		a.IpAddressPoolSelectors = labelSelectors(m.Spec.IPAddressPoolSelectors)
		a.ServiceSelectors = labelSelectors(m.Spec.ServiceSelectors)
		a.NodeSelectors = labelSelectors(m.Spec.NodeSelectors)
		out.Body = &watcherv1.Object_MetallbAdvertisement{MetallbAdvertisement: a}
	default:
		out.Body = &watcherv1.Object_MetallbServiceStatus{MetallbServiceStatus: &watcherv1.MetalLBServiceStatus{
			Node: m.Status.Node, ServiceName: m.Status.ServiceName, ServiceNamespace: m.Status.ServiceNamespace, Peers: m.Status.Peers}}
	}
	return out, nil
}

func labelSelectors(in []metav1.LabelSelector) []*watcherv1.LabelSelector {
	var out []*watcherv1.LabelSelector
	for i := range in {
		out = append(out, LabelSelector(&in[i]))
	}
	return out
}
