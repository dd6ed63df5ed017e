// Package cilium converts Cilium LB-IPAM's pools (CiliumLoadBalancerIPPool,
// cilium.io/v2 and v2alpha1) into ipledger IPPools, and says, per object and
// field, what it could not carry over. Like the MetalLB converter (whose
// IPPool types and YAML reading and writing it shares) it reads Cilium's
// objects as unstructured data, with no dependency on Cilium's Go module,
// and does no I/O: the migrate-cilium command gathers the objects and
// prints the result.
//
// What carries over: the blocks (spec.blocks, and the deprecated spec.cidrs
// of Cilium 1.13 and 1.14: a CIDR, a start-stop range or a single start
// address), allowFirstLastIPs as skipFirstLastIPs, and serviceSelector — its
// io.kubernetes.service.namespace requirements as the pool's namespaces
// (or a namespace selector), the rest as a Service selector. What does not
// carry over, or means something else in ipledger (disabled, a selector on
// io.kubernetes.service.name, announcing), is a Warning, never dropped
// silently. A pool whose conversion would serve Services Cilium's did not
// serve is not converted: the IPPool never widens who may take an address.
package cilium

import (
	"cmp"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/ipledger/ipledger/plugin/internal/conversion"
	"github.com/ipledger/ipledger/plugin/internal/metallb"
)

// Group is Cilium's API group.
const Group = "cilium.io"

// Kind is the kind of Cilium LB-IPAM's pools.
const Kind = "CiliumLoadBalancerIPPool"

// ConvertedFrom is the value of metallb.LabelConvertedFrom on every IPPool
// this converter writes: kubectl delete ippools -l ipledger.io/converted-from=cilium.
const ConvertedFrom = "cilium"

// The selector keys Cilium matches on a Service's metadata instead of its
// labels (operator/pkg/lbipam: serviceNamespaceLabel, serviceNameLabel).
const (
	ServiceNamespaceKey = "io.kubernetes.service.namespace"
	ServiceNameKey      = "io.kubernetes.service.name"
)

// NamespaceNameLabel is the label the API server sets on every Namespace to
// its name; a namespace requirement that the pool's namespaces list cannot
// say becomes a namespace selector on it.
const NamespaceNameLabel = "kubernetes.io/metadata.name"

// Limits of the IPPool CRD (deploy/kustomize/base/crds/ipledger.io_ippools.yaml).
const (
	maxAddresses  = 64
	maxNamespaces = 256
)

const reachabilityDoc = "docs/reachability.md"

// Result is what Convert produced (the MetalLB converter's shape).
type Result = metallb.Result

// poolSpec is the part of Cilium's CiliumLoadBalancerIPPoolSpec the
// converter reads (pkg/k8s/apis/cilium.io/v2).
type poolSpec struct {
	Blocks            []block               `json:"blocks"`
	Cidrs             []block               `json:"cidrs"`
	AllowFirstLastIPs *string               `json:"allowFirstLastIPs"`
	Disabled          bool                  `json:"disabled"`
	ServiceSelector   *metav1.LabelSelector `json:"serviceSelector"`
}

type block struct {
	Cidr  string `json:"cidr"`
	Start string `json:"start"`
	Stop  string `json:"stop"`
}

var knownSpecFields = []string{"blocks", "cidrs", "allowFirstLastIPs", "disabled", "serviceSelector"}

// Convert converts every CiliumLoadBalancerIPPool among objs, and warns
// about every other object.
func Convert(objs []*unstructured.Unstructured) Result {
	objs = slices.Clone(objs)
	slices.SortStableFunc(objs, func(a, b *unstructured.Unstructured) int {
		return cmp.Or(cmp.Compare(a.GetName(), b.GetName()), cmp.Compare(a.GroupVersionKind().Version, b.GroupVersionKind().Version))
	})
	var c converter
	for _, o := range objs {
		gvk := o.GroupVersionKind()
		obj := conversion.Describe(o)
		switch {
		case gvk.Group == Group && gvk.Kind == Kind:
			c.AddPool(o, "; give each pool once", c.pool)
		case gvk.Group == Group && (gvk.Kind == "CiliumL2AnnouncementPolicy" || strings.HasPrefix(gvk.Kind, "CiliumBGP")):
			c.Warn(obj, "", "not converted: announcing is reachability, not address management, and ipledger does not announce; keep it for Cilium's agents (%s)", reachabilityDoc)
		case gvk.Group == Group:
			c.Warn(obj, "", "not converted: %s is not LB-IPAM's address configuration", gvk.Kind)
		default:
			c.Warn(obj, "", "not converted: not a %s", Kind)
		}
	}
	return c.Result(c.overlaps)
}

