package cilium

import (
	"net/netip"
	"strings"
	"testing"
)

// FuzzConvertBlock: whatever a Cilium block says, converting it never
// panics, and what it writes is in the IPPool CRD's form (a CIDR without
// host bits, or a range of one family that does not start after it ends).
func FuzzConvertBlock(f *testing.F) {
	for _, b := range []block{
		{Cidr: "10.0.10.0/24"}, {Cidr: "2004::0/64"}, {Start: "20.0.20.100", Stop: "20.0.20.200"}, {Start: "1.2.3.4"},
		{Cidr: "10.0.0.7/24", Start: "x"}, {Stop: "1.2.3.4"}, {Start: "10.0.0.9", Stop: "10.0.0.1"}, {Cidr: "::ffff:1.2.3.0/120"},
	} {
		f.Add(b.Cidr, b.Start, b.Stop)
	}
	f.Fuzz(func(t *testing.T, cidr, start, stop string) {
		entry, _, _, err := convertBlock(block{Cidr: cidr, Start: start, Stop: stop})
		if err != nil {
			return
		}
		if first, last, ok := strings.Cut(entry, "-"); ok {
			lo, err1 := netip.ParseAddr(first)
			hi, err2 := netip.ParseAddr(last)
			if err1 != nil || err2 != nil || lo.Is4() != hi.Is4() || hi.Less(lo) || lo.Zone() != "" || lo.Is4In6() || hi.Is4In6() {
				t.Fatalf("%q %q %q -> %q: not a range of one family in order", cidr, start, stop, entry)
			}
		} else if p, err := netip.ParsePrefix(entry); err != nil || p.Masked() != p || p.Addr().Is4In6() {
			t.Fatalf("%q %q %q -> %q: not a CIDR without host bits", cidr, start, stop, entry)
		}
	})
}
