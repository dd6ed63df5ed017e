package allocator

import (
	"cmp"
	"fmt"
	"math/big"
	"net/netip"
	"slices"
	"sort"
	"strings"
	"time"
)

// PoolSpec is an IPPool's spec, as the controller read it.
type PoolSpec struct {
	// Addresses are CIDRs with no host bits ("10.0.0.0/24", "2001:db8::/64")
	// or inclusive ranges of one family ("10.0.0.10-10.0.0.20").
	Addresses     []string
	AutoAssign    bool
	AvoidBuggyIPs bool // skip IPv4 addresses ending in .0 or .255
	// Exclude are addresses ("10.0.0.1"), CIDRs or ranges of the pool that
	// are never handed out: gateways, routers, addresses used elsewhere.
	Exclude []string
	// SkipFirstLastIPs skips the first and last address of each CIDR entry
	// of Addresses (its network and broadcast addresses), except /31 and
	// /32 (IPv6 /127 and /128), which have none.
	SkipFirstLastIPs bool
	Priority         int32 // lower first; 0 = unset, after every set one
	// Namespaces OR NamespaceSelectors restrict the namespaces served (both
	// empty = every namespace); ServiceSelectors restrict the Services (any
	// one matching is enough; empty = every Service).
	Namespaces         []string
	NamespaceSelectors []Selector
	ServiceSelectors   []Selector
	// CreatedAt decides overlaps: the newer pool is Conflicting.
	CreatedAt time.Time
	// Terminating is set while the IPPool is being deleted: the Services
	// holding its addresses keep them, and it hands out nothing new.
	Terminating bool
	// MaxAddressesPerNamespace caps the addresses of the pool that the
	// Services of one namespace hold or request (0 = no cap), so that no
	// tenant can starve the others. Lowering it takes nothing back.
	MaxAddressesPerNamespace int
	// KeepReleased is how long an address a Service released (it was
	// deleted, or is no longer served) stays kept for that Service
	// (spec.allocation.keepReleasedSeconds; objects.PoolSet fills in the
	// cluster default): nil or 0 frees it at once.
	KeepReleased *time.Duration
}

// Pool is a parsed IPPool. It is immutable.
type Pool struct {
	name   string
	spec   PoolSpec
	ranges []addrRange // sorted, disjoint, not adjacent; IPv4 before IPv6
	// unusable are the addresses of ranges that are never handed out (see
	// unusableBlocks, skipped): sorted, disjoint.
	unusable []addrRange
	// skipped are the pool's own addresses it never hands out, with why:
	// spec.exclude, then Subnet-Router anycast addresses, then the first and
	// last addresses spec.skipFirstLastIPs skips; each inside ranges.
	skipped []skippedRange
	total   [2]*big.Int // allocatable IPv4, IPv6
}

func famIdx(f Family) int {
	if f == IPv6 {
		return 1
	}
	return 0
}

// ParsePool parses and validates an IPPool spec. Errors name the entry of
// spec.addresses (or the selector) and say how to fix it. Overlapping or
// adjacent entries of one pool are merged, so totals count each address once.
func ParsePool(name string, spec PoolSpec) (*Pool, error) {
	if err := checkPoolScalars(name, spec); err != nil {
		return nil, err
	}
	var ranges []addrRange
	var anycast, firstLast []skippedRange
	for i, s := range spec.Addresses {
		r, err := parseAddressEntry(s)
		if err != nil {
			return nil, fmt.Errorf("spec.addresses[%d] %q: %w", i, s, err)
		}
		ranges = append(ranges, r)
		if a, ok := subnetRouterAnycast(s); ok {
			anycast = append(anycast, skippedRange{addrRange{a, a}, "the Subnet-Router anycast address of its prefix"})
		}
		if spec.SkipFirstLastIPs {
			firstLast = append(firstLast, firstAndLast(s)...)
		}
	}
	merged := mergeRanges(slices.Clone(ranges))
	var excluded []skippedRange
	for i, s := range spec.Exclude {
		r, err := parseExcludeEntry(s)
		if err != nil {
			return nil, fmt.Errorf("spec.exclude[%d] %q: %w", i, s, err)
		}
		in := clip(r, merged)
		if len(in) == 0 {
			return nil, fmt.Errorf("spec.exclude[%d] %q: outside every entry of spec.addresses (%s); exclude addresses of this pool, or remove the entry",
				i, s, strings.Join(trimmed(spec.Addresses), ", "))
		}
		for _, c := range in {
			excluded = append(excluded, skippedRange{c, fmt.Sprintf("excluded by spec.exclude[%d] %q", i, s)})
		}
	}
	if err := checkPoolSelectors(spec); err != nil {
		return nil, err
	}
	p := &Pool{name: name, spec: clonePoolSpec(spec), ranges: merged}
	p.skipped = slices.Concat(excluded, anycast, firstLast)
	p.unusable = unusableIn(p.ranges, p.skipped)
	p.countTotal()
	return p, nil
}