// converter is one conversion's state (conversion.Converter) and the
// mapping of Cilium's pools.
type converter struct{ conversion.Converter }

// poolKind is how Cilium's pools are read (conversion.ReadPool).
var poolKind = conversion.PoolKind{
	Group: Group, Versions: []string{"v2", "v2alpha1"}, Export: "cilium.io/v2 or v2alpha1", Source: ConvertedFrom, KnownSpecFields: knownSpecFields,
}

// pool converts one CiliumLoadBalancerIPPool; false when it produces no IPPool.
func (c *converter) pool(o *unstructured.Unstructured) (metallb.IPPool, bool) {
	var spec poolSpec
	out, _, ok := c.ReadPool(o, poolKind, &spec)
	if !ok {
		return metallb.IPPool{}, false
	}
	obj := conversion.Describe(o)
	out.Spec.AutoAssign = true
	addrs, wideCIDR, ok := c.blocks(obj, spec)
	out.Spec.Addresses = addrs
	out.Spec.SkipFirstLastIPs, _ = c.firstLast(obj, spec.AllowFirstLastIPs, wideCIDR)
	if spec.Disabled {
		out.Spec.AutoAssign = false
		c.Warn(obj, "spec.disabled", "ipledger has no disabled pool; written as autoAssign: false, so ipam gives none of its addresses to a Service "+
			"automatically, but still to one that requests one of them (ipledger.io/loadBalancerIPs, lbipam.cilium.io/ips) or names the pool "+
			"(ipledger.io/address-pool), where Cilium allocates no new address from a disabled pool; Services holding its addresses keep them in both")
	}
	if sel := spec.ServiceSelector; sel != nil {
		alloc, selOK := c.selector(obj, *sel)
		ok = ok && selOK
		if len(alloc.Namespaces) > 0 || len(alloc.NamespaceSelectors) > 0 || len(alloc.ServiceSelectors) > 0 {
			out.Spec.Allocation = &alloc
		}
	}
	if conflict := poolConflict(o); conflict != "" {
		c.Warn(obj, "status", "Cilium marks this pool conflicting (%s) and gives out none of its addresses; ipam makes the younger of two overlapping IPPools Conflicting as well, so check both before applying", conflict)
	}
	c.WarnMetadata(o, "")
	return out, ok
}

// blocks converts the pool's blocks into the IPPool's entries, each once.
// Cilium 1.15 and later read spec.blocks; 1.13 and 1.14 had spec.cidrs,
// which later versions still accept in v2alpha1. wideCIDR: a block is a
// CIDR where allowFirstLastIPs matters (convertBlock). false when the pool
// cannot be converted because of them.
func (c *converter) blocks(obj string, spec poolSpec) (addrs []string, wideCIDR, ok bool) {
	type entry struct {
		field string
		b     block
	}
	var entries []entry
	for i, b := range spec.Cidrs {
		entries = append(entries, entry{fmt.Sprintf("spec.cidrs[%d]", i), b})
	}
	for i, b := range spec.Blocks {
		entries = append(entries, entry{fmt.Sprintf("spec.blocks[%d]", i), b})
	}
	ok = true
	if len(entries) == 0 {
		c.Warn(obj, "spec.blocks", "not converted: the pool has no blocks, so Cilium gave out none of its addresses either")
		ok = false
	}
	seen := map[string]bool{}
	for _, e := range entries {
		addr, notes, wide, err := convertBlock(e.b)
		if err != nil {
			c.Warn(obj, e.field, "not converted: %v", err)
			ok = false
			continue
		}
		wideCIDR = wideCIDR || wide
		for _, n := range notes {
			c.Warn(obj, e.field, "%s", n)
		}
		if seen[addr] {
			c.Warn(obj, e.field, "%s repeats an earlier block; written once", addr)
			continue
		}
		seen[addr] = true
		addrs = append(addrs, addr)
	}
	if len(addrs) > maxAddresses {
		c.Warn(obj, "spec.blocks", "not converted: %d blocks, and an IPPool holds at most %d; merge adjacent blocks into ranges or split the pool", len(addrs), maxAddresses)
		ok = false
	}
	return addrs, wideCIDR, ok
}

