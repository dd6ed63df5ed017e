package informers

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ipledger/ipledger/pkg/convert"
)

// TestStripDropsKubeVIPAnnotationIPAMWrote: the informers' transform
// strips managedFields (StripManagedFields) before converting, so the writer of
// kube-vip.io/loadbalancerIPs must be told apart before that: the stream
// carries it when kube-vip-cloud-provider wrote it, not when ipam did.
func TestStripDropsKubeVIPAnnotationIPAMWrote(t *testing.T) {
	for _, tt := range []struct {
		manager string
		want    bool
	}{{"kube-vip-cloud-provider", true}, {convert.IPAMFieldManager, false}} {
		svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "s", ResourceVersion: "1",
			Annotations: map[string]string{convert.KubeVIPRequestAnnotation: "192.0.2.1"},
			ManagedFields: []metav1.ManagedFieldsEntry{{Manager: tt.manager, Operation: metav1.ManagedFieldsOperationUpdate, FieldsType: "FieldsV1",
				FieldsV1: &metav1.FieldsV1{Raw: []byte(`{"f:metadata":{"f:annotations":{"f:kube-vip.io/loadbalancerIPs":{}}}}`)}}}}}
		out, err := StripManagedFields(svc)
		if err != nil {
			t.Fatal(err)
		}
		if _, got := out.(*corev1.Service).Annotations[convert.KubeVIPRequestAnnotation]; got != tt.want {
			t.Errorf("written by %s: kept %t, want %t", tt.manager, got, tt.want)
		}
	}
}