// checkPoolScalars checks a pool's name and the single fields of its spec.
func checkPoolScalars(name string, spec PoolSpec) error {
	if name == "" {
		return fmt.Errorf("metadata.name: empty pool name")
	}
	if len(spec.Addresses) == 0 {
		return fmt.Errorf("spec.addresses: empty; list at least one CIDR (10.0.0.0/24) or range (10.0.0.10-10.0.0.20)")
	}
	if spec.Priority < 0 {
		return fmt.Errorf("spec.allocation.priority: %d is negative; use 0 (unset) or a positive number", spec.Priority)
	}
	if spec.MaxAddressesPerNamespace < 0 {
		return fmt.Errorf("spec.allocation.maxAddressesPerNamespace: %d is negative; use a positive number, or leave it out for no cap", spec.MaxAddressesPerNamespace)
	}
	if spec.KeepReleased != nil && *spec.KeepReleased < 0 {
		return fmt.Errorf("spec.allocation.keepReleasedSeconds: %d is negative; use 0 to free released addresses at once, or leave it out for the cluster default", int64(spec.KeepReleased.Seconds()))
	}
	return nil
}

// checkPoolSelectors checks the namespaces and selectors a pool serves.
func checkPoolSelectors(spec PoolSpec) error {
	for i, ns := range spec.Namespaces {
		if !isDNSLabel(ns) {
			return fmt.Errorf("spec.allocation.namespaces[%d] %q: not a namespace name; use lowercase letters, digits and '-' (at most 63, starting and ending with a letter or digit)", i, ns)
		}
	}
	for i, s := range spec.NamespaceSelectors {
		if err := s.validate(fmt.Sprintf("spec.allocation.namespaceSelectors[%d]", i)); err != nil {
			return err
		}
	}
	for i, s := range spec.ServiceSelectors {
		if err := s.validate(fmt.Sprintf("spec.allocation.serviceSelectors[%d]", i)); err != nil {
			return err
		}
	}
	return nil
}

// countTotal counts the addresses p hands out, by family.
func (p *Pool) countTotal() {
	p.total = [2]*big.Int{new(big.Int), new(big.Int)}
	for _, r := range p.ranges {
		n := r.size()
		if p.spec.AvoidBuggyIPs {
			n.Sub(n, buggyCount(r))
		}
		t := p.total[famIdx(FamilyOf(r.first))]
		t.Add(t, n)
	}
	for _, r := range p.unusable {
		// Unusable ranges lie inside the pool's ranges; their buggy
		// addresses were already subtracted above.
		n := r.size()
		if p.spec.AvoidBuggyIPs {
			n.Sub(n, buggyCount(r))
		}
		t := p.total[famIdx(FamilyOf(r.first))]
		t.Sub(t, n)
	}
}

func clonePoolSpec(s PoolSpec) PoolSpec {
	s.Addresses = slices.Clone(s.Addresses)
	s.Exclude = slices.Clone(s.Exclude)
	s.Namespaces = slices.Clone(s.Namespaces)
	s.NamespaceSelectors = slices.Clone(s.NamespaceSelectors)
	s.ServiceSelectors = slices.Clone(s.ServiceSelectors)
	if s.KeepReleased != nil {
		d := *s.KeepReleased
		s.KeepReleased = &d
	}
	return s
}

