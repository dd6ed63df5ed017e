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
// "metallb"), so that a rollback can delete exactly those:
// kubectl delete ippools -l ipledger.io/converted-from=metallb.
const LabelConvertedFrom = "ipledger.io/converted-from"

// AnnotationConvertedFrom names, on each IPPool, the IPAddressPool it was
// converted from ("IPAddressPool metallb-system/first-pool").
const AnnotationConvertedFrom = "ipledger.io/converted-from"

// Limits of the IPPool CRD (deploy/kustomize/base/crds/ipledger.io_ippools.yaml).
const (
	maxAddresses  = 64
	maxNamespaces = 256
	maxSelectors  = 16
)

const reachabilityDoc = "docs/reachability.md"

// IPPool is an ipledger IPPool (ipledger.io/v1alpha1), the fields the
// converter writes.
type IPPool struct {
	APIVersion string     `json:"apiVersion"`
	Kind       string     `json:"kind"`
	Metadata   ObjectMeta `json:"metadata"`
	Spec       IPPoolSpec `json:"spec"`
}

// ObjectMeta is the metadata of a converted IPPool.
type ObjectMeta struct {
	Name        string            `json:"name"`
	Labels      map[string]string `json:"labels,omitempty"`
	Annotations map[string]string `json:"annotations,omitempty"`
}

// IPPoolSpec is spec of an IPPool. AutoAssign and AvoidBuggyIPs are always
// written, so a reviewer sees them; SkipFirstLastIPs (Cilium's
// allowFirstLastIPs) only when set, as MetalLB has no such field.
type IPPoolSpec struct {
	Addresses        []string `json:"addresses"`
	AutoAssign       bool     `json:"autoAssign"`
	AvoidBuggyIPs    bool     `json:"avoidBuggyIPs"`
	SkipFirstLastIPs bool     `json:"skipFirstLastIPs,omitempty"`
	// Exclude is written only by converters whose source skips addresses
	// that skipFirstLastIPs cannot say (kube-vip's IPv4-only skip-end-ips).
	Exclude    []string    `json:"exclude,omitempty"`
	Allocation *Allocation `json:"allocation,omitempty"`
}

// Allocation is spec.allocation of an IPPool: MetalLB's serviceAllocation.
type Allocation struct {
	Priority           int32                  `json:"priority,omitempty"`
	Namespaces         []string               `json:"namespaces,omitempty"`
	NamespaceSelectors []metav1.LabelSelector `json:"namespaceSelectors,omitempty"`
	ServiceSelectors   []metav1.LabelSelector `json:"serviceSelectors,omitempty"`
}

// Warning is something the converter could not carry over, or changed.
type Warning struct {
	// Object is the MetalLB object, "IPAddressPool metallb-system/first-pool".
	Object string
	// Field is the field at fault ("spec.serviceAllocation.priority"); empty
	// for the object as a whole.
	Field   string
	Message string
}

func (w Warning) String() string {
	if w.Field == "" {
		return w.Object + ": " + w.Message
	}
	return w.Object + ": " + w.Field + ": " + w.Message
}

// Result is what Convert produced.
type Result struct {
	// Pools are the converted IPPools, sorted by name.
	Pools []IPPool
	// Warnings are sorted by object, then in field order.
	Warnings []Warning
	// NotConverted are the IPAddressPools that produced no IPPool (their
	// warnings say why), sorted.
	NotConverted []string
}

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
	from := map[string]string{} // IPPool name -> the object it came from
	for _, o := range objs {
		gvk := o.GroupVersionKind()
		obj := conversion.Describe(o)
		switch {
		case gvk.Group == Group && gvk.Kind == "IPAddressPool":
			if prev, ok := from[o.GetName()]; ok {
				c.warn(obj, "metadata.name", "not converted: %s already becomes IPPool %q, and IPPools are cluster-scoped; rename one of them", prev, o.GetName())
				c.notConverted = append(c.notConverted, obj)
				continue
			}
			if p, ok := c.pool(o); ok {
				from[o.GetName()] = obj
				c.pools = append(c.pools, p)
			} else {
				c.notConverted = append(c.notConverted, obj)
			}
		case gvk.Group == Group && (gvk.Kind == "L2Advertisement" || gvk.Kind == "BGPAdvertisement"):
			c.advertisement(o, pools)
		case gvk.Group == Group && (gvk.Kind == "BGPPeer" || gvk.Kind == "BFDProfile" || gvk.Kind == "Community"):
			c.warn(obj, "", "not converted: BGP sessions announce addresses, which is reachability, not address management; ipledger does not announce. Keep MetalLB's speakers or pick another announcer: %s", reachabilityDoc)
		case gvk.Group == Group && gvk.Kind == "AddressPool":
			c.warn(obj, "", "not converted: AddressPool is MetalLB's deprecated pool kind (removed in MetalLB 0.14); convert it to an IPAddressPool (and an L2Advertisement or BGPAdvertisement) first, then convert that")
		case gvk.Group == Group:
			c.warn(obj, "", "not converted: %s is not address configuration", gvk.Kind)
		case gvk.Kind == "ConfigMap" && o.GetName() == "config":
			c.warn(obj, "", "not converted: MetalLB's ConfigMap configuration (before 0.13) is not read; convert it to IPAddressPools with MetalLB's configmaptocrs first, then convert those")
		default:
			c.warn(obj, "", "not converted: not a MetalLB object")
		}
	}
	slices.SortFunc(c.pools, func(a, b IPPool) int { return cmp.Compare(a.Metadata.Name, b.Metadata.Name) })
	slices.SortStableFunc(c.warnings, func(a, b Warning) int { return cmp.Compare(a.Object, b.Object) })
	slices.Sort(c.notConverted)
	return Result{Pools: c.pools, Warnings: c.warnings, NotConverted: c.notConverted}
}

