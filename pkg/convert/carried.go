package convert

import (
	"crypto/sha256"
	"encoding/hex"
	"strconv"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// CarriedAnnotation says who reads a carried annotation, on which kind of
// object, and what it means: the table of docs/reference/annotations.md is
// generated from CarriedAnnotations (test/e2e/reference).
type CarriedAnnotation struct {
	// ReadBy names the consumer and the first release that reads it.
	ReadBy string
	// On is the kind of object it is read on.
	On string
	// Meaning is what it says, for the reference page.
	Meaning string
}

const (
	meaningRequest = "The addresses the Service requests, comma separated, at most one per family " +
		"([pools.md](../pools.md)). Every spelling is read; spellings that disagree are refused (`InvalidRequest`)."
	meaningPool          = "The IPPool the Service asks for by name; on a GatewayClass, the default pool of its Gateways."
	meaningSharingKey    = "A sharing key: Services of one namespace with the same key share one address when their ports do not clash."
	meaningSharingAcross = "The namespaces (comma separated, or `*`) whose Services may share this Service's address under its sharing key; " +
		"both sides must list each other ([security.md](../security.md#tenancy-of-addresses))."
	readerIPAM        = "ipam"
	onService         = "Service"
	spellingMetalLB   = " (MetalLB's spelling)"
	spellingCilium    = " (Cilium LB-IPAM's spelling)"
	spellingCiliumOld = " (Cilium LB-IPAM's older spelling)"
	sameAsOurs        = "As `ipledger.io/"
	readByIPAM02      = readerIPAM + " (0.2.0 on)"
	readByIPAM03      = readerIPAM + " (0.3.0 on)"
)

// CarriedAnnotations are the annotation keys the compact form carries; the
// watcher drops every other annotation before its informers cache the
// object, so these are all the annotations ipledger's controllers read. A
// key stays here while a consumer of this release or of the previous one
// (0.2.0, hack/previous-release) reads it: during a rolling upgrade the
// previous release's ipam, endpoints and eipd read what this release's
// watcher streams (docs/upgrading.md).
var CarriedAnnotations = map[string]CarriedAnnotation{
	// The address a Service requests (allocator.AnnotationLoadBalancerIPs)
	// and MetalLB's spellings of it.
	"ipledger.io/loadBalancerIPs":         {readByIPAM02, onService, meaningRequest},
	"metallb.io/loadBalancerIPs":          {readByIPAM02, onService, sameAsOurs + "loadBalancerIPs`" + spellingMetalLB + "."},
	"metallb.universe.tf/loadBalancerIPs": {readByIPAM02, onService, sameAsOurs + "loadBalancerIPs`" + spellingMetalLB + "."},
	// Cilium LB-IPAM's and kube-vip's spellings of it; kube-vip's only
	// when ipam did not write it (Carried).
	"lbipam.cilium.io/ips":  {readByIPAM03, onService, sameAsOurs + "loadBalancerIPs`" + spellingCilium + "."},
	"io.cilium/lb-ipam-ips": {readByIPAM03, onService, sameAsOurs + "loadBalancerIPs`" + spellingCiliumOld + "."},
	KubeVIPRequestAnnotation: {readByIPAM03, onService, sameAsOurs + "loadBalancerIPs` (kube-vip's spelling), when a user or " +
		"kube-vip-cloud-provider wrote it; ipam also writes it for kube-vip to announce, and never reads its own back."},
	// The pool a Service asks for (allocator.AnnotationAddressPool), and
	// MetalLB's spellings; on a GatewayClass, its Gateways' default pool.
	"ipledger.io/address-pool":         {readerIPAM + " (0.2.0 on; on GatewayClasses 0.3.0 on)", onService + ", GatewayClass", meaningPool},
	"metallb.io/address-pool":          {readByIPAM02, onService, sameAsOurs + "address-pool`" + spellingMetalLB + "."},
	"metallb.universe.tf/address-pool": {readByIPAM02, onService, sameAsOurs + "address-pool`" + spellingMetalLB + "."},
	// The sharing key (allocator.AnnotationAllowSharedIP) and MetalLB's and
	// Cilium LB-IPAM's spellings.
	"ipledger.io/allow-shared-ip":         {readByIPAM02, onService, meaningSharingKey},
	"metallb.io/allow-shared-ip":          {readByIPAM02, onService, sameAsOurs + "allow-shared-ip`" + spellingMetalLB + "."},
	"metallb.universe.tf/allow-shared-ip": {readByIPAM02, onService, sameAsOurs + "allow-shared-ip`" + spellingMetalLB + "."},
	"lbipam.cilium.io/sharing-key":        {readByIPAM03, onService, sameAsOurs + "allow-shared-ip`" + spellingCilium + "."},
	"io.cilium/lb-ipam-sharing-key":       {readByIPAM03, onService, sameAsOurs + "allow-shared-ip`" + spellingCiliumOld + "."},
	// The namespaces that may share a Service's address
	// (allocator.AnnotationSharingCrossNamespace) and Cilium's spellings.
	"ipledger.io/sharing-cross-namespace":       {readByIPAM02, onService, meaningSharingAcross},
	"lbipam.cilium.io/sharing-cross-namespace":  {readByIPAM03, onService, sameAsOurs + "sharing-cross-namespace`" + spellingCilium + "."},
	"io.cilium/lb-ipam-sharing-cross-namespace": {readByIPAM03, onService, sameAsOurs + "sharing-cross-namespace`" + spellingCiliumOld + "."},
	// The pool ipam allocated a Service from, which ipam writes and reads
	// back to tell whether its status write is done.
	"ipledger.io/allocated-from-pool": {readByIPAM02, onService, "Written by ipam: the IPPool the Service's address came from " +
		"(read back to tell that its write is done). Not a request."},
	// A Node's Elastic IP allocation, which eipd writes and reads back.
	"ipledger.io/eip-allocation-id": {"eipd (0.2.0 on)", "Node", "Written by eipd: the allocation ID of the Node's Elastic IP ([eipd.md](../eipd.md))."},
	// On a Namespace: the addresses its ExternalWorkloads may name
	// (endpoints' grants.Annotation; a list longer than MaxAnnotationBytes
	// becomes the marker, which grants nothing).
	"ipledger.io/workload-cidrs": {"endpoints (0.3.0 on)", "Namespace", "The CIDRs the namespace's ExternalWorkloads may name, " +
		"with `--workload-grants` ([security.md](../security.md#what-an-externalworkload-may-name))."},
	// On endpoints' EndpointSlices: copied into the updates it writes
	// (planner), as the EndpointSlice controller does.
	"endpoints.kubernetes.io/last-change-trigger-time": {"endpoints (0.2.0 on)", "EndpointSlice",
		"Kubernetes' own: copied into the EndpointSlices endpoints updates, as the EndpointSlice controller does."},
}

// The bounds of what the compact form carries of one object's metadata
// (docs/sizing.md derives the watcher's memory from them). The API server
// allows 256 KiB of annotations and labels without a bound but the object's;
// nothing ipledger reads comes near these.
const (
	// MaxAnnotationBytes is the longest annotation value carried; a longer
	// value of a carried key is replaced by its TruncatedAnnotation marker.
	// The longest value read is a sharing-cross-namespace list: 1 KiB holds
	// 16 namespaces of the longest names.
	MaxAnnotationBytes = 1024
	// MaxLabelBytes bounds an object's labels as encoded (LabelBytes). Labels are carried whole, because pools' selectors match
	// any label; an object whose labels are larger carries, instead, the one
	// label LabelsTruncatedLabel. 32 KiB holds the labels Node Feature
	// Discovery puts on large nodes.
	MaxLabelBytes = 32 << 10
)

// TruncatedPrefix starts the marker that replaces an annotation value longer
// than MaxAnnotationBytes: "ipledger.io/truncated:<bytes>:<sha256 of the
// value, hex>". Consumers refuse a request read from a marked annotation,
// naming it and the limit (ParseTruncated). The digest keeps equal values
// equal and different ones different, so a consumer that does not know the
// marker (0.2.0) still compares sharing keys right; no valid address, pool
// or namespace name contains ':'.
const TruncatedPrefix = "ipledger.io/truncated:"

// LabelsTruncatedLabel is the one label carried for an object whose labels
// exceed MaxLabelBytes; its value is their size in bytes.
const LabelsTruncatedLabel = "ipledger.io/labels-truncated"

// TruncatedAnnotation is the marker that replaces value.
func TruncatedAnnotation(value string) string {
	sum := sha256.Sum256([]byte(value))
	return TruncatedPrefix + strconv.Itoa(len(value)) + ":" + hex.EncodeToString(sum[:])
}

// ParseTruncated reports whether value is a TruncatedAnnotation marker, and
// the size in bytes of the value it replaced.
func ParseTruncated(value string) (size int, ok bool) {
	rest, ok := strings.CutPrefix(value, TruncatedPrefix)
	if !ok {
		return 0, false
	}
	n, _, _ := strings.Cut(rest, ":")
	size, err := strconv.Atoi(n)
	if err != nil {
		return 0, false
	}
	return size, true
}

// LabelsTruncated reports whether labels are the LabelsTruncatedLabel that
// stands for an object's labels, and the size in bytes of those.
func LabelsTruncated(labels map[string]string) (size int, ok bool) {
	v, ok := labels[LabelsTruncatedLabel]
	if !ok || len(labels) != 1 {
		return 0, false
	}
	size, err := strconv.Atoi(v)
	if err != nil {
		return 0, false
	}
	return size, true
}

// LabelBytes is the size of labels that MaxLabelBytes bounds: the lengths
// of their keys and values and, for each, labelOverhead, so that many tiny
// labels are bounded as what they cost encoded.
func LabelBytes(labels map[string]string) int {
	n := 0
	for k, v := range labels {
		n += len(k) + len(v) + labelOverhead
	}
	return n
}

// labelOverhead is the most a map entry of the compact form's labels costs
// encoded beyond its key and value: the entry's tag and length, and the key's
// and value's.
const labelOverhead = 8

// Annotations are the annotations of m the compact form carries: those
// Carried, each value longer than MaxAnnotationBytes replaced by its marker;
// nil when none. Applying it again to its result changes nothing.
func Annotations(m metav1.Object) map[string]string {
	var out map[string]string
	for k, v := range m.GetAnnotations() {
		if !Carried(m, k) {
			continue
		}
		if len(v) > MaxAnnotationBytes {
			v = TruncatedAnnotation(v)
		}
		if out == nil {
			out = map[string]string{}
		}
		out[k] = v
	}
	return out
}

// Labels are the labels the compact form carries: a copy of labels, or,
// when they exceed MaxLabelBytes, the LabelsTruncatedLabel alone; nil when
// there are none. Applying it again to its result changes nothing.
func Labels(labels map[string]string) map[string]string {
	if len(labels) == 0 {
		return nil
	}
	if n := LabelBytes(labels); n > MaxLabelBytes {
		return map[string]string{LabelsTruncatedLabel: strconv.Itoa(n)}
	}
	out := make(map[string]string, len(labels))
	for k, v := range labels {
		out[k] = v
	}
	return out
}
