// Package metallb converts MetalLB's address configuration (IPAddressPool,
// metallb.io/v1beta1) into ipledger IPPools, and says, per object and field,
// what it could not carry over. It reads MetalLB's objects as unstructured
// data (no dependency on MetalLB's Go module) and does no I/O: the
// migrate-metallb command gathers the objects and prints the result.
//
// What carries over: addresses (CIDRs and ranges, IPv4 and IPv6), autoAssign,
// avoidBuggyIPs and serviceAllocation (priority, namespaces,
// namespaceSelectors, serviceSelectors), which mean the same in both. What
// does not — announcing (L2Advertisement, BGPAdvertisement, BGPPeer, …), labels,
// fields ipledger has no equivalent for, a spelling the IPPool CRD refuses —
// is a Warning, never dropped silently. The output is deterministic: pools
// sorted by name, namespaces sorted, warnings sorted by object.
package metallb

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/ipledger/ipledger/plugin/internal/conversion"
)

// Group is MetalLB's API group.
const Group = "metallb.io"

// LabelConvertedFrom marks every IPPool the converter writes (value
// "metallb"): conversion.LabelConvertedFrom.
const LabelConvertedFrom = conversion.LabelConvertedFrom

// AnnotationConvertedFrom names, on each IPPool, the object it was
// converted from: conversion.AnnotationConvertedFrom.
const AnnotationConvertedFrom = conversion.AnnotationConvertedFrom

// Limits of the IPPool CRD (deploy/kustomize/base/crds/ipledger.io_ippools.yaml).
const (
	maxAddresses  = 64
	maxNamespaces = 256
	maxSelectors  = 16
)

const reachabilityDoc = "docs/reachability.md"

// The IPPool the converters write, their warnings and their result are
// package conversion's; these names stay for the commands and tests that
// read them through this package.
type (
	IPPool     = conversion.IPPool
	ObjectMeta = conversion.ObjectMeta
	IPPoolSpec = conversion.IPPoolSpec
	Allocation = conversion.Allocation
	Warning    = conversion.Warning
	Result     = conversion.Result
)

// ipAddressPoolSpec is the part of MetalLB's IPAddressPoolSpec the converter
// reads (go.universe.tf/metallb/api/v1beta1).
type ipAddressPoolSpec struct {
	Addresses         []string           `json:"addresses"`
	AutoAssign        *bool              `json:"autoAssign"`
	AvoidBuggyIPs     bool               `json:"avoidBuggyIPs"`
	ServiceAllocation *serviceAllocation `json:"serviceAllocation"`
}

type serviceAllocation struct {
	Priority           int64                  `json:"priority"`
	Namespaces         []string               `json:"namespaces"`
	NamespaceSelectors []metav1.LabelSelector `json:"namespaceSelectors"`
	ServiceSelectors   []metav1.LabelSelector `json:"serviceSelectors"`
}

var (
	knownSpecFields       = []string{"addresses", "autoAssign", "avoidBuggyIPs", "serviceAllocation"}
	knownAllocationFields = []string{"priority", "namespaces", "namespaceSelectors", "serviceSelectors"}
)

// Convert converts every IPAddressPool among objs, and warns about every
// other object (advertisements, BGP peers, anything not MetalLB's).
func Convert(objs []*unstructured.Unstructured) Result {
	objs = slices.Clone(objs)
	slices.SortStableFunc(objs, func(a, b *unstructured.Unstructured) int {
		return cmp.Or(cmp.Compare(a.GetName(), b.GetName()), cmp.Compare(a.GetNamespace(), b.GetNamespace()))
	})
	var c converter
	var pools []*unstructured.Unstructured
	for _, o := range objs {
		if o.GroupVersionKind().Group == Group && o.GetKind() == "IPAddressPool" {
			pools = append(pools, o)
		}
	}
	for _, o := range objs {
		gvk := o.GroupVersionKind()
		obj := conversion.Describe(o)
		switch {
		case gvk.Group == Group && gvk.Kind == "IPAddressPool":
			c.AddPool(o, ", and IPPools are cluster-scoped; rename one of them", c.pool)
		case gvk.Group == Group && (gvk.Kind == "L2Advertisement" || gvk.Kind == "BGPAdvertisement"):
			c.advertisement(o, pools)
		case gvk.Group == Group && (gvk.Kind == "BGPPeer" || gvk.Kind == "BFDProfile" || gvk.Kind == "Community"):
			c.Warn(obj, "", "not converted: BGP sessions announce addresses, which is reachability, not address management; ipledger does not announce. Keep MetalLB's speakers or pick another announcer: %s", reachabilityDoc)
		case gvk.Group == Group && gvk.Kind == "AddressPool":
			c.Warn(obj, "", "not converted: AddressPool is MetalLB's deprecated pool kind (removed in MetalLB 0.14); convert it to an IPAddressPool (and an L2Advertisement or BGPAdvertisement) first, then convert that")
		case gvk.Group == Group:
			c.Warn(obj, "", "not converted: %s is not address configuration", gvk.Kind)
		case gvk.Kind == "ConfigMap" && o.GetName() == "config":
			c.Warn(obj, "", "not converted: MetalLB's ConfigMap configuration (before 0.13) is not read; convert it to IPAddressPools with MetalLB's configmaptocrs first, then convert those")
		default:
			c.Warn(obj, "", "not converted: not a MetalLB object")
		}
	}
	return c.Result(nil)
}

