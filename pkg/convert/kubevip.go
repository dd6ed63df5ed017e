package convert

import (
	"encoding/json"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// KubeVIPRequestAnnotation is kube-vip's request annotation, the only
// kube-vip.io/ annotation carried: ipam reads it as a requested address
// (allocator.AnnotationKubeVIPLoadBalancerIPs) when a user or
// kube-vip-cloud-provider wrote it, never when ipam did.
const KubeVIPRequestAnnotation = "kube-vip.io/loadbalancerIPs"

// IPAMFieldManager is ipam's field manager in managedFields (the ledger's
// and the status writer's).
const IPAMFieldManager = "ipledger-ipam"

// writtenByIPAM lists the annotations that are requests only when someone
// other than ipam wrote them. Requests are decided from the compact objects,
// which carry no managedFields, so the writer is told apart here, where the
// watcher converts a Service and managedFields are still there.
var writtenByIPAM = []string{KubeVIPRequestAnnotation}

// Carried reports whether the compact form of m carries its annotation key:
// the key is one of CarriedAnnotations, and is not one of the request
// annotations (kube-vip.io/loadbalancerIPs) that ipam's field manager
// manages — alone or beside another manager, as after two server-side
// applies of one value: what ipam wrote for kube-vip to announce is its own
// decision, and reading it back as a request would pin the address against
// every later change of the Service. An ipam writer must write it under
// IPAMFieldManager. The watcher calls Carried before it strips managedFields.
func Carried(m metav1.Object, key string) bool {
	if _, ok := CarriedAnnotations[key]; !ok {
		return false
	}
	for _, k := range writtenByIPAM {
		if key == k {
			return !managesAnnotation(m.GetManagedFields(), IPAMFieldManager, key)
		}
	}
	return true
}

// IPAMKubeVIPLoadBalancerIPs is the kube-vip.io/loadbalancerIPs annotation
// of m when ipam's field manager manages it (Carried drops it then), and ""
// otherwise: what ipam wrote for kube-vip to announce, which ipam compares
// with what it would write now. Like Carried, it needs managedFields.
func IPAMKubeVIPLoadBalancerIPs(m metav1.Object) string {
	v, ok := m.GetAnnotations()[KubeVIPRequestAnnotation]
	if !ok || Carried(m, KubeVIPRequestAnnotation) {
		return ""
	}
	return v
}

// managesAnnotation reports whether manager manages metadata.annotations[key]
// in fields; an entry that does not parse says nothing.
func managesAnnotation(fields []metav1.ManagedFieldsEntry, manager, key string) bool {
	for _, f := range fields {
		if f.Manager != manager || f.FieldsV1 == nil {
			continue
		}
		var set struct {
			Metadata struct {
				Annotations map[string]json.RawMessage `json:"f:annotations"`
			} `json:"f:metadata"`
		}
		if json.Unmarshal(f.FieldsV1.Raw, &set) != nil {
			continue
		}
		if _, ok := set.Metadata.Annotations["f:"+key]; ok {
			return true
		}
	}
	return false
}
