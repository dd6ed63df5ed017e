package metallb

import (
	"net/netip"
	"strings"
	"testing"
)

// FuzzConvertAddress: whatever an IPAddressPool's address says, converting
// it never panics, and what it writes is in the IPPool CRD's form (a CIDR
// without host bits, or a range of one family that does not start after it
// ends) and converts to itself.
func FuzzConvertAddress(f *testing.F) {
	for _, s := range []string{
		"192.168.10.0/24", "192.168.9.1-192.168.9.5", "fc00:f853:0ccd:e799::/124", "192.0.2.77/24",
		"::ffff:192.0.2.1-192.0.2.9", "192.0.2.20-192.0.2.10", "fe80::1%eth0-fe80::9", "::ffff:192.0.2.0/120",
		"10.0.0.1 - 10.0.0.9", "banana", "1-2-3", "0.0.0.0/0", "::/0",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		entry, _, err := convertAddress(s)
		if err != nil {
			return
		}
		if first, last, ok := strings.Cut(entry, "-"); ok {
			lo, err1 := netip.ParseAddr(first)
			hi, err2 := netip.ParseAddr(last)
			if err1 != nil || err2 != nil || lo.Is4() != hi.Is4() || hi.Less(lo) || lo.Zone() != "" || lo.Is4In6() || hi.Is4In6() {
				t.Fatalf("%q -> %q: not a range of one family in order", s, entry)
			}
		} else if p, err := netip.ParsePrefix(entry); err != nil || p.Masked() != p || p.Addr().Is4In6() {
			t.Fatalf("%q -> %q: not a CIDR without host bits", s, entry)
		}
		again, _, err := convertAddress(entry)
		if err != nil || again != entry {
			t.Fatalf("%q -> %q -> %q, %v: not stable", s, entry, again, err)
		}
	})
}
