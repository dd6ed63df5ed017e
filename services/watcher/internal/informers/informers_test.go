package informers

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestStripManagedFields(t *testing.T) {
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "s",
		ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kubectl"}},
		Annotations: map[string]string{"kubectl.kubernetes.io/last-applied-configuration": "{}", "ipledger.io/loadBalancerIPs": "10.0.0.1",
			"metallb.io/address-pool": "p"}}}
	out, err := StripManagedFields(svc)
	if err != nil {
		t.Fatal(err)
	}
	got := out.(*corev1.Service)
	if got.ManagedFields != nil {
		t.Error("managedFields kept")
	}
	if len(got.Annotations) != 2 || got.Annotations["ipledger.io/loadBalancerIPs"] != "10.0.0.1" || got.Annotations["metallb.io/address-pool"] != "p" {
		t.Errorf("annotations %v, want only the ipledger.io/ and metallb.io/ ones", got.Annotations)
	}
}
