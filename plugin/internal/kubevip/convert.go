// Package kubevip converts kube-vip-cloud-provider's address configuration
// (the kubevip ConfigMap in kube-system) into ipledger IPPools, and says, per
// key, what it could not carry over. Like the MetalLB and Cilium converters
// (whose IPPool types and YAML reading and writing it shares) it does no
// I/O: the migrate-kube-vip command gathers the ConfigMap and prints the
// result.
//
// The semantics are kube-vip-cloud-provider's (pkg/provider/loadBalancer.go,
// pkg/ipam at commit d3522c6fa29da4410a086a4ce6502caac485d21b): a Service's
// addresses come from one key, the first present of cidr-<namespace>,
// cidr-global, range-<namespace>, range-global (ServingKey), never from
// another when that one is full or unreadable. So each namespace key that
// serves becomes an IPPool pinned to its namespace (spec.allocation.namespaces,
// which ipam ranks before unpinned pools), and the global key an IPPool for
// every other namespace: a namespace selector leaves out the namespaces with
// a key of their own, so that, as in kube-vip, they never fall back to it.
// kube-vip never hands out an IPv4 address ending in .0 or .255, so every
// pool is avoidBuggyIPs. What ipledger cannot carry (allow-share-*, which
// shares addresses without a key; search-order; interface-*; a key kube-vip
// never reads) is a Warning, never dropped silently.
package kubevip

import (
	"cmp"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/ipledger/ipledger/plugin/internal/conversion"
	"github.com/ipledger/ipledger/plugin/internal/metallb"
)

// ConfigMapName and ConfigMapNamespace are where kube-vip-cloud-provider
// reads its configuration by default (its KUBEVIP_CONFIG_MAP and
// KUBEVIP_NAMESPACE environment variables change them).
const (
	ConfigMapName      = "kubevip"
	ConfigMapNamespace = "kube-system"
)

// ConvertedFrom is the value of metallb.LabelConvertedFrom on every IPPool
// this converter writes: kubectl delete ippools -l ipledger.io/converted-from=kube-vip.
const ConvertedFrom = "kube-vip"

// PoolPrefix starts the name of every converted IPPool: kube-vip-global,
// kube-vip-<namespace>.
const PoolPrefix = "kube-vip-"

// Global is the namespace part of the keys every namespace falls back to.
const Global = "global"

// NamespaceNameLabel is the label the API server gives every Namespace (its
// name); the global pool's selector leaves namespaces out by it.
const NamespaceNameLabel = "kubernetes.io/metadata.name"

// The ConfigMap keys kube-vip-cloud-provider reads (pkg/config, pkg/provider).
const (
	keySkipEnds    = "skip-end-ips-in-cidr"
	keySearchOrder = "search-order"
	prefixCIDR     = "cidr-"
	prefixRange    = "range-"
	prefixShare    = "allow-share-"
	prefixIface    = "interface-"
)

// Limits of the IPPool CRD (deploy/kustomize/base/crds/ipledger.io_ippools.yaml).
const (
	maxAddresses = 64
	maxExclude   = 64
)

const guide = "docs/migrating-from-kube-vip.md"

// Result is what Convert produced (the MetalLB converter's shape).
type Result = metallb.Result

// ServingKey is the ConfigMap key kube-vip-cloud-provider takes a Service's
// addresses from in namespace ns (getConfig, discoverPool): the first key
// present of cidr-<ns>, cidr-global, range-<ns>, range-global — present,
// even with a value it cannot read, which then fails the Service rather
// than fall back. "" when none is present.
func ServingKey(data map[string]string, ns string) string {
	for _, k := range []string{prefixCIDR + ns, prefixCIDR + Global, prefixRange + ns, prefixRange + Global} {
		if _, ok := data[k]; ok {
			return k
		}
	}
	return ""
}

// ShareKey is the allow-share key kube-vip-cloud-provider reads for
// namespace ns (allow-share-<ns>, else allow-share-global; independent of
// which address key serves) and whether it enables sharing
// (strconv.ParseBool; anything else is false).
func ShareKey(data map[string]string, ns string) (key string, share bool) {
	for _, k := range []string{prefixShare + ns, prefixShare + Global} {
		if v, ok := data[k]; ok {
			b, _ := strconv.ParseBool(v)
			return k, b
		}
	}
	return "", false
}