// overlaps warns, on the later of two converted pools (in the order
// kubectl apply creates them), that it shares addresses with the earlier:
// Cilium marks the newer of two overlapping pools conflicting, and ipam
// makes the younger IPPool Conflicting, so it gives out nothing.
func (c *converter) overlaps() {
	for _, o := range conversion.Overlaps(c.Pools) {
		c.Warn(c.Pools[o.Later].Metadata.Annotations[metallb.AnnotationConvertedFrom], "spec.blocks",
			"shares addresses (%s, …) with IPPool %s: ipam, like Cilium, makes the younger of two overlapping pools Conflicting, "+
				"and a Conflicting pool gives out nothing; remove the overlap before applying",
			o.Shared, c.Pools[o.Earlier].Metadata.Name)
	}
}

// FirstLastIPs maps Cilium's allowFirstLastIPs onto skipFirstLastIPs. Cilium
// reserves each CIDR block's first and last address only for "No" (and not
// for /31, /32, /127, /128, nor for start-stop ranges: ipledger's rule too);
// "Yes" or unset hands them out since Cilium 1.16 — Cilium 1.15 reserved
// them when unset, which is warned about when the pool has a CIDR where it
// makes a difference (wideCIDR). skip is what the IPPool says; note is the
// warning, "" when none.
func FirstLastIPs(allow *string, wideCIDR bool) (skip bool, note string) {
	switch {
	case allow == nil:
		if wideCIDR {
			return false, "unset: Cilium 1.16 and later hand out each CIDR's first and last address, and so does the IPPool; " +
				"Cilium 1.15 and older did not when unset: if this pool was last served by one of those, set skipFirstLastIPs: true"
		}
		return false, ""
	case *allow == "No":
		return true, ""
	case *allow == "Yes":
		return false, ""
	}
	return false, fmt.Sprintf("%q is neither \"Yes\" nor \"No\" (Cilium's CRD refuses it); Cilium reserves the first and last addresses only for \"No\", "+
		"so the IPPool hands them out (skipFirstLastIPs unset)", *allow)
}

func (c *converter) firstLast(obj string, allow *string, wideCIDR bool) (bool, string) {
	skip, note := FirstLastIPs(allow, wideCIDR)
	if note != "" {
		c.Warn(obj, "spec.allowFirstLastIPs", "%s", note)
	}
	return skip, note
}

// convertBlock reads one block as Cilium does (operator/pkg/lbipam,
// ipRangeFromBlock: a cidr wins over start and stop; a start without a stop
// is that one address) and writes it as an IPPool address entry. wide: a
// CIDR with more than two addresses, where allowFirstLastIPs matters.
func convertBlock(b block) (entry string, notes []string, wide bool, err error) {
	cidr, start, stop := strings.TrimSpace(b.Cidr), strings.TrimSpace(b.Start), strings.TrimSpace(b.Stop)
	if cidr != "" {
		pfx, err := netip.ParsePrefix(cidr)
		switch {
		case err != nil:
			return "", nil, false, fmt.Errorf("cidr %q is not a CIDR (192.0.2.0/24); Cilium cannot read it either", b.Cidr)
		case pfx.Addr().Is4In6():
			return "", nil, false, fmt.Errorf("cidr %q is an IPv4-mapped IPv6 prefix, which the IPPool CRD refuses; write it as an IPv4 CIDR", b.Cidr)
		}
		if start != "" || stop != "" {
			notes = append(notes, fmt.Sprintf("start/stop (%s-%s) are ignored, as Cilium ignores them when cidr is set", start, stop))
		}
		if m := pfx.Masked(); m != pfx {
			notes = append(notes, fmt.Sprintf("%q has host bits set; Cilium allocates from the network %s, and so does the IPPool", cidr, m))
			pfx = m
		}
		lo, hi := pfx.Addr(), conversion.LastOf(pfx)
		notes = append(notes, metallb.UnusableNotes(lo, hi)...)
		if lo.Is6() && pfx.Bits() < 127 {
			notes = append(notes, fmt.Sprintf("ipledger never hands out %s, the Subnet-Router anycast address of %s (Cilium does); "+
				"a Service that holds it keeps it, held outside its pool (docs/pools.md)", lo, pfx))
		}
		wide = lo.Is4() && pfx.Bits() < 31 || lo.Is6() && pfx.Bits() < 127
		return pfx.String(), notes, wide, nil
	}
	if start == "" {
		if stop != "" {
			return "", nil, false, fmt.Errorf("stop %q without start; Cilium cannot read it either (write start, or a cidr)", b.Stop)
		}
		return "", nil, false, errors.New("the block has neither cidr nor start; Cilium cannot read it either")
	}
	lo, err := parseAddr(start)
	if err != nil {
		return "", nil, false, fmt.Errorf("start %q is not an IP address; Cilium cannot read it either", b.Start)
	}
	hi := lo
	if stop != "" {
		if hi, err = parseAddr(stop); err != nil {
			return "", nil, false, fmt.Errorf("stop %q is not an IP address; Cilium cannot read it either", b.Stop)
		}
	}
	switch {
	case lo.Is4In6() || hi.Is4In6():
		return "", nil, false, errors.New("an IPv4-mapped IPv6 address, which the IPPool CRD refuses; write the IPv4 address")
	case lo.Is4() != hi.Is4():
		return "", nil, false, errors.New("start and stop are of different families; write one block per family")
	case hi.Less(lo):
		return "", nil, false, fmt.Errorf("start %s is after stop %s; write the lower address first", lo, hi)
	}
	notes = metallb.UnusableNotes(lo, hi)
	if lo == hi {
		bits := 32
		if lo.Is6() {
			bits = 128
		}
		return netip.PrefixFrom(lo, bits).String(), notes, false, nil
	}
	return lo.String() + "-" + hi.String(), notes, false, nil
}

