package allocator

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
)

// The annotations a Service may carry. Each is also accepted under the two
// MetalLB prefixes (metallb.io/ and metallb.universe.tf/), and the request
// and sharing ones under Cilium LB-IPAM's names, for migration
// (annotationSpellings).
const (
	AnnotationLoadBalancerIPs = "ipledger.io/loadBalancerIPs"
	AnnotationAddressPool     = "ipledger.io/address-pool"
	AnnotationAllowSharedIP   = "ipledger.io/allow-shared-ip"
	// AnnotationSharingCrossNamespace lists the namespaces (comma separated,
	// or "*" for all) whose Services may share this Service's address under
	// its allow-shared-ip key. A sharing key joins Services of one namespace
	// only; two Services of different namespaces share when each lists the
	// other's namespace, so the owner of an address decides who may join it.
	// MetalLB has no such rule (it shares across namespaces, the
	// CVE-2020-8554 class this closes); Cilium LB-IPAM has the same rule
	// under lbipam.cilium.io/sharing-cross-namespace, read as this one.
	AnnotationSharingCrossNamespace = "ipledger.io/sharing-cross-namespace"
	// AnnotationAllocatedFromPool is written by ipam, never read as a request.
	AnnotationAllocatedFromPool = "ipledger.io/allocated-from-pool"
)

// annotationSpellings are the accepted keys of each annotation, ours first,
// then MetalLB's, then Cilium LB-IPAM's (lbipam.cilium.io/ and the older
// io.cilium/lb-ipam- names it still reads). Cilium has no annotation naming
// a pool (its pools select Services by label), and MetalLB none for sharing
// across namespaces.
var annotationSpellings = map[string][]string{
	AnnotationLoadBalancerIPs: {AnnotationLoadBalancerIPs, "metallb.io/loadBalancerIPs", "metallb.universe.tf/loadBalancerIPs",
		"lbipam.cilium.io/ips", "io.cilium/lb-ipam-ips", AnnotationKubeVIPLoadBalancerIPs},
	AnnotationAddressPool: {AnnotationAddressPool, "metallb.io/address-pool", "metallb.universe.tf/address-pool"},
	AnnotationAllowSharedIP: {AnnotationAllowSharedIP, "metallb.io/allow-shared-ip", "metallb.universe.tf/allow-shared-ip",
		"lbipam.cilium.io/sharing-key", "io.cilium/lb-ipam-sharing-key"},
	AnnotationSharingCrossNamespace: {AnnotationSharingCrossNamespace,
		"lbipam.cilium.io/sharing-cross-namespace", "io.cilium/lb-ipam-sharing-cross-namespace"},
}

// RequestAnnotations are the keys of every annotation ParseServiceRequest
// reads, sorted.
func RequestAnnotations() []string {
	var out []string
	for _, keys := range annotationSpellings {
		out = append(out, keys...)
	}
	slices.Sort(out)
	return out
}

// ServiceRequest is what a Service's annotations and spec.loadBalancerIP ask for.
type ServiceRequest struct {
	RequestedIPs []netip.Addr // at most one per family, in the order written
	Pool         string
	// PoolFrom, DefaultPool and DefaultPoolFrom are Request's, set by
	// JoinGateway.
	PoolFrom, DefaultPool, DefaultPoolFrom string
	SharingKey                             string
	// CrossNamespace are the other namespaces whose Services may share the
	// address (AnnotationSharingCrossNamespace), sorted; "*" is all of them.
	CrossNamespace []string
}

// ParseServiceRequest reads ipledger.io/loadBalancerIPs (comma list, at most
// one IP per family), spec.loadBalancerIP, ipledger.io/address-pool,
// ipledger.io/allow-shared-ip and ipledger.io/sharing-cross-namespace, each
// also under its other spellings (annotationSpellings: MetalLB's and Cilium
// LB-IPAM's). An annotation with an empty value counts as absent.
// Several spellings of one annotation are fine when they agree and an error
// when they differ: there is no silent winner, because a migrated Service
// whose two annotations disagree would otherwise get an IP its owner did not
// mean (Cilium itself lets lbipam.cilium.io/ win over io.cilium/ silently).
// The loadBalancerIPs annotation together with spec.loadBalancerIP is
// an error even when they agree (Kubernetes deprecated the field; keep one).
// Errors are *Error with ReasonInvalidRequest naming the field and the fix.
func ParseServiceRequest(annotations map[string]string, loadBalancerIP string) (ServiceRequest, error) {
	var out ServiceRequest
	loadBalancerIP, err := kubeVIPLoadBalancerIP(annotations, loadBalancerIP) // kubevip.go
	if err != nil {
		return ServiceRequest{}, err
	}

	ipsKey, ipsVal, err := oneAnnotation(annotations, AnnotationLoadBalancerIPs, func(a, b string) bool {
		x, errA := parseIPList("", a)
		y, errB := parseIPList("", b)
		if errA != nil || errB != nil {
			return a == b
		}
		slices.SortFunc(x, netip.Addr.Compare)
		slices.SortFunc(y, netip.Addr.Compare)
		return slices.Equal(x, y)
	})
	if err != nil {
		return ServiceRequest{}, err
	}
	lbIP := strings.TrimSpace(loadBalancerIP)
	switch {
	case ipsKey != "" && lbIP != "":
		return ServiceRequest{}, invalid("both %s and spec.loadBalancerIP are set; keep only %s (spec.loadBalancerIP is deprecated)", ipsKey, AnnotationLoadBalancerIPs)
	case ipsKey != "":
		if out.RequestedIPs, err = parseIPList(ipsKey, ipsVal); err != nil {
			return ServiceRequest{}, err
		}
	case lbIP != "":
		a, err := parseRequestedIP("spec.loadBalancerIP", lbIP)
		if err != nil {
			return ServiceRequest{}, err
		}
		out.RequestedIPs = []netip.Addr{a}
	}

	poolKey, pool, err := oneAnnotation(annotations, AnnotationAddressPool, nil)
	if err != nil {
		return ServiceRequest{}, err
	}
	if poolKey != "" {
		if msg := poolNameProblem(pool); msg != "" {
			return ServiceRequest{}, invalid("%s: %q %s", poolKey, pool, msg)
		}
		out.Pool = pool
	}

	if _, out.SharingKey, err = oneAnnotation(annotations, AnnotationAllowSharedIP, nil); err != nil {
		return ServiceRequest{}, err
	}
	crossKey, cross, err := oneAnnotation(annotations, AnnotationSharingCrossNamespace, func(a, b string) bool {
		x, errA := parseNamespaceList("", a)
		y, errB := parseNamespaceList("", b)
		return errA == nil && errB == nil && slices.Equal(x, y)
	})
	if err != nil {
		return ServiceRequest{}, err
	}
	if out.CrossNamespace, err = parseNamespaceList(crossKey, cross); err != nil {
		return ServiceRequest{}, err
	}
	return out, nil
}