// Convert converts the kube-vip ConfigMap among objs, and warns about every
// other object. It converts exactly one ConfigMap: kube-vip-cloud-provider
// reads one, and two would both claim the kube-vip-* pool names.
func Convert(objs []*unstructured.Unstructured) Result {
	var c converter
	var cms []*unstructured.Unstructured
	for _, o := range objs {
		if o.GetAPIVersion() == "v1" && o.GetKind() == "ConfigMap" {
			cms = append(cms, o)
			continue
		}
		c.Warn(conversion.Describe(o), "", "not converted: not a ConfigMap (kube-vip-cloud-provider's configuration is the %s ConfigMap in %s)", ConfigMapName, ConfigMapNamespace)
	}
	switch len(cms) {
	case 0:
	case 1:
		c.configMap(cms[0])
	default:
		for _, o := range cms {
			c.Warn(conversion.Describe(o), "", "not converted: %d ConfigMaps given, and kube-vip-cloud-provider reads one; give only the one it reads (%s/%s by default)",
				len(cms), ConfigMapNamespace, ConfigMapName)
			c.NotConverted = append(c.NotConverted, conversion.Describe(o))
		}
	}
	return c.Result(c.overlaps)
}

// converter is one conversion's state (conversion.Converter) and the
// mapping of kube-vip's keys.
type converter struct{ conversion.Converter }

// configMap converts the keys of one kube-vip ConfigMap. Warnings name the
// key as their field; the pools are annotated "ConfigMap ns/name: key".
func (c *converter) configMap(o *unstructured.Unstructured) {
	obj := conversion.Describe(o)
	data, _, err := unstructured.NestedStringMap(o.Object, "data")
	if err != nil {
		c.Warn(obj, "data", "not converted: %v", err)
		c.NotConverted = append(c.NotConverted, obj)
		return
	}
	if _, ok := o.Object["binaryData"]; ok {
		c.Warn(obj, "binaryData", "not carried over: kube-vip-cloud-provider reads data only")
	}
	serving, own := servingKeys(data)
	skipEnds := c.skipEnds(obj, data)
	for _, k := range slices.Sorted(maps.Keys(data)) {
		v := data[k]
		switch {
		case k == keySkipEnds:
		case k == keySearchOrder:
			c.searchOrder(obj, k, v)
		case strings.HasPrefix(k, prefixCIDR) || strings.HasPrefix(k, prefixRange):
			c.addressKey(obj, k, v, data, serving[k], own, skipEnds)
		case strings.HasPrefix(k, prefixShare):
			c.shareKey(obj, k, v)
		case strings.HasPrefix(k, prefixIface):
			c.Warn(obj, k, "not carried over: the interface kube-vip announces on is reachability, not address management; kube-vip-cloud-provider wrote it into each Service's kube-vip.io/serviceInterface annotation, which stays and which kube-vip keeps reading; "+
				"for new Services, set that annotation or kube-vip's vip_servicesinterface (docs/reachability.md)")
		default:
			c.Warn(obj, k, "not carried over: kube-vip-cloud-provider reads no such key")
		}
	}
}

// servingKeys returns the address keys that serve some namespace (ServingKey
// of each namespace the keys name, and of every other namespace), and the
// namespaces served by a key of their own, sorted.
func servingKeys(data map[string]string) (serving map[string]bool, own []string) {
	nsSet := map[string]bool{}
	for k := range data {
		for _, p := range []string{prefixCIDR, prefixRange, prefixShare, prefixIface} {
			if ns, ok := strings.CutPrefix(k, p); ok && ns != Global {
				if conversion.IsNamespaceName(ns) {
					nsSet[ns] = true
				}
				break
			}
		}
	}
	serving = map[string]bool{}
	for _, ns := range slices.Sorted(maps.Keys(nsSet)) {
		k := ServingKey(data, ns)
		if k == "" {
			continue
		}
		serving[k] = true
		if !strings.HasSuffix(k, "-"+Global) {
			own = append(own, ns)
		}
	}
	// Every other namespace (those the keys do not name) is served by the
	// global key, if any.
	if globalKey := ServingKey(data, "\x00"); globalKey != "" { // a namespace no key names
		serving[globalKey] = true
	}
	return serving, own
}

// skipEnds reads skip-end-ips-in-cidr as kube-vip-cloud-provider does:
// only exactly "true" skips.
func (c *converter) skipEnds(obj string, data map[string]string) bool {
	v, ok := data[keySkipEnds]
	if ok && v != "true" && v != "false" {
		c.Warn(obj, keySkipEnds, "%q is not \"true\", and kube-vip-cloud-provider skips the ends only for exactly \"true\": not skipped", v)
	}
	return v == "true"
}

