package kubevip

import (
	"net/netip"
	"strings"
	"testing"
)

// FuzzParsePool: any value of a cidr- or range- key either is refused or
// gives entries the IPPool CRD accepts (CIDRs without host bits, ranges of
// one family in order), exclusions that are addresses, and never panics.
func FuzzParsePool(f *testing.F) {
	for _, s := range []string{"192.168.0.220/29", "192.168.0.10-192.168.0.11,2001::10-2001::11", "10.0.0.0/26,10.0.0.64/26", "0.0.0.0/32", "",
		"10.0.0.9-10.0.0.1", "10.0.0.8/29,2001:db8::/64", "::ffff:10.0.0.0/120"} {
		f.Add("cidr-a", s, true)
		f.Add("range-a", s, false)
	}
	f.Fuzz(func(t *testing.T, key, val string, skipEnds bool) {
		if !strings.HasPrefix(key, prefixCIDR) && !strings.HasPrefix(key, prefixRange) {
			return
		}
		out, _, _, err := parsePool(key, val, skipEnds)
		if err != nil {
			return
		}
		if len(out.Addresses) == 0 {
			t.Fatalf("%s=%q: no entries and no error", key, val)
		}
		for _, e := range out.Addresses {
			if lo, hi, ok := strings.Cut(e, "-"); ok {
				a, errA := netip.ParseAddr(lo)
				b, errB := netip.ParseAddr(hi)
				if errA != nil || errB != nil || a.Is4() != b.Is4() || b.Less(a) || a.Is4In6() {
					t.Fatalf("%s=%q: bad range entry %q", key, val, e)
				}
				continue
			}
			p, err := netip.ParsePrefix(e)
			if err != nil || p.Masked() != p || p.Addr().Is4In6() || p.Addr().Zone() != "" {
				t.Fatalf("%s=%q: bad CIDR entry %q", key, val, e)
			}
		}
		for _, e := range out.Exclude {
			if _, err := netip.ParseAddr(e); err != nil {
				t.Fatalf("%s=%q: bad exclusion %q", key, val, e)
			}
		}
	})
}