// parseNamespaceList reads AnnotationSharingCrossNamespace (under the
// spelling key): namespace names separated by commas, or "*"; "" is none.
func parseNamespaceList(key, s string) ([]string, error) {
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	var out []string
	for i, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		if part != "*" && !isDNSLabel(part) {
			return nil, invalid("%s: entry %d %q is not a namespace name or \"*\"; write namespaces separated by commas (team-a,team-b), or \"*\" for every namespace",
				key, i, part)
		}
		if !slices.Contains(out, part) {
			out = append(out, part)
		}
	}
	slices.Sort(out)
	return out, nil
}

// oneAnnotation returns the key and trimmed value of the one meaning of the
// annotation name across its spellings; same(a, b) compares two values
// (nil: string equality).
func oneAnnotation(annotations map[string]string, name string, same func(a, b string) bool) (string, string, error) {
	var key, val string
	for _, k := range annotationSpellings[name] {
		v := strings.TrimSpace(annotations[k])
		if v == "" {
			continue
		}
		if key == "" {
			key, val = k, v
			continue
		}
		if v != val && (same == nil || !same(val, v)) {
			return "", "", invalid("%s=%q and %s=%q disagree; remove %s or make them equal", key, val, k, v, k)
		}
	}
	return key, val, nil
}

func parseIPList(field, s string) ([]netip.Addr, error) {
	var out []netip.Addr
	for i, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			return nil, invalid("%s: entry %d of %q is empty; write a comma-separated list such as 192.0.2.10,2001:db8::10", field, i, s)
		}
		a, err := parseRequestedIP(field, part)
		if err != nil {
			return nil, err
		}
		for _, b := range out {
			if FamilyOf(a) == FamilyOf(b) {
				return nil, invalid("%s: %s and %s are both %s; list at most one IP per family", field, b, a, FamilyOf(a))
			}
		}
		out = append(out, a)
	}
	return out, nil
}

func parseRequestedIP(field, s string) (netip.Addr, error) {
	a, err := netip.ParseAddr(s)
	switch {
	case err != nil:
		return netip.Addr{}, invalid("%s: %q is not an IP address; write one such as 192.0.2.10 or 2001:db8::10", field, s)
	case a.Zone() != "":
		return netip.Addr{}, invalid("%s: %q has a zone; remove %%%s", field, s, a.Zone())
	case a.Is4In6():
		return netip.Addr{}, invalid("%s: %q is an IPv4-mapped IPv6 address; write %s", field, s, a.Unmap())
	case a.IsUnspecified():
		return netip.Addr{}, invalid("%s: %q is the unspecified address; name a real IP or remove the field", field, s)
	}
	return a, nil
}

// poolNameProblem checks an IPPool name (a DNS subdomain); "" when fine.
func poolNameProblem(s string) string {
	if len(s) > 253 {
		return "is longer than 253 characters, so it cannot name an IPPool"
	}
	for i, r := range s {
		ok := r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || (r == '-' || r == '.') && i > 0 && i < len(s)-1
		if !ok {
			return "is not a valid IPPool name (lowercase letters, digits, '-' and '.', starting and ending with a letter or digit)"
		}
	}
	return ""
}

func invalid(format string, args ...any) *Error {
	return &Error{Reason: ReasonInvalidRequest, Message: fmt.Sprintf(format, args...)}
}

// poolSource is what names the request's pool, for messages.
func (r Request) poolSource() string {
	if r.PoolFrom != "" {
		return r.PoolFrom
	}
	return AnnotationAddressPool
}

// tenant is the namespace whose pools serve the request (Request.Namespace).
func (r Request) tenant() string {
	if r.Namespace != "" {
		return r.Namespace
	}
	return namespaceOf(r.Service)
}

// inNamespace says, for a refusal, which namespace's pools serve the request.
func (r Request) inNamespace() string {
	if t := r.tenant(); t != namespaceOf(r.Service) {
		return "the Service serves a Gateway of namespace " + t
	}
	return "the Service is in namespace " + r.tenant()
}

// namespaceOf is the namespace of a "namespace/name" Service key.
func namespaceOf(service string) string {
	ns, _, _ := strings.Cut(service, "/")
	return ns
}

func checkServiceKey(s string) *Error {
	ns, name, ok := strings.Cut(s, "/")
	if !ok || ns == "" || name == "" || strings.Contains(name, "/") {
		return invalid("Service key %q is not namespace/name", s)
	}
	return nil
}