func (c *converter) searchOrder(obj, key, val string) {
	if val == "desc" {
		c.Warn(obj, key, "not carried over: ipam hands out each pool's lowest never-used address first (then the least recently freed), kube-vip-cloud-provider with desc its highest; the addresses Services hold are kept either way")
	} else if val != "asc" && val != "" {
		c.Warn(obj, key, "%q is not desc, so kube-vip-cloud-provider searched upwards, as ipam does", val)
	}
}

// addressKey converts one cidr-* or range-* key, when it serves.
func (c *converter) addressKey(obj, key, val string, data map[string]string, serves bool, own []string, skipEnds bool) {
	_, ns, _ := strings.Cut(key, "-")
	if ns != Global && !conversion.IsNamespaceName(ns) {
		c.Warn(obj, key, "not converted: %q is not a namespace name, so no Service's namespace selects this key", ns)
		return
	}
	if !serves {
		winner := ServingKey(data, ns)
		c.Warn(obj, key, "not converted: kube-vip-cloud-provider reads %s first (cidr keys before range keys, a namespace's own before global), so it never gave out this key's addresses; "+
			"a Service holding one of them keeps it, held outside its pool (docs/pools.md)", winner)
		return
	}
	field := obj + ": " + key
	spec, skip, notes, err := parsePool(key, val, skipEnds)
	for _, n := range notes {
		c.Warn(obj, key, "%s", n)
	}
	if err != nil {
		c.Warn(obj, key, "not converted: %v", err)
		c.NotConverted = append(c.NotConverted, field)
		return
	}
	if len(spec.Addresses) > maxAddresses {
		c.Warn(obj, key, "not converted: %d entries, and an IPPool holds at most %d; merge adjacent entries into ranges", len(spec.Addresses), maxAddresses)
		c.NotConverted = append(c.NotConverted, field)
		return
	}
	if len(spec.Exclude) > maxExclude {
		c.Warn(obj, key, "not converted: skip-end-ips-in-cidr excludes %d addresses, and an IPPool excludes at most %d", len(spec.Exclude), maxExclude)
		c.NotConverted = append(c.NotConverted, field)
		return
	}
	out := conversion.NewIPPool(PoolPrefix+ns, ConvertedFrom, field)
	out.Spec = metallb.IPPoolSpec{
		Addresses:        spec.Addresses,
		Exclude:          spec.Exclude,
		AutoAssign:       true,
		AvoidBuggyIPs:    true,
		SkipFirstLastIPs: skip,
	}
	switch {
	case ns != Global:
		out.Spec.Allocation = &metallb.Allocation{Namespaces: []string{ns}}
	case len(own) > 0:
		out.Spec.Allocation = &metallb.Allocation{NamespaceSelectors: []metav1.LabelSelector{{
			MatchExpressions: []metav1.LabelSelectorRequirement{{Key: NamespaceNameLabel, Operator: metav1.LabelSelectorOpNotIn, Values: own}},
		}}}
		c.Warn(obj, key, "serves every namespace but those with a key of their own (%s): kube-vip-cloud-provider never gives those a global address, even when their own key is full or unreadable", strings.Join(own, ", "))
	}
	c.Pools = append(c.Pools, out)
}

func (c *converter) shareKey(obj, key, val string) {
	b, err := strconv.ParseBool(val)
	switch {
	case err != nil:
		c.Warn(obj, key, "%q is not a boolean, so kube-vip-cloud-provider does not share; nothing to carry over", val)
	case b:
		c.Warn(obj, key, "not carried over: kube-vip-cloud-provider puts Services whose ports differ on one IPv4 address without being asked; ipam shares an address only between Services "+
			"with the same ipledger.io/allow-shared-ip key (of one namespace, unless both list the other in ipledger.io/sharing-cross-namespace). "+
			"Give every Service that shares an address today a common key before the switch, or the younger gets a new address (%s)", guide)
	}
}

// poolAddrs are the address fields of a converted pool.
type poolAddrs struct {
	Addresses []string
	Exclude   []string
}

