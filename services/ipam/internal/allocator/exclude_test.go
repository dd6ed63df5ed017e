package allocator

import (
	"net/netip"
	"strings"
	"testing"
)

// TestExcludedAddressesAreNeverHandedOut: spec.exclude and
// spec.skipFirstLastIPs keep addresses out of automatic allocation and out
// of requests, with a reason naming the field.
func TestExcludedAddressesAreNeverHandedOut(t *testing.T) {
	tests := []struct {
		name string
		spec PoolSpec
		want []string // what 4 Services get, in order
	}{
		{"an address", withExclude(spec("10.0.0.0/30"), "10.0.0.1"), []string{"10.0.0.0", "10.0.0.2", "10.0.0.3"}},
		{"a range", withExclude(spec("10.0.0.0/29"), "10.0.0.0-10.0.0.5"), []string{"10.0.0.6", "10.0.0.7"}},
		{"a CIDR", withExclude(spec("10.0.0.0/29"), "10.0.0.0/30"), []string{"10.0.0.4", "10.0.0.5", "10.0.0.6", "10.0.0.7"}},
		{"IPv6", withExclude(spec("2001:db8::/125"), "2001:db8::1-2001:db8::5"), []string{"2001:db8::6", "2001:db8::7"}},
		{"first and last of each CIDR", skipFirstLast(spec("10.0.0.0/30", "10.0.1.0/30")), []string{"10.0.0.1", "10.0.0.2", "10.0.1.1", "10.0.1.2"}},
		{"first and last, not of a range", skipFirstLast(spec("10.0.0.0-10.0.0.2")), []string{"10.0.0.0", "10.0.0.1", "10.0.0.2"}},
		{"first and last, not of a /31", skipFirstLast(spec("10.0.0.0/31")), []string{"10.0.0.0", "10.0.0.1"}},
		{"first and last of IPv6", skipFirstLast(spec("2001:db8::/126")), []string{"2001:db8::1", "2001:db8::2"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := newAllocator(t, mustPool(t, "p", tt.spec))
			fam := IPv4
			if strings.Contains(tt.spec.Addresses[0], ":") {
				fam = IPv6
			}
			var got []string
			for _, s := range []string{"ns/a", "ns/b", "ns/c", "ns/d"} {
				res, err := a.Allocate(Request{Service: s, Families: []Family{fam}})
				if err != nil {
					if r := reasonOf(err); r != ReasonPoolExhausted {
						t.Fatalf("%s: %v", s, err)
					}
					continue
				}
				got = append(got, res.IPs[0].String())
			}
			if strings.Join(got, " ") != strings.Join(tt.want, " ") {
				t.Fatalf("got %v, want %v", got, tt.want)
			}
		})
	}

	a := newAllocator(t, mustPool(t, "p", skipFirstLast(withExclude(spec("10.0.0.0/24", "2001:db8::/120"), "10.0.0.1", "10.0.0.240-10.0.0.250"))))
	for ip, want := range map[string]string{
		"10.0.0.1":     `pool p never hands out 10.0.0.1: it is excluded by spec.exclude[0] "10.0.0.1"; request another IP`,
		"10.0.0.245":   `it is excluded by spec.exclude[1] "10.0.0.240-10.0.0.250"`,
		"10.0.0.0":     `it is the first address of 10.0.0.0/24 (spec.skipFirstLastIPs)`,
		"10.0.0.255":   `it is the last address of 10.0.0.0/24 (spec.skipFirstLastIPs)`,
		"2001:db8::ff": `it is the last address of 2001:db8::/120 (spec.skipFirstLastIPs)`,
		"10.0.0.2":     "",
	} {
		_, err := a.Allocate(Request{Service: "ns/req-" + strings.ReplaceAll(ip, ":", "-"), RequestedIPs: addrs(ip)})
		switch {
		case want == "" && err != nil:
			t.Errorf("requesting %s: %v", ip, err)
		case want != "" && (reasonOf(err) != ReasonRequestedIPNotInPool || !strings.Contains(err.Error(), want)):
			t.Errorf("requesting %s: err = %v, want RequestedIPNotInPool %q", ip, err, want)
		}
	}
}