func parseAddr(s string) (netip.Addr, error) {
	a, err := netip.ParseAddr(s)
	if err == nil && a.Zone() != "" {
		err = errors.New("zone")
	}
	return a, err
}

// selector splits Cilium's serviceSelector: requirements on
// io.kubernetes.service.namespace become the pool's namespaces (when they
// are all In or matchLabels, their intersection) or else one namespace
// selector on kubernetes.io/metadata.name; the others one Service selector.
// A requirement on io.kubernetes.service.name has no IPPool equivalent, and
// dropping it would widen the pool, so such a pool is not converted (false).
func (c *converter) selector(obj string, sel metav1.LabelSelector) (metallb.Allocation, bool) {
	const f = "spec.serviceSelector"
	var ns, svc []metav1.LabelSelectorRequirement
	ok := true
	addReq := func(field string, r metav1.LabelSelectorRequirement) {
		switch {
		case !c.requirement(obj, field, r):
			ok = false
		case r.Key == ServiceNamespaceKey:
			ns = append(ns, r)
		default:
			r.Values = slices.Compact(slices.Sorted(slices.Values(r.Values)))
			svc = append(svc, r)
		}
	}
	for _, k := range slices.Sorted(maps.Keys(sel.MatchLabels)) {
		addReq(f+".matchLabels["+k+"]", metav1.LabelSelectorRequirement{Key: k, Operator: metav1.LabelSelectorOpIn, Values: []string{sel.MatchLabels[k]}})
	}
	for i, r := range sel.MatchExpressions {
		addReq(fmt.Sprintf("%s.matchExpressions[%d]", f, i), r)
	}
	var out metallb.Allocation
	if len(ns) > 0 {
		ok = c.namespaces(obj, f, ns, &out) && ok
	}
	if len(svc) > 0 {
		out.ServiceSelectors = []metav1.LabelSelector{serviceSelector(svc)}
	}
	return out, ok
}

// requirement reports whether a requirement of the serviceSelector can be
// carried over, warning when not: one Cilium's selector refuses, or one on
// io.kubernetes.service.name.
func (c *converter) requirement(obj, field string, r metav1.LabelSelectorRequirement) bool {
	switch {
	case r.Key == "":
		c.Warn(obj, field, "not converted: the key is empty (Cilium's selector refuses it too)")
	case r.Operator != metav1.LabelSelectorOpIn && r.Operator != metav1.LabelSelectorOpNotIn &&
		r.Operator != metav1.LabelSelectorOpExists && r.Operator != metav1.LabelSelectorOpDoesNotExist:
		c.Warn(obj, field, "not converted: operator %q is not In, NotIn, Exists or DoesNotExist", r.Operator)
	case (r.Operator == metav1.LabelSelectorOpIn || r.Operator == metav1.LabelSelectorOpNotIn) && len(r.Values) == 0:
		c.Warn(obj, field, "not converted: operator %s needs at least one value (Cilium's selector refuses it too)", r.Operator)
	case (r.Operator == metav1.LabelSelectorOpExists || r.Operator == metav1.LabelSelectorOpDoesNotExist) && len(r.Values) > 0:
		c.Warn(obj, field, "not converted: operator %s takes no values (Cilium's selector refuses it too)", r.Operator)
	case r.Key == ServiceNameKey:
		c.Warn(obj, field, "not converted: %s selects Services by name, and an IPPool selects them by label and namespace only; "+
			"dropping it would give the pool's addresses to Services Cilium kept out. Label those Services and select the label instead", ServiceNameKey)
	default:
		return true
	}
	return false
}