// parseAddressEntry parses "10.0.0.0/24" or "10.0.0.10-10.0.0.20".
func parseAddressEntry(s string) (addrRange, error) {
	s = strings.TrimSpace(s)
	if a, b, ok := strings.Cut(s, "-"); ok {
		first, err := parsePoolAddr(strings.TrimSpace(a))
		if err != nil {
			return addrRange{}, err
		}
		last, err := parsePoolAddr(strings.TrimSpace(b))
		if err != nil {
			return addrRange{}, err
		}
		if first.Is4() != last.Is4() {
			return addrRange{}, fmt.Errorf("range mixes IPv4 and IPv6; write one range per family")
		}
		if first.Compare(last) > 0 {
			return addrRange{}, fmt.Errorf("range starts after it ends; write it as %s-%s", last, first)
		}
		return addrRange{first, last}, nil
	}
	if !strings.Contains(s, "/") {
		return addrRange{}, fmt.Errorf("neither a CIDR nor a range; write 10.0.0.0/24, 10.0.0.10-10.0.0.20, or 10.0.0.7/32 for one address")
	}
	pfx, err := netip.ParsePrefix(s)
	if err != nil {
		return addrRange{}, fmt.Errorf("not a CIDR: %v", err)
	}
	if pfx.Addr().Is4In6() {
		return addrRange{}, fmt.Errorf("IPv4-mapped IPv6 prefix; write the IPv4 CIDR instead")
	}
	if m := pfx.Masked(); m != pfx {
		return addrRange{}, fmt.Errorf("host bits set; the CIDR is %s", m)
	}
	return addrRange{pfx.Addr(), lastOf(pfx)}, nil
}

// parseExcludeEntry parses an entry of spec.exclude: what an entry of
// spec.addresses may be, or one address ("10.0.0.1").
func parseExcludeEntry(s string) (addrRange, error) {
	t := strings.TrimSpace(s)
	if strings.ContainsAny(t, "-/") {
		return parseAddressEntry(t)
	}
	if _, err := netip.ParseAddr(t); err != nil {
		return addrRange{}, fmt.Errorf("neither an address, a CIDR nor a range; write 10.0.0.1, 10.0.0.128/28 or 10.0.0.240-10.0.0.250")
	}
	a, err := parsePoolAddr(t)
	if err != nil {
		return addrRange{}, err
	}
	return addrRange{a, a}, nil
}

// clip returns the parts of r inside ranges (sorted, disjoint).
func clip(r addrRange, ranges []addrRange) []addrRange {
	var out []addrRange
	for _, p := range ranges {
		if !r.overlaps(p) {
			continue
		}
		c := p
		if r.first.Compare(c.first) > 0 {
			c.first = r.first
		}
		if r.last.Compare(c.last) < 0 {
			c.last = r.last
		}
		out = append(out, c)
	}
	return out
}

// firstAndLast returns the first and last address of a CIDR entry, which
// spec.skipFirstLastIPs skips: its network and broadcast addresses. Nothing
// of a range entry is skipped (its ends are the operator's choice), nor of
// an IPv4 /31 or /32 or an IPv6 /127 or /128, which have neither (RFC 3021,
// RFC 6164).
func firstAndLast(entry string) []skippedRange {
	pfx, err := netip.ParsePrefix(strings.TrimSpace(entry))
	if err != nil || pfx.Bits() >= pfx.Addr().BitLen()-1 {
		return nil
	}
	pfx = pfx.Masked()
	first, last := pfx.Addr(), lastOf(pfx)
	return []skippedRange{
		{addrRange{first, first}, fmt.Sprintf("the first address of %s (spec.skipFirstLastIPs)", pfx)},
		{addrRange{last, last}, fmt.Sprintf("the last address of %s (spec.skipFirstLastIPs)", pfx)},
	}
}

func trimmed(ss []string) []string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = strings.TrimSpace(s)
	}
	return out
}

func parsePoolAddr(s string) (netip.Addr, error) {
	a, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Addr{}, fmt.Errorf("%q is not an IP address", s)
	}
	if a.Zone() != "" {
		return netip.Addr{}, fmt.Errorf("%q has a zone; remove %%%s", s, a.Zone())
	}
	if a.Is4In6() {
		return netip.Addr{}, fmt.Errorf("%q is an IPv4-mapped IPv6 address; write %s", s, a.Unmap())
	}
	return a, nil
}

// lastOf returns the highest address of a masked prefix.
func lastOf(p netip.Prefix) netip.Addr {
	bits := p.Bits()
	if p.Addr().Is4() {
		b := p.Addr().As4()
		setHostBits(b[:], bits)
		return netip.AddrFrom4(b)
	}
	b := p.Addr().As16()
	setHostBits(b[:], bits)
	return netip.AddrFrom16(b)
}

func setHostBits(b []byte, bits int) {
	for i := range b {
		switch {
		case bits >= 8:
			bits -= 8
		case bits > 0:
			b[i] |= 0xff >> bits
			bits = 0
		default:
			b[i] = 0xff
		}
	}
}

