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
	// Every other test's ipam serves class-less Services: never leave one behind.
	t.Cleanup(func() {
		_ = h.env.Client.CoreV1().Services(h.ns).Delete(context.Background(), "classless", metav1.DeleteOptions{})
	})
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