// converter is one conversion's state (conversion.Converter) and the
// mapping of MetalLB's objects.
type converter struct{ conversion.Converter }

// poolKind is how MetalLB's IPAddressPools are read (conversion.ReadPool).
var poolKind = conversion.PoolKind{
	Group: Group, Versions: []string{"v1beta1"}, Export: "metallb.io/v1beta1", Source: "metallb", KnownSpecFields: knownSpecFields,
}

// pool converts one IPAddressPool; false when it produces no IPPool.
func (c *converter) pool(o *unstructured.Unstructured) (IPPool, bool) {
	var spec ipAddressPoolSpec
	out, specMap, ok := c.ReadPool(o, poolKind, &spec)
	if !ok {
		return IPPool{}, false
	}
	obj := conversion.Describe(o)
	out.Spec = IPPoolSpec{AutoAssign: spec.AutoAssign == nil || *spec.AutoAssign, AvoidBuggyIPs: spec.AvoidBuggyIPs}
	out.Spec.Addresses, ok = c.addresses(obj, spec.Addresses)
	if sa := spec.ServiceAllocation; sa != nil {
		alloc, allocOK := c.allocation(obj, sa)
		rawAlloc, _, _ := unstructured.NestedFieldNoCopy(specMap, "serviceAllocation")
		allocMap, _ := rawAlloc.(map[string]any)
		for _, k := range conversion.UnknownKeys(allocMap, knownAllocationFields) {
			c.Warn(obj, "spec.serviceAllocation."+k, "not carried over: ipledger's IPPool has no equivalent")
		}
		ok = ok && allocOK
		if alloc.Priority != 0 || len(alloc.Namespaces) > 0 || len(alloc.NamespaceSelectors) > 0 || len(alloc.ServiceSelectors) > 0 {
			out.Spec.Allocation = &alloc
		}
	}
	c.WarnMetadata(o, fmt.Sprintf("; MetalLB's advertisements select pools by them, and those stay MetalLB's (%s)", reachabilityDoc))
	return out, ok
}

// addresses converts spec.addresses into the IPPool's entries, each once;
// false when the pool cannot be converted because of them.
func (c *converter) addresses(obj string, addrs []string) ([]string, bool) {
	ok := true
	if len(addrs) == 0 {
		c.Warn(obj, "spec.addresses", "not converted: the pool has no addresses (MetalLB refuses it too)")
		ok = false
	}
	var out []string
	seen := map[string]bool{}
	for i, a := range addrs {
		field := fmt.Sprintf("spec.addresses[%d]", i)
		entry, notes, err := convertAddress(a)
		if err != nil {
			c.Warn(obj, field, "not converted: %q %v", a, err)
			ok = false
			continue
		}
		for _, n := range notes {
			c.Warn(obj, field, "%s", n)
		}
		if seen[entry] {
			c.Warn(obj, field, "%q repeats an earlier entry; written once", a)
			continue
		}
		seen[entry] = true
		out = append(out, entry)
	}
	if len(out) > maxAddresses {
		c.Warn(obj, "spec.addresses", "not converted: %d entries, and an IPPool holds at most %d; merge adjacent entries into ranges or split the pool", len(out), maxAddresses)
		ok = false
	}
	return out, ok
}

// allocation converts serviceAllocation; false when the pool cannot be
// converted because of it.
func (c *converter) allocation(obj string, sa *serviceAllocation) (Allocation, bool) {
	var out Allocation
	ok := true
	const f = "spec.serviceAllocation."
	switch p := sa.Priority; {
	case p < 0 || p > math.MaxInt32:
		c.Warn(obj, f+"priority", "not carried over: %d is outside ipledger's range (1 to %d; 0 or none is tried after every pool with a priority); "+
			"set spec.allocation.priority by hand to keep this pool's place", p, math.MaxInt32)
	default:
		out.Priority = int32(p) // 0 means none in both
	}

	seen := map[string]bool{}
	for i, ns := range sa.Namespaces {
		field := fmt.Sprintf("%snamespaces[%d]", f, i)
		switch {
		case !conversion.IsNamespaceName(ns):
			c.Warn(obj, field, "not carried over: %q cannot name a namespace, so it never matched one in MetalLB either", ns)
		case seen[ns]:
			c.Warn(obj, field, "%q repeats an earlier entry; written once", ns)
		default:
			seen[ns] = true
			out.Namespaces = append(out.Namespaces, ns)
		}
	}
	slices.Sort(out.Namespaces)
	if len(out.Namespaces) > maxNamespaces {
		c.Warn(obj, f+"namespaces", "not converted: %d namespaces, and an IPPool lists at most %d; label the namespaces and use namespaceSelectors", len(out.Namespaces), maxNamespaces)
		ok = false
	}
	if len(sa.Namespaces) > 0 && len(out.Namespaces) == 0 && len(sa.NamespaceSelectors) == 0 {
		// Dropping every name would widen the pool to every namespace.
		c.Warn(obj, f+"namespaces", "not converted: no entry names a namespace, and without them the IPPool would serve every namespace")
		ok = false
	}

	var selOK bool
	out.NamespaceSelectors, selOK = c.selectors(obj, f+"namespaceSelectors", sa.NamespaceSelectors)
	ok = ok && selOK
	out.ServiceSelectors, selOK = c.selectors(obj, f+"serviceSelectors", sa.ServiceSelectors)
	return out, ok && selOK
}