// TestExcludingAHeldAddressKeepsIt: an exclusion added over an address a
// Service holds never takes it: the Service keeps it, held outside its pool
// (counted in HeldOutside), nobody else gets it, and removing the exclusion
// makes it an ordinary allocation again.
func TestExcludingAHeldAddressKeepsIt(t *testing.T) {
	edits := []struct {
		name string
		held string
		spec PoolSpec
		why  string
	}{
		{"excluded address", "10.0.0.5", withExclude(spec("10.0.0.0/29"), "10.0.0.5"), `10.0.0.5 is in pool p, which no longer hands it out (it is excluded by spec.exclude[0] "10.0.0.5")`},
		{"excluded range", "10.0.0.5", withExclude(spec("10.0.0.0/29"), "10.0.0.4-10.0.0.7"), `(it is excluded by spec.exclude[0] "10.0.0.4-10.0.0.7")`},
		{"last of its CIDR", "10.0.0.7", skipFirstLast(spec("10.0.0.0/29")), `10.0.0.7 is in pool p, which no longer hands it out (it is the last address of 10.0.0.0/29 (spec.skipFirstLastIPs))`},
		{"another address excluded", "10.0.0.5", withExclude(spec("10.0.0.0/29"), "10.0.0.6"), ""},
	}
	for _, tt := range edits {
		t.Run(tt.name, func(t *testing.T) {
			ip := netip.MustParseAddr(tt.held)
			a := newAllocator(t, mustPool(t, "p", spec("10.0.0.0/29")))
			if err := a.Assign("ns/s", []netip.Addr{ip}, Sharing{}); err != nil {
				t.Fatal(err)
			}
			a.SetPools([]*Pool{mustPool(t, "p", tt.spec)})
			res, err := a.Allocate(Request{Service: "ns/s"})
			if err != nil || len(res.IPs) != 1 || res.IPs[0] != ip || res.New {
				t.Fatalf("res = %+v, err = %v; want %s kept", res, err, ip)
			}
			if !strings.Contains(res.Outside, tt.why) || (tt.why == "") != (res.Outside == "") {
				t.Fatalf("outside = %q, want %q", res.Outside, tt.why)
			}
			if tt.why == "" {
				return
			}
			if got := a.HeldOutside()["p"]; got != 1 {
				t.Fatalf("HeldOutside = %v, want p: 1", a.HeldOutside())
			}
			if x := a.Explain(Request{Service: "ns/s"}); x.Reason != ReasonHeldOutsidePool {
				t.Fatalf("explain = %+v", x)
			}
			for _, s := range []string{"ns/x", "ns/y", "ns/z", "ns/w"} {
				if r, _ := a.Allocate(Request{Service: s}); len(r.IPs) > 0 && r.IPs[0] == ip {
					t.Fatalf("%s got the held, excluded %s", s, ip)
				}
			}
			if _, err := a.Allocate(Request{Service: "ns/v", RequestedIPs: []netip.Addr{ip}}); err == nil {
				t.Fatalf("another Service was granted the held, excluded %s on request", ip)
			}
			if u, _ := a.Usage("p"); u.IPv4.Used.Cmp(u.IPv4.Total) > 0 {
				t.Fatalf("usage %s of %s: the excluded address is counted as used", u.IPv4.Used, u.IPv4.Total)
			}
			a.SetPools([]*Pool{mustPool(t, "p", spec("10.0.0.0/29"))}) // the exclusion removed
			if res, err := a.Allocate(Request{Service: "ns/s"}); err != nil || res.Outside != "" || res.Pool != "p" || res.IPs[0] != ip {
				t.Fatalf("after removing the exclusion: res = %+v, err = %v", res, err)
			}
			if got := a.HeldOutside()["p"]; got != 0 {
				t.Fatalf("HeldOutside = %v after removing the exclusion", a.HeldOutside())
			}
		})
	}
}

func withExclude(s PoolSpec, exclude ...string) PoolSpec {
	s.Exclude = exclude
	return s
}

func skipFirstLast(s PoolSpec) PoolSpec {
	s.SkipFirstLastIPs = true
	return s
}
