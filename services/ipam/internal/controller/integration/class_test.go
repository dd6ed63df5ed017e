package integration

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestRequiredClassLeavesClassLessServicesAlone: beside a cloud provider's
// controller (or MetalLB during a migration), ipam with --require-lb-class
// writes nothing to a Service without a loadBalancerClass — no status, no
// condition, no Event — and still serves its own class.
func TestRequiredClassLeavesClassLessServicesAlone(t *testing.T) {
	h := newHarness(t)
	h.requireClass = true
	pool := "tclass-" + h.lease[len("ipam-"):]
	h.poolIn(pool, []string{h.ns}, "10.78.3.0/30")
	h.service("classless", nil, func(s *corev1.Service) { s.Spec.LoadBalancerClass = nil })
	h.service("ours", nil) // younger: decided in the same pass or a later one
	h.start("ipam-0")
	h.expect(wait, map[string]string{"ours": "10.78.3.0"})

	ctx := context.Background()
	s, err := h.env.Client.CoreV1().Services(h.ns).Get(ctx, "classless", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(s.Status.LoadBalancer.Ingress) > 0 || len(s.Status.Conditions) > 0 || s.Annotations["ipledger.io/allocated-from-pool"] != "" {
		t.Fatalf("ipam wrote to a class-less Service: %+v, annotations %v", s.Status, s.Annotations)
	}
	evs, err := h.env.Client.CoreV1().Events(h.ns).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=classless"})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range evs.Items {
		if e.Source.Component == "ipledger-ipam" || e.ReportingController == "ipledger-ipam" {
			t.Fatalf("ipam posted an Event on a class-less Service: %s %s", e.Reason, e.Message)
		}
	}
}

// TestRequiredClassNeverTakesAnotherControllersAddress: beside MetalLB
// (--require-lb-class, an IPPool over MetalLB's range), the address in a
// class-less Service's status is MetalLB's, at a restart and while ipam
// runs; ipam hands it out only once that Service is gone. Before the fix
// ipam gave 10.80.4.0 to "first" as well.
func TestRequiredClassNeverTakesAnotherControllersAddress(t *testing.T) {
	h := newHarness(t)
	h.requireClass = true
	h.watchDuplicates()
	pool := "tforeign-" + h.lease[len("ipam-"):]
	h.poolIn(pool, []string{h.ns}, "10.80.4.0/30")
	classless := func(s *corev1.Service) { s.Spec.LoadBalancerClass = nil }
	h.service("metallb-a", nil, classless)
	h.setStatus("metallb-a", "10.80.4.0")
	h.start("ipam-0")
	h.service("first", nil)
	h.expect(wait, map[string]string{"first": "10.80.4.1"})

	h.service("metallb-b", nil, classless)
	h.setStatus("metallb-b", "10.80.4.2")
	h.service("second", nil)
	h.expect(wait, map[string]string{"second": "10.80.4.3"})

	if err := h.env.Client.CoreV1().Services(h.ns).Delete(context.Background(), "metallb-a", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	h.service("third", nil)
	h.expect(wait, map[string]string{"third": "10.80.4.0", "metallb-b": "10.80.4.2"})
}