// selectors copies label selectors, with the values of In and NotIn sorted
// (they are sets); false when one is invalid, which MetalLB refuses too.
func (c *converter) selectors(obj, field string, in []metav1.LabelSelector) ([]metav1.LabelSelector, bool) {
	if len(in) > maxSelectors {
		c.Warn(obj, field, "not converted: %d selectors, and an IPPool holds at most %d", len(in), maxSelectors)
		return nil, false
	}
	ok := true
	var out []metav1.LabelSelector
	for i, s := range in {
		s = *s.DeepCopy()
		for j := range s.MatchExpressions {
			e := &s.MatchExpressions[j]
			ef := fmt.Sprintf("%s[%d].matchExpressions[%d]", field, i, j)
			switch {
			case e.Key == "":
				c.Warn(obj, ef, "not converted: the key is empty (MetalLB refuses it too)")
				ok = false
			case (e.Operator == metav1.LabelSelectorOpIn || e.Operator == metav1.LabelSelectorOpNotIn) && len(e.Values) == 0:
				c.Warn(obj, ef, "not converted: operator %s needs at least one value (MetalLB refuses it too)", e.Operator)
				ok = false
			case (e.Operator == metav1.LabelSelectorOpExists || e.Operator == metav1.LabelSelectorOpDoesNotExist) && len(e.Values) > 0:
				c.Warn(obj, ef, "not converted: operator %s takes no values (MetalLB refuses it too)", e.Operator)
				ok = false
			case e.Operator != metav1.LabelSelectorOpIn && e.Operator != metav1.LabelSelectorOpNotIn &&
				e.Operator != metav1.LabelSelectorOpExists && e.Operator != metav1.LabelSelectorOpDoesNotExist:
				c.Warn(obj, ef, "not converted: operator %q is not In, NotIn, Exists or DoesNotExist (MetalLB refuses it too)", e.Operator)
				ok = false
			}
			e.Values = slices.Compact(slices.Sorted(slices.Values(e.Values)))
		}
		out = append(out, s)
	}
	return out, ok
}

// advertisement warns, on the advertisement and on each pool it announces,
// that announcing stays with MetalLB's speakers (or another announcer).
func (c *converter) advertisement(o *unstructured.Unstructured, pools []*unstructured.Unstructured) {
	obj := conversion.Describe(o)
	names, _, _ := unstructured.NestedStringSlice(o.Object, "spec", "ipAddressPools")
	rawSel, _, _ := unstructured.NestedSlice(o.Object, "spec", "ipAddressPoolSelectors")
	var selectors []metav1.LabelSelector
	const why = "announcing is reachability, not address management, and ipledger does not announce; keep MetalLB's speakers with this advertisement or pick another announcer"
	if err := conversion.Decode(rawSel, &selectors); err != nil {
		c.Warn(obj, "spec.ipAddressPoolSelectors", "cannot be read (%v)", err)
		c.Warn(obj, "", "not converted (which IPAddressPools it announces is unknown): %s (%s)", why, reachabilityDoc)
		return
	}
	var announced []string
	for _, p := range pools {
		if p.GetNamespace() != o.GetNamespace() || p.GetName() == "" {
			continue
		}
		selected := len(names) == 0 && len(selectors) == 0 || slices.Contains(names, p.GetName())
		for _, s := range selectors {
			if sel, err := metav1.LabelSelectorAsSelector(&s); err == nil && sel.Matches(labels.Set(p.GetLabels())) {
				selected = true
			}
		}
		if selected {
			announced = append(announced, p.GetName())
			c.Warn(conversion.Describe(p), "", "announced by %s, which is not converted: announcing is reachability, not address management; keep MetalLB's speakers for it or pick another announcer (%s)", obj, reachabilityDoc)
		}
	}
	for _, n := range names {
		if !slices.Contains(announced, n) {
			announced = append(announced, n) // named, but not among the objects converted
		}
	}
	slices.Sort(announced)
	what := "every IPAddressPool in its namespace"
	switch {
	case len(names) == 0 && len(selectors) == 0:
	case len(announced) > 0:
		what = "IPAddressPools " + strings.Join(announced, ", ")
	case len(selectors) > 0:
		what = "the IPAddressPools its ipAddressPoolSelectors select, none of those given"
	}
	c.Warn(obj, "", "not converted (it announces %s): %s (%s)", what, why, reachabilityDoc)
}