// parsePool reads a cidr-* or range-* value as kube-vip-cloud-provider does
// (pkg/ipam: comma-separated, nothing trimmed, CIDRs masked to their
// network, reversed or mixed-family ranges ignored) and writes it as IPPool
// entries. skipEnds is skip-end-ips-in-cidr: kube-vip skips the first and
// last address of each IPv4 prefix of the merged set of a cidr key (not of
// a /31 or /32), never of IPv6; that is skipFirstLastIPs over the merged
// prefixes when the pool has no IPv6 CIDR wider than /127 (where
// skipFirstLastIPs would also skip the last address), else exclusions.
func parsePool(key, val string, skipEnds bool) (out poolAddrs, skip bool, notes []string, err error) {
	if val == "" {
		return out, false, nil, errors.New("the value is empty; kube-vip-cloud-provider gives this key's Services no address, and so ipam would not")
	}
	isCIDR := strings.HasPrefix(key, prefixCIDR)
	if isCIDR && val == "0.0.0.0/32" {
		return out, false, nil, errors.New("0.0.0.0/32 is kube-vip's DHCP mode (each Service gets its address from a DHCP server), and ipam allocates only from pools; " +
			"these Services keep the address in their status, held outside every pool, but a new one gets none")
	}
	w := poolWriter{seen: map[string]bool{}}
	var prefixes []netip.Prefix
	for _, part := range strings.Split(val, ",") {
		if !isCIDR {
			if err := w.rangeEntry(part); err != nil {
				return poolAddrs{}, false, w.notes, err
			}
			continue
		}
		pfx, err := w.cidr(part)
		if err != nil {
			return poolAddrs{}, false, w.notes, err
		}
		prefixes = append(prefixes, pfx)
		if !skipEnds {
			w.add(pfx.String())
		}
	}
	if isCIDR && skipEnds {
		skip = w.mergedEnds(prefixes)
	}
	if len(w.out.Addresses) == 0 {
		return poolAddrs{}, false, w.notes, errors.New("no address: kube-vip-cloud-provider gives this key's Services none")
	}
	return w.out, skip, w.notes, nil
}

// poolWriter collects one key's IPPool entries, each once, and the notes
// on them.
type poolWriter struct {
	out   poolAddrs
	notes []string
	seen  map[string]bool
}

func (w *poolWriter) add(e string) {
	if w.seen[e] {
		w.notes = append(w.notes, fmt.Sprintf("%s repeats an earlier entry; written once", e))
		return
	}
	w.seen[e] = true
	w.out.Addresses = append(w.out.Addresses, e)
}

// cidr reads one CIDR of a cidr-* key, masked to its network, noting what
// ipam does differently.
func (w *poolWriter) cidr(part string) (netip.Prefix, error) {
	pfx, err := netip.ParsePrefix(part)
	switch {
	case err != nil:
		return pfx, fmt.Errorf("%q is not a CIDR, and kube-vip-cloud-provider cannot read it either (it fails every Service of this key); write CIDRs separated by commas, without spaces", part)
	case pfx.Addr().Is4In6():
		return pfx, fmt.Errorf("%q is an IPv4-mapped IPv6 prefix, which the IPPool CRD refuses; write it as an IPv4 CIDR", part)
	}
	if m := pfx.Masked(); m != pfx {
		w.notes = append(w.notes, fmt.Sprintf("%q has host bits set; kube-vip-cloud-provider allocates from the network %s, and so does the IPPool", part, m))
		pfx = m
	}
	w.notes = append(w.notes, metallb.UnusableNotes(pfx.Addr(), conversion.LastOf(pfx))...)
	if pfx.Addr().Is6() && pfx.Bits() < 127 {
		w.notes = append(w.notes, fmt.Sprintf("ipledger never hands out %s, the Subnet-Router anycast address of %s (kube-vip-cloud-provider does); "+
			"a Service that holds it keeps it, held outside its pool (docs/pools.md)", pfx.Addr(), pfx))
	}
	return pfx, nil
}

