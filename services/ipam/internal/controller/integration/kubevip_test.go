package integration

import (
	"context"
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/ipledger/ipledger/lab/testenv"
)

// TestKubeVIPAnnotation: through the real API server and watcher,
// kube-vip.io/loadbalancerIPs is a request when kube-vip-cloud-provider (or
// a user) wrote it — with the spec.loadBalancerIP kube-vip-cloud-provider
// copies beside it — and not when ipam's field manager wrote it (no ipam
// writes it under --write-kube-vip-annotation: this stands in for one, by
// managedFields alone); a
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

// TestWritesKubeVIPAnnotation: with --write-kube-vip-annotation, ipam writes
// kube-vip.io/loadbalancerIPs naming the address it granted, under its field
// manager, and does not take it back as a request: moving the Service's
// request (ipledger.io/loadBalancerIPs) to another address moves the
// annotation with it. Another writer's annotation stays theirs. A term
// without the flag removes what ipam wrote, and only that.
func TestWritesKubeVIPAnnotation(t *testing.T) {
	h := newHarness(t)
	h.writeKubeVIP = true
	h.pool("twkubevip-"+h.lease[len("ipam-"):], "10.78.33.0/29")
	ctx := context.Background()
	services := h.env.Client.CoreV1().Services(h.ns)
	create := func(name string, annotations map[string]string) {
		t.Helper()
		class := h.class
		s := &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: h.ns, Annotations: annotations},
			Spec: corev1.ServiceSpec{
				Type: corev1.ServiceTypeLoadBalancer, LoadBalancerClass: &class,
				Ports: []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromInt32(8080), Protocol: corev1.ProtocolTCP}},
			},
		}
		if _, err := services.Create(ctx, s, metav1.CreateOptions{FieldManager: "kubectl"}); err != nil {
			t.Fatal(err)
		}
	}
	// kubeVIP waits until the Service's annotation is want ("": absent) and
	// returns its managers.
	kubeVIP := func(name, want string) []string {
		t.Helper()
		var managers []string
		testenv.Eventually(t, wait, func() error {
			s, err := services.Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			got, ok := s.Annotations["kube-vip.io/loadbalancerIPs"]
			if got != want || ok != (want != "") {
				return fmt.Errorf("%s: kube-vip.io/loadbalancerIPs %q (present %t), want %q", name, got, ok, want)
			}
			managers = nil
			for _, f := range s.ManagedFields {
				if f.FieldsV1 != nil && strings.Contains(string(f.FieldsV1.Raw), `"f:kube-vip.io/loadbalancerIPs"`) {
					managers = append(managers, f.Manager)
				}
			}
			return nil
		})
		return managers
	}
	create("asks", map[string]string{"ipledger.io/loadBalancerIPs": "10.78.33.5"})
	create("any", nil)
	create("theirs", map[string]string{"kube-vip.io/loadbalancerIPs": "10.78.33.6"})
	r := h.start("ipam-0")

	if got := h.waitAllocation(h.ns, "asks", "Allocated"); got.ips != "10.78.33.5" {
		t.Fatalf("asks: %s, want 10.78.33.5", got.ips)
	}
	if m := kubeVIP("asks", "10.78.33.5"); len(m) != 1 || m[0] != "ipledger-ipam" {
		t.Errorf("asks: kube-vip.io/loadbalancerIPs managed by %v, want ipledger-ipam alone", m)
	}
	anyIP := h.waitAllocation(h.ns, "any", "Allocated").ips
	kubeVIP("any", anyIP)
	if got := h.waitAllocation(h.ns, "theirs", "Allocated"); got.ips != "10.78.33.6" {
		t.Errorf("theirs: %s, want its request 10.78.33.6", got.ips)
	}
	if m := kubeVIP("theirs", "10.78.33.6"); len(m) != 1 || m[0] != "kubectl" {
		t.Errorf("theirs: kube-vip.io/loadbalancerIPs managed by %v, want kubectl's alone", m)
	}

	// The request moves: ipam grants the new address and the annotation
	// follows; what ipam wrote before is no request holding the old one.
	if _, err := services.Patch(ctx, "asks", types.MergePatchType, []byte(`{"metadata":{"annotations":{"ipledger.io/loadBalancerIPs":"10.78.33.4"}}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	kubeVIP("asks", "10.78.33.4")
	if got := h.waitAllocation(h.ns, "asks", "Allocated"); got.ips != "10.78.33.4" {
		t.Errorf("asks after its request moved: %s, want 10.78.33.4", got.ips)
	}

	// Without the flag, a new term removes what ipam wrote, and only that.
	r.stop()
	h.writeKubeVIP = false
	h.start("ipam-1")
	kubeVIP("asks", "")
	kubeVIP("any", "")
	kubeVIP("theirs", "10.78.33.6")
	if got := h.waitAllocation(h.ns, "any", "Allocated"); got.ips != anyIP {
		t.Errorf("any: %s after the restart, want %s kept", got.ips, anyIP)
	}
}