// namespaces sets out's namespaces or namespace selector from the
// requirements on io.kubernetes.service.namespace (Namespaces); false when
// the pool cannot be converted because of them.
func (c *converter) namespaces(obj, field string, reqs []metav1.LabelSelectorRequirement, out *metallb.Allocation) bool {
	names, nsSel, why := Namespaces(reqs)
	switch {
	case why != "":
		c.Warn(obj, field, "not converted: %s", why)
		return false
	case names != nil:
		out.Namespaces = names
		if len(names) > maxNamespaces {
			c.Warn(obj, field, "not converted: %d namespaces, and an IPPool lists at most %d", len(names), maxNamespaces)
			return false
		}
	case nsSel != nil:
		out.NamespaceSelectors = []metav1.LabelSelector{*nsSel}
		c.Warn(obj, field, "the %s requirements become a namespace selector on %s, the label the API server gives every Namespace (its name)", ServiceNamespaceKey, NamespaceNameLabel)
	}
	return true
}

// serviceSelector is one Service selector with the requirements: In with
// one value as matchLabels where its key has no other requirement, the
// rest as expressions, in order.
func serviceSelector(svc []metav1.LabelSelectorRequirement) metav1.LabelSelector {
	s := metav1.LabelSelector{}
	for _, r := range svc {
		if r.Operator == metav1.LabelSelectorOpIn && len(r.Values) == 1 && s.MatchLabels[r.Key] == "" && !hasExpr(svc, r.Key) {
			if s.MatchLabels == nil {
				s.MatchLabels = map[string]string{}
			}
			s.MatchLabels[r.Key] = r.Values[0]
			continue
		}
		s.MatchExpressions = append(s.MatchExpressions, r)
	}
	return s
}

// hasExpr reports whether key has more than one requirement in rs (then
// each is kept as an expression, in order, rather than folded into
// matchLabels).
func hasExpr(rs []metav1.LabelSelectorRequirement, key string) bool {
	n := 0
	for _, r := range rs {
		if r.Key == key {
			n++
		}
	}
	return n > 1
}

// Namespaces maps Cilium's requirements on io.kubernetes.service.namespace
// (ANDed, as in any label selector) onto an IPPool: when every requirement
// is In, the namespaces in all of them (names, sorted); otherwise a
// namespace selector with the same requirements on kubernetes.io/metadata.name
// (Exists dropped: every Service has a namespace). why is set when the
// requirements admit no namespace at all (DoesNotExist, In lists with no
// common valid name), which the IPPool cannot say without serving every
// namespace.
func Namespaces(reqs []metav1.LabelSelectorRequirement) (names []string, sel *metav1.LabelSelector, why string) {
	allIn := true
	for _, r := range reqs {
		if r.Operator == metav1.LabelSelectorOpDoesNotExist {
			return nil, nil, fmt.Sprintf("%s DoesNotExist matches no Service (every Service has a namespace), so Cilium gave out none of this pool's addresses", ServiceNamespaceKey)
		}
		allIn = allIn && r.Operator == metav1.LabelSelectorOpIn
	}
	if allIn {
		var set []string
		for i, r := range reqs {
			var vals []string
			for _, v := range r.Values {
				if conversion.IsNamespaceName(v) && (i == 0 || slices.Contains(set, v)) && !slices.Contains(vals, v) {
					vals = append(vals, v)
				}
			}
			set = vals
		}
		if len(set) == 0 {
			return nil, nil, fmt.Sprintf("the %s requirements admit no valid namespace name, so Cilium gave out none of this pool's addresses; "+
				"an IPPool without namespaces would serve every namespace", ServiceNamespaceKey)
		}
		slices.Sort(set)
		return set, nil, ""
	}
	s := &metav1.LabelSelector{}
	for _, r := range reqs {
		if r.Operator == metav1.LabelSelectorOpExists {
			continue
		}
		s.MatchExpressions = append(s.MatchExpressions, metav1.LabelSelectorRequirement{
			Key: NamespaceNameLabel, Operator: r.Operator, Values: slices.Compact(slices.Sorted(slices.Values(r.Values))),
		})
	}
	if len(s.MatchExpressions) == 0 {
		return nil, nil, "" // only Exists: every namespace, as with no requirement
	}
	return nil, s, ""
}

// poolConflict is the message of Cilium's cilium.io/PoolConflict condition
// when it is True, "" otherwise.
func poolConflict(o *unstructured.Unstructured) string {
	conds, _, _ := unstructured.NestedSlice(o.Object, "status", "conditions")
	for _, c := range conds {
		m, _ := c.(map[string]any)
		if m["type"] == "cilium.io/PoolConflict" && m["status"] == "True" {
			msg, _ := m["message"].(string)
			return cmp.Or(msg, "no message")
		}
	}
	return ""
}