// rangeEntry reads one first-last range of a range-* key and adds it;
// kube-vip ignores a reversed or mixed-family range, and so does the pool.
func (w *poolWriter) rangeEntry(part string) error {
	lo, hi, ok := strings.Cut(part, "-")
	if !ok || strings.Contains(hi, "-") {
		return fmt.Errorf("%q is not a range first-last, and kube-vip-cloud-provider cannot read it either (it fails every Service of this key)", part)
	}
	a, errA := netip.ParseAddr(lo)
	b, errB := netip.ParseAddr(hi)
	switch {
	case errA != nil || errB != nil || a.Zone() != "" || b.Zone() != "":
		return fmt.Errorf("%q is not a range of two IP addresses, and kube-vip-cloud-provider cannot read it either (it fails every Service of this key)", part)
	case a.Is4In6() || b.Is4In6():
		return fmt.Errorf("%q has an IPv4-mapped IPv6 address, which the IPPool CRD refuses; write the IPv4 address", part)
	case a.Is4() != b.Is4() || b.Less(a):
		w.notes = append(w.notes, fmt.Sprintf("%q is reversed or mixes families; kube-vip-cloud-provider ignores it without a word, and so does the IPPool", part))
		return nil
	}
	w.notes = append(w.notes, metallb.UnusableNotes(a, b)...)
	if a == b {
		w.add(netip.PrefixFrom(a, a.BitLen()).String())
	} else {
		w.add(a.String() + "-" + b.String())
	}
	return nil
}

// mergedEnds adds the prefixes of the merged set of a cidr key whose ends
// kube-vip skips (skip-end-ips-in-cidr): so that each entry's ends are
// kube-vip's. It returns whether skipFirstLastIPs says the skip; else (an
// IPv6 CIDR wider than /127, whose last address skipFirstLastIPs would skip
// too) the IPv4 ends are written as exclusions.
func (w *poolWriter) mergedEnds(prefixes []netip.Prefix) (skip bool) {
	merged := mergedPrefixes(prefixes)
	wide6 := slices.ContainsFunc(merged, func(p netip.Prefix) bool { return p.Addr().Is6() && p.Bits() < 127 })
	for _, p := range merged {
		w.add(p.String())
		if wide6 && p.Addr().Is4() && p.Bits() < 31 {
			w.out.Exclude = append(w.out.Exclude, p.Addr().String(), conversion.LastOf(p).String())
		}
	}
	if wide6 {
		w.notes = append(w.notes, "skip-end-ips-in-cidr skips the first and last address of each IPv4 CIDR only: written as exclude entries, since skipFirstLastIPs would skip each IPv6 CIDR's last address too")
		return false
	}
	return true
}

// mergedPrefixes is the set of prefixes covering the union of ps, each
// family's largest aligned blocks in address order (what netipx.IPSet's
// Prefixes returns, which kube-vip-cloud-provider iterates).
func mergedPrefixes(ps []netip.Prefix) []netip.Prefix {
	type span struct{ lo, hi netip.Addr }
	var spans []span
	for _, p := range ps {
		spans = append(spans, span{p.Addr(), conversion.LastOf(p)})
	}
	slices.SortFunc(spans, func(a, b span) int { return cmp.Or(a.lo.Compare(b.lo), a.hi.Compare(b.hi)) })
	var merged []span
	for _, s := range spans {
		if n := len(merged); n > 0 && merged[n-1].lo.Is4() == s.lo.Is4() {
			last := &merged[n-1]
			if next := last.hi.Next(); !s.lo.Less(last.lo) && (!next.IsValid() || !next.Less(s.lo)) {
				if last.hi.Less(s.hi) {
					last.hi = s.hi
				}
				continue
			}
		}
		merged = append(merged, s)
	}
	var out []netip.Prefix
	for _, s := range merged {
		lo := s.lo
		for {
			var p netip.Prefix
			for bits := 0; bits <= lo.BitLen(); bits++ {
				p = netip.PrefixFrom(lo, bits).Masked()
				if p.Addr() == lo && !s.hi.Less(conversion.LastOf(p)) {
					break
				}
			}
			out = append(out, p)
			end := conversion.LastOf(p)
			if end == s.hi {
				break
			}
			lo = end.Next()
		}
	}
	return out
}

// overlaps warns, on the later of two converted pools, that it shares
// addresses with the earlier: kube-vip-cloud-provider looks for a free
// address of a namespace key among that namespace's Services only, so two
// namespace keys over one range can give one address to two Services; ipam
// makes the younger of two overlapping IPPools Conflicting instead.
func (c *converter) overlaps() {
	for _, o := range conversion.Overlaps(c.Pools) {
		from := c.Pools[o.Later].Metadata.Annotations[metallb.AnnotationConvertedFrom]
		obj, key, _ := strings.Cut(from, ": ")
		c.Warn(obj, key, "shares addresses (%s, …) with IPPool %s: ipam makes the younger of two overlapping pools Conflicting, and a Conflicting pool gives out nothing "+
			"(kube-vip-cloud-provider could give one address to two namespaces); remove the overlap before applying", o.Shared, c.Pools[o.Earlier].Metadata.Name)
	}
}
