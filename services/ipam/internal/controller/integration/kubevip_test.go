package integration

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// TestKubeVIPAnnotation: through the real API server and watcher,
// kube-vip.io/loadbalancerIPs is a request when kube-vip-cloud-provider (or
// a user) wrote it — with the spec.loadBalancerIP kube-vip-cloud-provider
// copies beside it — and not when ipam's field manager wrote it (no ipam
// writes it today: this stands in for one, by managedFields alone); a
// DHCP request (0.0.0.0) is refused saying so.
func TestKubeVIPAnnotation(t *testing.T) {
	h := newHarness(t)
	h.pool("tkubevip-"+h.lease[len("ipam-"):], "10.78.32.0/28")
	create := func(name, manager, ips, lbIP string) {
		t.Helper()
		class := h.class
		s := &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: h.ns, Annotations: map[string]string{"kube-vip.io/loadbalancerIPs": ips}},
			Spec: corev1.ServiceSpec{
				Type: corev1.ServiceTypeLoadBalancer, LoadBalancerClass: &class, LoadBalancerIP: lbIP,
				Ports: []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromInt32(8080), Protocol: corev1.ProtocolTCP}},
			},
		}
		if _, err := h.env.Client.CoreV1().Services(h.ns).Create(context.Background(), s, metav1.CreateOptions{FieldManager: manager}); err != nil {
			t.Fatal(err)
		}
	}
	create("by-kube-vip", "kube-vip-cloud-provider", "10.78.32.9", "10.78.32.9") // as kube-vip-cloud-provider writes it
	create("by-ipam", "ipledger-ipam", "10.78.32.7", "")
	create("dhcp", "kube-vip-cloud-provider", "0.0.0.0", "0.0.0.0")
	h.start("ipam-0")

	if got := h.waitAllocation(h.ns, "by-kube-vip", "Allocated"); got.ips != "10.78.32.9" {
		t.Errorf("by-kube-vip: %s, want kube-vip.io/loadbalancerIPs's 10.78.32.9", got.ips)
	}
	// ipam's own write is not a request: the Service gets an address
	// chosen as for any Service without one (the pool's lowest free).
	if got := h.waitAllocation(h.ns, "by-ipam", "Allocated"); got.ips == "10.78.32.7" || got.ips == "" {
		t.Errorf("by-ipam: %q, want an address ipam chose, not 10.78.32.7 that ipledger-ipam wrote", got.ips)
	}
	d := h.waitAllocation(h.ns, "dhcp", "InvalidRequest")
	if !strings.Contains(d.detail, "DHCP") || d.ips != "" {
		t.Errorf("dhcp: %+v, want InvalidRequest saying DHCP, no address", d)
	}
}
