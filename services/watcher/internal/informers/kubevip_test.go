package informers

import (
	"log/slog"
	"reflect"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ipledger/ipledger/pkg/convert"
	watcherv1 "github.com/ipledger/ipledger/proto/ipledger/watcher/v1"
	"github.com/ipledger/ipledger/services/watcher/internal/store"
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

// TestTransformTellsIPAMItsKubeVIPAnnotation: the informers' transform
// converts a Service while its managedFields still say who wrote
// kube-vip.io/loadbalancerIPs: ipam's own write reaches ipam in
// ipam_kube_vip_load_balancer_ips (so it can tell whether to write it again),
// another writer's as the request annotation.
func TestTransformTellsIPAMItsKubeVIPAnnotation(t *testing.T) {
	h := &handler{kind: watcherv1.Kind_KIND_SERVICE, m: newMetrics(), log: slog.New(slog.DiscardHandler)}
	for _, tt := range []struct {
		manager, wantRequest, wantIPAM string
	}{{"kube-vip-cloud-provider", "192.0.2.1", ""}, {convert.IPAMFieldManager, "", "192.0.2.1"}} {
		svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "s", ResourceVersion: "1",
			Annotations: map[string]string{convert.KubeVIPRequestAnnotation: "192.0.2.1"},
			ManagedFields: []metav1.ManagedFieldsEntry{{Manager: tt.manager, Operation: metav1.ManagedFieldsOperationUpdate, FieldsType: "FieldsV1",
				FieldsV1: &metav1.FieldsV1{Raw: []byte(`{"f:metadata":{"f:annotations":{"f:kube-vip.io/loadbalancerIPs":{}}}}`)}}}}}
		// What ipam must be told, from the Service as the API server sends it.
		want := convert.Service(svc.DeepCopy())
		if got := want.GetMeta().GetAnnotations()[convert.KubeVIPRequestAnnotation]; got != tt.wantRequest {
			t.Errorf("written by %s: request annotation %q, want %q", tt.manager, got, tt.wantRequest)
		}
		if got := want.GetService().GetIpamKubeVipLoadBalancerIps(); got != tt.wantIPAM {
			t.Errorf("written by %s: ipam_kube_vip_load_balancer_ips %q, want %q", tt.manager, got, tt.wantIPAM)
		}
		out, err := h.transform(svc)
		if err != nil {
			t.Fatal(err)
		}
		c, ok := out.(cached)
		if !ok {
			t.Fatalf("written by %s: not converted: %T", tt.manager, out)
		}
		if !reflect.DeepEqual(c.Object, store.Encode(want)) {
			t.Errorf("written by %s: the transform cached another object than the Service converted with its managedFields", tt.manager)
		}
	}
}