// mergeRanges sorts ranges and merges overlapping or adjacent ones.
func mergeRanges(rs []addrRange) []addrRange {
	slices.SortFunc(rs, func(a, b addrRange) int { return a.first.Compare(b.first) })
	var out []addrRange
	for _, r := range rs {
		if n := len(out); n > 0 {
			last := &out[n-1]
			if next := last.last.Next(); r.first.Compare(last.last) <= 0 || (next.IsValid() && next == r.first) {
				if r.last.Compare(last.last) > 0 {
					last.last = r.last
				}
				continue
			}
		}
		out = append(out, r)
	}
	return out
}

// Name returns the pool's name.
func (p *Pool) Name() string { return p.name }

// Spec returns (a copy of) the spec the pool was parsed from.
func (p *Pool) Spec() PoolSpec { return clonePoolSpec(p.spec) }

// Pinned reports whether the pool is restricted to some namespaces or
// Services; pinned pools are tried before unrestricted ones.
func (p *Pool) Pinned() bool {
	s := p.spec
	return len(s.Namespaces) > 0 || len(s.NamespaceSelectors) > 0 || len(s.ServiceSelectors) > 0
}

// Contains reports whether ip lies in the pool's addresses.
func (p *Pool) Contains(ip netip.Addr) bool {
	i := sort.Search(len(p.ranges), func(i int) bool { return p.ranges[i].last.Compare(ip) >= 0 })
	return i < len(p.ranges) && p.ranges[i].first.Compare(ip) <= 0
}

// Overlaps reports whether the two pools share an address.
func (p *Pool) Overlaps(o *Pool) bool {
	for _, r := range p.ranges {
		for _, s := range o.ranges {
			if r.overlaps(s) {
				return true
			}
		}
	}
	return false
}

// HasFamily reports whether the pool has addresses of family f.
func (p *Pool) HasFamily(f Family) bool { return p.total[famIdx(f)].Sign() > 0 }

// Total returns the number of allocatable addresses of a family (without the
// ones avoidBuggyIPs skips).
func (p *Pool) Total(f Family) *big.Int { return new(big.Int).Set(p.total[famIdx(f)]) }

// allocatable reports whether ip may be handed out by this pool at all.
func (p *Pool) allocatable(ip netip.Addr) bool {
	return p.Contains(ip) && !(p.spec.AvoidBuggyIPs && buggy(ip)) && p.unusableRange(ip) == nil
}

// unusableRange returns the unusable range of the pool containing ip.
func (p *Pool) unusableRange(ip netip.Addr) *addrRange {
	i := sort.Search(len(p.unusable), func(i int) bool { return p.unusable[i].last.Compare(ip) >= 0 })
	if i < len(p.unusable) && p.unusable[i].first.Compare(ip) <= 0 {
		return &p.unusable[i]
	}
	return nil
}

// servesNamespace reports whether the pool serves the namespace.
func (p *Pool) servesNamespace(ns string, nsLabels map[string]string) bool {
	s := p.spec
	if len(s.Namespaces) == 0 && len(s.NamespaceSelectors) == 0 {
		return true
	}
	return slices.Contains(s.Namespaces, ns) || anyMatches(s.NamespaceSelectors, nsLabels)
}

// servesService reports whether the pool's service selectors admit the labels.
func (p *Pool) servesService(labels map[string]string) bool {
	return len(p.spec.ServiceSelectors) == 0 || anyMatches(p.spec.ServiceSelectors, labels)
}

// rankCompare orders pools as they are tried: pinned first, then set
// priorities ascending, then unset (0), then name.
func rankCompare(a, b *Pool) int {
	if a.Pinned() != b.Pinned() {
		if a.Pinned() {
			return -1
		}
		return 1
	}
	pa, pb := a.spec.Priority, b.spec.Priority
	if (pa == 0) != (pb == 0) {
		if pa == 0 {
			return 1
		}
		return -1
	}
	if c := cmp.Compare(pa, pb); c != 0 {
		return c
	}
	return strings.Compare(a.name, b.name)
}

// sameRank reports whether rankCompare orders a and b by name alone.
func sameRank(a, b *Pool) bool {
	return a.Pinned() == b.Pinned() && a.spec.Priority == b.spec.Priority
}

// ageCompare orders pools oldest first (CreatedAt, then name): the older of
// two overlapping pools serves.
func ageCompare(a, b *Pool) int {
	if c := a.spec.CreatedAt.Compare(b.spec.CreatedAt); c != 0 {
		return c
	}
	return strings.Compare(a.name, b.name)
}
