package allocator

import (
	"net/netip"
	"strings"
)

// AnnotationKubeVIPLoadBalancerIPs is kube-vip's request annotation: the
// addresses kube-vip-cloud-provider allocated (or a user chose), which
// kube-vip announces. ipam reads it as another spelling of
// AnnotationLoadBalancerIPs, so that a Service migrated from
// kube-vip-cloud-provider keeps asking for what it holds — but only when a
// user or kube-vip-cloud-provider wrote it: the watcher drops it from a
// Service whose managedFields say ipam (field manager ipledger-ipam) wrote
// it (pkg/convert, KubeVIPRequestAnnotation), since an address ipam wrote
// for kube-vip to announce is its own decision, not a request to honour.
const AnnotationKubeVIPLoadBalancerIPs = "kube-vip.io/loadbalancerIPs"

// kubeVIPLoadBalancerIP is what ParseServiceRequest reads of
// spec.loadBalancerIP beside kube-vip's annotation. kube-vip-cloud-provider
// copies the first address of its annotation into spec.loadBalancerIP (for
// kube-vip versions that read only the field), so a field equal to that
// address is the same request, not a second one, and is not read (""); any
// other field is left for ParseServiceRequest's rule (both set is invalid).
// kube-vip's DHCP request, 0.0.0.0, is refused with a message saying so.
func kubeVIPLoadBalancerIP(annotations map[string]string, loadBalancerIP string) (string, error) {
	v := strings.TrimSpace(annotations[AnnotationKubeVIPLoadBalancerIPs])
	if v == "" {
		return loadBalancerIP, nil
	}
	for _, part := range strings.Split(v, ",") {
		if a, err := netip.ParseAddr(strings.TrimSpace(part)); err == nil && a.IsUnspecified() {
			return "", invalid("%s: %s asks kube-vip for an address by DHCP, which ipam does not do; name an address of an IPPool, or remove the annotation (and spec.loadBalancerIP) to get one",
				AnnotationKubeVIPLoadBalancerIPs, a)
		}
	}
	first, _, _ := strings.Cut(v, ",")
	a, errA := netip.ParseAddr(strings.TrimSpace(first))
	b, errB := netip.ParseAddr(strings.TrimSpace(loadBalancerIP))
	if errA == nil && errB == nil && a == b {
		return "", nil
	}
	return loadBalancerIP, nil
}
