package conversion

import (
	"cmp"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// LabelConvertedFrom marks every IPPool a converter writes (value: the
// source, "metallb", "cilium", "kube-vip"), so that a rollback can delete
// exactly those: kubectl delete ippools -l ipledger.io/converted-from=metallb.
const LabelConvertedFrom = "ipledger.io/converted-from"

// AnnotationConvertedFrom names, on each IPPool, what it was converted from
// ("IPAddressPool metallb-system/first-pool").
const AnnotationConvertedFrom = "ipledger.io/converted-from"

// IPPool is an ipledger IPPool (ipledger.io/v1alpha1), the fields the
// converters write.
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

// Allocation is spec.allocation of an IPPool (MetalLB's serviceAllocation).
type Allocation struct {
	Priority           int32                  `json:"priority,omitempty"`
	Namespaces         []string               `json:"namespaces,omitempty"`
	NamespaceSelectors []metav1.LabelSelector `json:"namespaceSelectors,omitempty"`
	ServiceSelectors   []metav1.LabelSelector `json:"serviceSelectors,omitempty"`
}

// Warning is something a converter could not carry over, or changed.
type Warning struct {
	// Object is the source object (Describe), "IPAddressPool metallb-system/first-pool".
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
	// NotConverted are the source objects that produced no IPPool (their
	// warnings say why), sorted.
	NotConverted []string
}

// Converter collects what one conversion produces. Each converter embeds
// it, adds its own mapping, and ends with Result.
type Converter struct {
	Pools        []IPPool
	Warnings     []Warning
	NotConverted []string
	// from names, by IPPool name, the object each pool came from.
	from map[string]string
}

// AddPool converts a source pool object with convert and keeps the IPPool,
// unless an earlier object already became an IPPool of the same name: then
// it warns, ending with taken (how to fix it). An object that produces no
// IPPool is listed in NotConverted.
func (c *Converter) AddPool(o *unstructured.Unstructured, taken string, convert func(*unstructured.Unstructured) (IPPool, bool)) {
	obj := Describe(o)
	if prev, ok := c.from[o.GetName()]; ok {
		c.Warn(obj, "metadata.name", "not converted: %s already becomes IPPool %q%s", prev, o.GetName(), taken)
		c.NotConverted = append(c.NotConverted, obj)
		return
	}
	p, ok := convert(o)
	if !ok {
		c.NotConverted = append(c.NotConverted, obj)
		return
	}
	if c.from == nil {
		c.from = map[string]string{}
	}
	c.from[o.GetName()] = obj
	c.Pools = append(c.Pools, p)
}

// Warn records a warning about obj's field ("" for the object as a whole).
func (c *Converter) Warn(obj, field, format string, args ...any) {
	c.Warnings = append(c.Warnings, Warning{Object: obj, Field: field, Message: fmt.Sprintf(format, args...)})
}

// Result returns what the conversion produced, in a deterministic order:
// the pools sorted by name, the warnings (stably) by object, the objects
// not converted sorted. check, when not nil, runs once the pools are sorted
// — the order kubectl apply creates them in — and may warn (Overlaps).
func (c *Converter) Result(check func()) Result {
	slices.SortFunc(c.Pools, func(a, b IPPool) int { return cmp.Compare(a.Metadata.Name, b.Metadata.Name) })
	if check != nil {
		check()
	}
	slices.SortStableFunc(c.Warnings, func(a, b Warning) int { return cmp.Compare(a.Object, b.Object) })
	slices.Sort(c.NotConverted)
	return Result{Pools: c.Pools, Warnings: c.Warnings, NotConverted: c.NotConverted}
}

// NewIPPool is an IPPool named name, labelled as converted from source
// (LabelConvertedFrom) and annotated with the object it comes from.
func NewIPPool(name, source, from string) IPPool {
	return IPPool{
		APIVersion: "ipledger.io/v1alpha1",
		Kind:       "IPPool",
		Metadata: ObjectMeta{
			Name:        name,
			Labels:      map[string]string{LabelConvertedFrom: source},
			Annotations: map[string]string{AnnotationConvertedFrom: from},
		},
	}
}

// PoolKind is what ReadPool needs to know of a source's pool objects.
type PoolKind struct {
	// Group is the source's API group, Versions those the converter reads,
	// Export how to ask for them ("metallb.io/v1beta1").
	Group    string
	Versions []string
	Export   string
	// Source is the value of LabelConvertedFrom.
	Source string
	// KnownSpecFields are the spec fields the converter reads; any other
	// is warned about.
	KnownSpecFields []string
}

// ReadPool reads what every source pool object has: it checks o's version
// and name, decodes its spec into spec, warns about the spec fields the
// converter does not read, and returns the IPPool to fill (NewIPPool, named
// as o) with o's spec as a map. false: o produces no IPPool (warned).
func (c *Converter) ReadPool(o *unstructured.Unstructured, k PoolKind, spec any) (IPPool, map[string]any, bool) {
	obj := Describe(o)
	if v := o.GroupVersionKind().Version; !slices.Contains(k.Versions, v) {
		c.Warn(obj, "apiVersion", "not converted: %s/%s is not a version this converter knows; export the pools as %s", k.Group, v, k.Export)
		return IPPool{}, nil, false
	}
	if o.GetName() == "" {
		c.Warn(obj, "metadata.name", "not converted: the pool has no name")
		return IPPool{}, nil, false
	}
	rawSpec, _, _ := unstructured.NestedFieldNoCopy(o.Object, "spec")
	specMap, _ := rawSpec.(map[string]any)
	if err := Decode(specMap, spec); err != nil {
		c.Warn(obj, "spec", "not converted: %v", err)
		return IPPool{}, nil, false
	}
	for _, f := range UnknownKeys(specMap, k.KnownSpecFields) {
		c.Warn(obj, "spec."+f, "not carried over: ipledger's IPPool has no equivalent")
	}
	return NewIPPool(o.GetName(), k.Source, obj), specMap, true
}

// WarnMetadata warns that o's labels and annotations (kubectl's own
// aside) are not carried over; labelsNote ends the labels' warning.
func (c *Converter) WarnMetadata(o *unstructured.Unstructured, labelsNote string) {
	obj := Describe(o)
	if l := o.GetLabels(); len(l) > 0 {
		c.Warn(obj, "metadata.labels", "not carried over (%s): ipam does not read IPPool labels%s", JoinMap(l), labelsNote)
	}
	var annotations []string
	for k := range o.GetAnnotations() {
		if !strings.HasPrefix(k, "kubectl.kubernetes.io/") {
			annotations = append(annotations, k)
		}
	}
	if len(annotations) > 0 {
		slices.Sort(annotations)
		c.Warn(obj, "metadata.annotations", "not carried over: %s", strings.Join(annotations, ", "))
	}
}

// Overlap is two converted pools that share addresses: Later (an index of
// the sorted pools) is created after Earlier, and Shared is the first
// address found in both.
type Overlap struct {
	Later, Earlier int
	Shared         netip.Addr
}

// Overlaps returns every pair of pools that share addresses (ipam makes the
// younger of two overlapping IPPools Conflicting), by Later then Earlier.
// The pools' addresses must be valid entries (a CIDR or a lo-hi range).
func Overlaps(pools []IPPool) []Overlap {
	type span struct{ lo, hi netip.Addr }
	spans := make([][]span, len(pools))
	for i, p := range pools {
		for _, a := range p.Spec.Addresses {
			if lo, hi, ok := strings.Cut(a, "-"); ok {
				spans[i] = append(spans[i], span{netip.MustParseAddr(lo), netip.MustParseAddr(hi)})
				continue
			}
			pfx := netip.MustParsePrefix(a)
			spans[i] = append(spans[i], span{pfx.Addr(), LastOf(pfx)})
		}
	}
	var out []Overlap
	for j := range pools {
		for i := range j {
			shared := netip.Addr{}
			for _, x := range spans[j] {
				for _, y := range spans[i] {
					if x.lo.Is4() == y.lo.Is4() && !x.hi.Less(y.lo) && !y.hi.Less(x.lo) && !shared.IsValid() {
						shared = Later(x.lo, y.lo)
					}
				}
			}
			if shared.IsValid() {
				out = append(out, Overlap{Later: j, Earlier: i, Shared: shared})
			}
		}
	}
	return out
}

// LastOf is the last address of a prefix.
func LastOf(p netip.Prefix) netip.Addr {
	b := p.Masked().Addr().AsSlice()
	for i := p.Bits(); i < len(b)*8; i++ {
		b[i/8] |= 0x80 >> (i % 8)
	}
	a, _ := netip.AddrFromSlice(b)
	return a
}
