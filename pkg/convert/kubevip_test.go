package convert

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func managed(manager, fields string) metav1.ManagedFieldsEntry {
	return metav1.ManagedFieldsEntry{Manager: manager, Operation: metav1.ManagedFieldsOperationUpdate, FieldsType: "FieldsV1",
		FieldsV1: &metav1.FieldsV1{Raw: []byte(fields)}}
}

// TestKubeVIPRequestByWriter: kube-vip.io/loadbalancerIPs is carried (ipam
// reads it as a request) when a user or kube-vip-cloud-provider wrote it,
// and dropped when ipam's own field manager manages it, alone or with
// another: an address ipam wrote for kube-vip to announce is not a request.
func TestKubeVIPRequestByWriter(t *testing.T) {
	const owns = `{"f:metadata":{"f:annotations":{"f:kube-vip.io/loadbalancerIPs":{}}}}`
	const other = `{"f:metadata":{"f:annotations":{"f:ipledger.io/allocated-from-pool":{}}}}`
	tests := []struct {
		name    string
		managed []metav1.ManagedFieldsEntry
		want    bool
	}{
		{name: "no managedFields (a user's create recorded nothing)", want: true},
		{name: "kube-vip-cloud-provider wrote it", managed: []metav1.ManagedFieldsEntry{managed("kube-vip-cloud-provider", owns), managed(IPAMFieldManager, other)}, want: true},
		{name: "kubectl annotate wrote it", managed: []metav1.ManagedFieldsEntry{managed("kubectl-annotate", owns)}, want: true},
		{name: "ipam wrote it", managed: []metav1.ManagedFieldsEntry{managed(IPAMFieldManager, owns)}},
		{name: "ipam applied it beside a user", managed: []metav1.ManagedFieldsEntry{managed("kubectl", owns), managed(IPAMFieldManager, owns)}},
		{name: "unreadable fields are not ipam's", managed: []metav1.ManagedFieldsEntry{managed(IPAMFieldManager, `{`)}, want: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "s", ManagedFields: tt.managed,
				Annotations: map[string]string{KubeVIPRequestAnnotation: "192.0.2.1", "kube-vip.io/serviceInterface": "eth1"}}}
			got := Service(svc).GetMeta().GetAnnotations()
			if _, ok := got[KubeVIPRequestAnnotation]; ok != tt.want {
				t.Errorf("carried %t, want %t (annotations %v)", ok, tt.want, got)
			}
			if _, ok := got["kube-vip.io/serviceInterface"]; ok {
				t.Errorf("kube-vip's other annotations are carried: %v", got)
			}
			if Carried(svc, KubeVIPRequestAnnotation) != tt.want {
				t.Errorf("Carried = %t, want %t", !tt.want, tt.want)
			}
			// What ipam wrote is in a field of its own, for ipam to compare
			// with what it would write now.
			wantIPAM := ""
			if !tt.want {
				wantIPAM = "192.0.2.1"
			}
			if got := Service(svc).GetService().GetIpamKubeVipLoadBalancerIps(); got != wantIPAM {
				t.Errorf("ipam_kube_vip_load_balancer_ips = %q, want %q", got, wantIPAM)
			}
		})
	}
}
