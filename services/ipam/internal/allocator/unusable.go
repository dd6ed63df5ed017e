package allocator

import (
	"net/netip"
	"regexp"
	"strings"
)

// unusableBlock is a block of addresses no client can reach as a
// LoadBalancer IP. A pool may contain them (0.0.0.0/30 is a valid spec); they
// are simply never handed out, requested or not.
type unusableBlock struct {
	r    addrRange
	kind string
}

var unusableBlocks = []unusableBlock{
	block("0.0.0.0", "0.0.0.0", "the unspecified address"),
	block("127.0.0.0", "127.255.255.255", "a loopback address"),
	block("169.254.0.0", "169.254.255.255", "a link-local address"),
	block("224.0.0.0", "239.255.255.255", "a multicast address"),
	block("255.255.255.255", "255.255.255.255", "the limited broadcast address"),
	block("::", "::", "the unspecified address"),
	block("::1", "::1", "the loopback address"),
	block("fe80::", "febf:ffff:ffff:ffff:ffff:ffff:ffff:ffff", "a link-local address"),
	block("ff00::", "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", "a multicast address"),
}

func block(first, last, kind string) unusableBlock {
	return unusableBlock{addrRange{netip.MustParseAddr(first), netip.MustParseAddr(last)}, kind}
}

// unusableKind says why ip is never handed out, "" when it may be (the
// addresses a pool skips of its own depend on the pool; see Pool.unusableWhy).
func unusableKind(ip netip.Addr) string {
	for _, b := range unusableBlocks {
		if b.r.contains(ip) {
			return b.kind
		}
	}
	return ""
}

// subnetRouterAnycast returns the first address of an IPv6 CIDR entry: the
// Subnet-Router anycast address of that prefix (RFC 4291 2.6.1), which
// routers answer. /127 and /128 have none (RFC 6164).
func subnetRouterAnycast(entry string) (netip.Addr, bool) {
	pfx, err := netip.ParsePrefix(strings.TrimSpace(entry))
	if err != nil || pfx.Addr().Is4() || pfx.Bits() >= 127 {
		return netip.Addr{}, false
	}
	return pfx.Masked().Addr(), true
}

// skippedRange is a part of a pool that the pool itself never hands out,
// and why (for the Service's condition).
type skippedRange struct {
	r   addrRange
	why string
}

// unusableIn returns the parts of ranges (sorted, disjoint) that are never
// handed out: the unusable blocks and the skipped ranges, merged.
func unusableIn(ranges []addrRange, skipped []skippedRange) []addrRange {
	var out []addrRange
	for _, s := range skipped {
		out = append(out, s.r)
	}
	for _, r := range ranges {
		for _, b := range unusableBlocks {
			if !r.overlaps(b.r) {
				continue
			}
			first, last := r.first, r.last
			if b.r.first.Compare(first) > 0 {
				first = b.r.first
			}
			if b.r.last.Compare(last) < 0 {
				last = b.r.last
			}
			out = append(out, addrRange{first, last})
		}
	}
	return mergeRanges(out)
}

// unusableWhy says why the pool never hands out ip, "" when it may.
func (p *Pool) unusableWhy(ip netip.Addr) string {
	if p.unusableRange(ip) == nil {
		return ""
	}
	if k := unusableKind(ip); k != "" {
		return k
	}
	for _, s := range p.skipped {
		if s.r.contains(ip) {
			return s.why
		}
	}
	return "never handed out" // unreachable: unusable is made of the two above
}

// dnsLabel is a namespace name (RFC 1123 label), as the API server checks it
// and as the IPPool CRD's pattern repeats it.
var dnsLabel = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`)

func isDNSLabel(s string) bool { return len(s) <= 63 && dnsLabel.MatchString(s) }
