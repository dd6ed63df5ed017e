package metallb

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"

	"github.com/ipledger/ipledger/plugin/internal/conversion"
)

// convertAddress reads one entry of an IPAddressPool's spec.addresses the
// way MetalLB does (a CIDR, host bits allowed, or "first-last") and writes
// it in the form the IPPool CRD accepts: a CIDR without host bits or a range
// of one family, canonical spelling. notes say what changed or what ipledger
// treats differently; err says why the entry cannot be converted.
func convertAddress(s string) (entry string, notes []string, err error) {
	s = strings.TrimSpace(s)
	first, last, isRange := strings.Cut(s, "-")
	if !isRange {
		pfx, err := netip.ParsePrefix(s)
		switch {
		case err != nil:
			return "", nil, errors.New("is neither a CIDR (192.0.2.0/24) nor a range (192.0.2.10-192.0.2.20); MetalLB refuses it too")
		case pfx.Addr().Is4In6():
			return "", nil, fmt.Errorf("is an IPv4-mapped IPv6 prefix, which the IPPool CRD refuses; write it as an IPv4 CIDR (%s)", mappedHint(pfx))
		}
		if m := pfx.Masked(); m != pfx {
			notes = append(notes, fmt.Sprintf("%q has host bits set; MetalLB uses the network %s, and so does the IPPool", s, m))
			pfx = m
		}
		lo, hi := pfx.Addr(), conversion.LastOf(pfx)
		notes = append(notes, UnusableNotes(lo, hi)...)
		if lo.Is6() && pfx.Bits() < 127 {
			notes = append(notes, fmt.Sprintf("ipledger never hands out %s, the Subnet-Router anycast address of %s; "+
				"a Service that holds it keeps it, held outside its pool (docs/pools.md)", lo, pfx))
		}
		return pfx.String(), notes, nil
	}

	lo, err := parseRangeEnd(first)
	if err != nil {
		return "", nil, fmt.Errorf("starts with %q, which is not an IP address; MetalLB refuses it too", strings.TrimSpace(first))
	}
	hi, err := parseRangeEnd(last)
	if err != nil {
		return "", nil, fmt.Errorf("ends with %q, which is not an IP address; MetalLB refuses it too", strings.TrimSpace(last))
	}
	for _, a := range []netip.Addr{lo, hi} {
		if a.Is4In6() {
			notes = append(notes, fmt.Sprintf("%s is an IPv4-mapped IPv6 address, which MetalLB reads as %s; the IPPool says %s", a, a.Unmap(), a.Unmap()))
		}
	}
	lo, hi = lo.Unmap(), hi.Unmap()
	switch {
	case lo.Is4() != hi.Is4():
		return "", nil, errors.New("mixes IPv4 and IPv6; write one range per family")
	case hi.Less(lo):
		return "", nil, errors.New("starts after it ends; MetalLB refuses it too (write the lower address first)")
	}
	return lo.String() + "-" + hi.String(), append(notes, UnusableNotes(lo, hi)...), nil
}

// parseRangeEnd parses one end of a range as MetalLB's net.ParseIP does: no
// zone, IPv4 octets without leading zeros.
func parseRangeEnd(s string) (netip.Addr, error) {
	a, err := netip.ParseAddr(strings.TrimSpace(s))
	if err == nil && a.Zone() != "" {
		err = errors.New("zone")
	}
	return a, err
}

func mappedHint(pfx netip.Prefix) string {
	if pfx.Bits() < 96 {
		return "it covers more than the IPv4 space"
	}
	return netip.PrefixFrom(pfx.Addr().Unmap(), pfx.Bits()-96).Masked().String()
}

// unusable are the blocks ipam never hands out, whatever the pool contains
// (services/ipam/internal/allocator/unusable.go; docs/pools.md, "Addresses
// nobody can use").
var unusable = []struct {
	first, last netip.Addr
	kind        string
}{
	{netip.MustParseAddr("0.0.0.0"), netip.MustParseAddr("0.0.0.0"), "the unspecified address"},
	{netip.MustParseAddr("127.0.0.0"), netip.MustParseAddr("127.255.255.255"), "loopback"},
	{netip.MustParseAddr("169.254.0.0"), netip.MustParseAddr("169.254.255.255"), "link-local"},
	{netip.MustParseAddr("224.0.0.0"), netip.MustParseAddr("239.255.255.255"), "multicast"},
	{netip.MustParseAddr("255.255.255.255"), netip.MustParseAddr("255.255.255.255"), "the limited broadcast address"},
	{netip.MustParseAddr("::"), netip.MustParseAddr("::"), "the unspecified address"},
	{netip.MustParseAddr("::1"), netip.MustParseAddr("::1"), "loopback"},
	{netip.MustParseAddr("fe80::"), netip.MustParseAddr("febf:ffff:ffff:ffff:ffff:ffff:ffff:ffff"), "link-local"},
	{netip.MustParseAddr("ff00::"), netip.MustParseAddr("ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff"), "multicast"},
}

// UnusableNotes says which part of lo-hi ipam never hands out, as
// warnings (the Cilium converter writes them too).
func UnusableNotes(lo, hi netip.Addr) []string {
	var out []string
	for _, b := range unusable {
		if lo.Is4() != b.first.Is4() || hi.Less(b.first) || b.last.Less(lo) {
			continue
		}
		from, to := conversion.Later(lo, b.first), conversion.Earlier(hi, b.last)
		what := from.String()
		if from != to {
			what = from.String() + "-" + to.String()
		}
		out = append(out, fmt.Sprintf("ipledger never hands out %s (%s); a Service that holds such an address keeps it, held outside its pool (docs/pools.md)", what, b.kind))
	}
	return out
}
