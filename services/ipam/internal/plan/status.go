package plan

import (
	"slices"
	"strings"
	"time"

	watcherv1 "github.com/ipledger/ipledger/proto/ipledger/watcher/v1"
	"github.com/ipledger/ipledger/services/ipam/internal/allocator"
	"github.com/ipledger/ipledger/services/ipam/internal/objects"
)

// IPMode is written with every ingress entry: the API server defaults it, and
// leaving it out would make every second pass see a difference.
const IPMode = "VIP"

// Condition is the ipledger.io/AddressAllocated condition.
type Condition struct {
	Status, Reason, Message string
	ObservedGeneration      int64
	LastTransition          time.Time
}

// Status is the part of a Service ipam owns: its ingress, its condition, the
// allocated-from-pool annotation and the kube-vip.io/loadbalancerIPs ipam
// wrote.
type Status struct {
	Ingress []string // IPs, in order; every entry has ipMode VIP
	// Foreign is true when the ingress has entries ipam would not write
	// (hostnames, another ipMode): they must be rewritten.
	Foreign bool
	Cond    *Condition
	Pool    string // ipledger.io/allocated-from-pool
	// KubeVIP is kube-vip.io/loadbalancerIPs as ipam wrote it ("": ipam
	// wrote none; one another writer set is theirs, a request, never ipam's
	// to change).
	KubeVIP string
}

// StatusOf is the part of a streamed Service ipam owns, as it stands.
func StatusOf(obj *watcherv1.Object) Status {
	var s Status
	svc := obj.GetService()
	for _, in := range svc.GetIngress() {
		if in.GetIp() == "" || in.GetHostname() != "" || (in.GetIpMode() != "" && in.GetIpMode() != IPMode) {
			s.Foreign = true
		}
		if in.GetIp() != "" {
			s.Ingress = append(s.Ingress, in.GetIp())
		}
	}
	for _, c := range svc.GetConditions() {
		if c.GetType() == objects.ConditionType {
			s.Cond = &Condition{Status: c.GetStatus(), Reason: c.GetReason(), Message: c.GetMessage(),
				ObservedGeneration: c.GetObservedGeneration(), LastTransition: time.Unix(0, c.GetLastTransitionTime())}
		}
	}
	s.Pool = obj.GetMeta().GetAnnotations()[allocator.AnnotationAllocatedFromPool]
	s.KubeVIP = svc.GetIpamKubeVipLoadBalancerIps()
	return s
}

// ShowsAny reports whether the ingress names any of held's IPs.
func (s Status) ShowsAny(held []allocator.Allocation) bool {
	for _, h := range held {
		if slices.Contains(s.Ingress, h.IP.String()) {
			return true
		}
	}
	return false
}

// Without is s with held's IPs, our condition and annotations removed.
func (s Status) Without(held []allocator.Allocation) Status {
	out := Status{Foreign: s.Foreign}
	for _, ip := range s.Ingress {
		if !slices.ContainsFunc(held, func(h allocator.Allocation) bool { return h.IP.String() == ip }) {
			out.Ingress = append(out.Ingress, ip)
		}
	}
	return out
}

// Equal compares what ipam writes: ingress, condition (not its transition
// time) and annotations.
func (s Status) Equal(o Status) bool {
	if s.Foreign != o.Foreign || !slices.Equal(s.Ingress, o.Ingress) || s.Pool != o.Pool || s.KubeVIP != o.KubeVIP {
		return false
	}
	return CondEqual(s.Cond, o.Cond)
}

// CondEqual compares two conditions but for their transition time.
func CondEqual(a, b *Condition) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.Status == b.Status && a.Reason == b.Reason && a.Message == b.Message && a.ObservedGeneration == b.ObservedGeneration
}

// kubeVIPOf is the kube-vip.io/loadbalancerIPs ipam writes for a Service of
// the batch whose status shows ingress: its addresses, comma-separated in
// the status's order, as kube-vip reads them (v1.2.3, pkg/instance
// FetchServiceAddresses); "" (remove what ipam wrote) when it holds none or
// ipam does not write the annotation. Never when another writer set it (the
// stream carries it as a request then): what ipam granted for that request
// is in the status, and overwriting it would erase a request ipam refused.
func (b Batch) kubeVIPOf(obj *watcherv1.Object, ingress []string) string {
	if !b.WriteKubeVIPAnnotation {
		return ""
	}
	if _, theirs := obj.GetMeta().GetAnnotations()[allocator.AnnotationKubeVIPLoadBalancerIPs]; theirs {
		return ""
	}
	return strings.Join(ingress, ",")
}