type converter struct {
	pools        []IPPool
	warnings     []Warning
	notConverted []string
}

func (c *converter) warn(obj, field, format string, args ...any) {
	c.warnings = append(c.warnings, Warning{Object: obj, Field: field, Message: fmt.Sprintf(format, args...)})
}

// pool converts one IPAddressPool; false when it produces no IPPool.
func (c *converter) pool(o *unstructured.Unstructured) (IPPool, bool) {
	obj := conversion.Describe(o)
	if v := o.GroupVersionKind().Version; v != "v1beta1" {
		c.warn(obj, "apiVersion", "not converted: %s/%s is not a version this converter knows; export the pools as metallb.io/v1beta1", Group, v)
		return IPPool{}, false
	}
	if o.GetName() == "" {
		c.warn(obj, "metadata.name", "not converted: the pool has no name")
		return IPPool{}, false
	}
	rawSpec, _, _ := unstructured.NestedFieldNoCopy(o.Object, "spec")
	specMap, _ := rawSpec.(map[string]any)
	var spec ipAddressPoolSpec
	if err := conversion.Decode(specMap, &spec); err != nil {
		c.warn(obj, "spec", "not converted: %v", err)
		return IPPool{}, false
	}
	out := IPPool{
		APIVersion: "ipledger.io/v1alpha1",
		Kind:       "IPPool",
		Metadata: ObjectMeta{
			Name:        o.GetName(),
			Labels:      map[string]string{LabelConvertedFrom: "metallb"},
			Annotations: map[string]string{AnnotationConvertedFrom: obj},
		},
		Spec: IPPoolSpec{AutoAssign: spec.AutoAssign == nil || *spec.AutoAssign, AvoidBuggyIPs: spec.AvoidBuggyIPs},
	}
	ok := true
	for _, k := range conversion.UnknownKeys(specMap, knownSpecFields) {
		c.warn(obj, "spec."+k, "not carried over: ipledger's IPPool has no equivalent")
	}

	if len(spec.Addresses) == 0 {
		c.warn(obj, "spec.addresses", "not converted: the pool has no addresses (MetalLB refuses it too)")
		ok = false
	}
	seen := map[string]bool{}
	for i, a := range spec.Addresses {
		field := fmt.Sprintf("spec.addresses[%d]", i)
		entry, notes, err := convertAddress(a)
		if err != nil {
			c.warn(obj, field, "not converted: %q %v", a, err)
			ok = false
			continue
		}
		for _, n := range notes {
			c.warn(obj, field, "%s", n)
		}
		if seen[entry] {
			c.warn(obj, field, "%q repeats an earlier entry; written once", a)
			continue
		}
		seen[entry] = true
		out.Spec.Addresses = append(out.Spec.Addresses, entry)
	}
	if len(out.Spec.Addresses) > maxAddresses {
		c.warn(obj, "spec.addresses", "not converted: %d entries, and an IPPool holds at most %d; merge adjacent entries into ranges or split the pool", len(out.Spec.Addresses), maxAddresses)
		ok = false
	}

	if sa := spec.ServiceAllocation; sa != nil {
		alloc, allocOK := c.allocation(obj, sa)
		rawAlloc, _, _ := unstructured.NestedFieldNoCopy(specMap, "serviceAllocation")
		allocMap, _ := rawAlloc.(map[string]any)
		for _, k := range conversion.UnknownKeys(allocMap, knownAllocationFields) {
			c.warn(obj, "spec.serviceAllocation."+k, "not carried over: ipledger's IPPool has no equivalent")
		}
		ok = ok && allocOK
		if alloc.Priority != 0 || len(alloc.Namespaces) > 0 || len(alloc.NamespaceSelectors) > 0 || len(alloc.ServiceSelectors) > 0 {
			out.Spec.Allocation = &alloc
		}
	}

	if l := o.GetLabels(); len(l) > 0 {
		c.warn(obj, "metadata.labels", "not carried over (%s): ipam does not read IPPool labels; MetalLB's advertisements select pools by them, and those stay MetalLB's (%s)", conversion.JoinMap(l), reachabilityDoc)
	}
	var annotations []string
	for k := range o.GetAnnotations() {
		if !strings.HasPrefix(k, "kubectl.kubernetes.io/") {
			annotations = append(annotations, k)
		}
	}
	if len(annotations) > 0 {
		slices.Sort(annotations)
		c.warn(obj, "metadata.annotations", "not carried over: %s", strings.Join(annotations, ", "))
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
		c.warn(obj, f+"priority", "not carried over: %d is outside ipledger's range (1 to %d; 0 or none is tried after every pool with a priority); "+
			"set spec.allocation.priority by hand to keep this pool's place", p, math.MaxInt32)
	default:
		out.Priority = int32(p) // 0 means none in both
	}

	seen := map[string]bool{}
	for i, ns := range sa.Namespaces {
		field := fmt.Sprintf("%snamespaces[%d]", f, i)
		switch {
		case !conversion.IsNamespaceName(ns):
			c.warn(obj, field, "not carried over: %q cannot name a namespace, so it never matched one in MetalLB either", ns)
		case seen[ns]:
			c.warn(obj, field, "%q repeats an earlier entry; written once", ns)
		default:
			seen[ns] = true
			out.Namespaces = append(out.Namespaces, ns)
		}
	}
	slices.Sort(out.Namespaces)
	if len(out.Namespaces) > maxNamespaces {
		c.warn(obj, f+"namespaces", "not converted: %d namespaces, and an IPPool lists at most %d; label the namespaces and use namespaceSelectors", len(out.Namespaces), maxNamespaces)
		ok = false
	}
	if len(sa.Namespaces) > 0 && len(out.Namespaces) == 0 && len(sa.NamespaceSelectors) == 0 {
		// Dropping every name would widen the pool to every namespace.
		c.warn(obj, f+"namespaces", "not converted: no entry names a namespace, and without them the IPPool would serve every namespace")
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
		c.warn(obj, field, "not converted: %d selectors, and an IPPool holds at most %d", len(in), maxSelectors)
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
				c.warn(obj, ef, "not converted: the key is empty (MetalLB refuses it too)")
				ok = false
			case (e.Operator == metav1.LabelSelectorOpIn || e.Operator == metav1.LabelSelectorOpNotIn) && len(e.Values) == 0:
				c.warn(obj, ef, "not converted: operator %s needs at least one value (MetalLB refuses it too)", e.Operator)
				ok = false
			case (e.Operator == metav1.LabelSelectorOpExists || e.Operator == metav1.LabelSelectorOpDoesNotExist) && len(e.Values) > 0:
				c.warn(obj, ef, "not converted: operator %s takes no values (MetalLB refuses it too)", e.Operator)
				ok = false
			case e.Operator != metav1.LabelSelectorOpIn && e.Operator != metav1.LabelSelectorOpNotIn &&
				e.Operator != metav1.LabelSelectorOpExists && e.Operator != metav1.LabelSelectorOpDoesNotExist:
				c.warn(obj, ef, "not converted: operator %q is not In, NotIn, Exists or DoesNotExist (MetalLB refuses it too)", e.Operator)
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
		c.warn(obj, "spec.ipAddressPoolSelectors", "cannot be read (%v)", err)
		c.warn(obj, "", "not converted (which IPAddressPools it announces is unknown): %s (%s)", why, reachabilityDoc)
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
			c.warn(conversion.Describe(p), "", "announced by %s, which is not converted: announcing is reachability, not address management; keep MetalLB's speakers for it or pick another announcer (%s)", obj, reachabilityDoc)
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
	c.warn(obj, "", "not converted (it announces %s): %s (%s)", what, why, reachabilityDoc)
}
