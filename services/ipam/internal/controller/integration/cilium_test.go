package integration

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// TestCiliumAnnotations: a Service migrated from Cilium LB-IPAM keeps
// meaning what its annotations said, through the real watcher: the
// address lbipam.cilium.io/ips requests, a sharing key (both of Cilium's
// spellings) joining two Services of one namespace, not a Service of
// another namespace that only it opted in, and a MetalLB request that
// disagrees with a Cilium one refused with a condition naming both.
func TestCiliumAnnotations(t *testing.T) {
	h := newHarness(t)
	other := h.env.Namespace(t, nil)
	h.pool("tcilium-"+h.lease[len("ipam-"):], "10.78.31.0/28")
	h.service("requested", map[string]string{"lbipam.cilium.io/ips": "10.78.31.9"})
	port := func(p int32) func(*corev1.Service) {
		return func(s *corev1.Service) {
			s.Spec.Ports = []corev1.ServicePort{{Name: "p", Port: p, TargetPort: intstr.FromInt32(p), Protocol: corev1.ProtocolTCP}}
		}
	}
	h.service("share-a", map[string]string{"lbipam.cilium.io/sharing-key": "web"}, port(80))
	h.service("share-b", map[string]string{"io.cilium/lb-ipam-sharing-key": "web"}, port(443))
	h.service("conflict", map[string]string{"metallb.universe.tf/loadBalancerIPs": "10.78.31.5", "lbipam.cilium.io/ips": "10.78.31.6"})
	h.start("ipam-0")

	requested := h.waitAllocation(h.ns, "requested", "Allocated")
	if requested.ips != "10.78.31.9" {
		t.Errorf("requested: %s, want lbipam.cilium.io/ips's 10.78.31.9", requested.ips)
	}
	a := h.waitAllocation(h.ns, "share-a", "Allocated")
	b := h.waitAllocation(h.ns, "share-b", "Allocated")
	if a.ips == "" || a.ips != b.ips {
		t.Errorf("share-a has %q and share-b %q: one sharing key, in two spellings, should join them", a.ips, b.ips)
	}
	c := h.waitAllocation(h.ns, "conflict", "InvalidRequest")
	for _, want := range []string{`metallb.universe.tf/loadBalancerIPs="10.78.31.5"`, `lbipam.cilium.io/ips="10.78.31.6"`, "disagree"} {
		if !strings.Contains(c.detail, want) {
			t.Errorf("conflict's condition %q does not say %q", c.detail, want)
		}
	}
	if c.ips != "" {
		t.Errorf("conflict got %s; a request whose annotations disagree gets nothing", c.ips)
	}

	// Another namespace's Service with the key, opting in to every
	// namespace: share-a and share-b did not opt in, so it does not join.
	h.serviceIn(other, "joins", map[string]string{"lbipam.cilium.io/sharing-key": "web", "lbipam.cilium.io/sharing-cross-namespace": "*"}, port(8443))
	joins := h.waitAllocation(other, "joins", "Allocated")
	if joins.ips == a.ips {
		t.Errorf("%s/joins got %s's shared address %s without its owners' opt-in", other, h.ns, a.ips)
	}
}
