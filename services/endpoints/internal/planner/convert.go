package planner

import (
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/ipledger/ipledger/pkg/stream/objkey"
	watcherv1 "github.com/ipledger/ipledger/proto/ipledger/watcher/v1"
)

// SliceFromObject rebuilds an EndpointSlice from its streamed form. It holds
// every field this controller writes, plus resourceVersion and generation,
// so a plan's Update can be sent as is (compare-and-swap on the
// resourceVersion the stream showed).
func SliceFromObject(o *watcherv1.Object) *discoveryv1.EndpointSlice {
	m, es := o.GetMeta(), o.GetEndpointSlice()
	s := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{
			Namespace:       m.GetNamespace(),
			Name:            m.GetName(),
			UID:             types.UID(m.GetUid()),
			ResourceVersion: m.GetResourceVersion(),
			Generation:      m.GetGeneration(),
			Labels:          cloneMap(m.GetLabels()),
		},
		AddressType: discoveryv1.AddressType(es.GetAddressType()),
		Ports:       make([]discoveryv1.EndpointPort, 0, len(es.GetPorts())),
		Endpoints:   make([]discoveryv1.Endpoint, 0, len(es.GetEndpoints())),
	}
	if len(m.GetAnnotations()) > 0 {
		s.Annotations = cloneMap(m.GetAnnotations())
	}
	if ts := m.GetCreationTimestamp(); ts != 0 {
		s.CreationTimestamp = metav1.NewTime(time.Unix(0, ts))
	}
	if ts := m.GetDeletionTimestamp(); ts != 0 {
		t := metav1.NewTime(time.Unix(0, ts))
		s.DeletionTimestamp = &t
	}
	for _, r := range m.GetOwnerReferences() {
		ref := metav1.OwnerReference{APIVersion: r.GetApiVersion(), Kind: r.GetKind(), Name: r.GetName(), UID: types.UID(r.GetUid())}
		if r.GetController() {
			ref.Controller = ptr(true)
			ref.BlockOwnerDeletion = ptr(true)
		}
		s.OwnerReferences = append(s.OwnerReferences, ref)
	}
	for _, p := range es.GetPorts() {
		ep := discoveryv1.EndpointPort{Name: ptr(p.GetName()), Protocol: ptr(protocol(p.GetProtocol())), Port: ptr(p.GetPort())}
		if p.GetAppProtocol() != "" {
			ep.AppProtocol = ptr(p.GetAppProtocol())
		}
		s.Ports = append(s.Ports, ep)
	}
	for _, e := range es.GetEndpoints() {
		ep := discoveryv1.Endpoint{
			Addresses: append([]string(nil), e.GetAddresses()...),
			Conditions: discoveryv1.EndpointConditions{
				Ready: ptr(e.GetReady()), Serving: ptr(e.GetServing()), Terminating: ptr(e.GetTerminating()),
			},
		}
		if e.GetZone() != "" {
			ep.Zone = ptr(e.GetZone())
		}
		if e.GetHostname() != "" {
			ep.Hostname = ptr(e.GetHostname())
		}
		if e.GetTargetRefName() != "" {
			ep.TargetRef = &corev1.ObjectReference{
				Kind: e.GetTargetRefKind(), Namespace: e.GetTargetRefNamespace(), Name: e.GetTargetRefName(), UID: types.UID(e.GetTargetRefUid()),
			}
			if ep.TargetRef.Kind == WorkloadKind {
				ep.TargetRef.APIVersion = WorkloadAPIVersion
			}
		}
		s.Endpoints = append(s.Endpoints, ep)
	}
	return s
}

// ServiceKeyOfSlice returns "namespace/service" for a slice this controller
// manages, or "" for any other slice.
func ServiceKeyOfSlice(o *watcherv1.Object) string {
	m := o.GetMeta()
	if m.GetLabels()[discoveryv1.LabelManagedBy] != ManagedBy {
		return ""
	}
	svc := m.GetLabels()[discoveryv1.LabelServiceName]
	if svc == "" {
		return ""
	}
	return objkey.Join(m.GetNamespace(), svc)
}
