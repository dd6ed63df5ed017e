package allocator

import (
	"net/netip"
	"testing"
	"time"
)

// TestUsageCounts: what a pool's used, held and available count, family by
// family, after each kind of use of its addresses. used never changes
// meaning (held, kept or reserved); held counts what live Services hold;
// available is total - used, what a new Service gets without taking a
// kept or reserved address.
func TestUsageCounts(t *testing.T) {
	dual := keeping(time.Hour, spec("10.0.0.0/29", "2001:db8::/125"))
	type counts struct{ total, used, held, available int64 }
	// 2001:db8::/125 hands out 7: never its subnet-router anycast ::0.
	v4free, v6free := counts{8, 0, 0, 8}, counts{7, 0, 0, 7}
	tests := []struct {
		name   string
		spec   PoolSpec
		do     func(t *testing.T, a *Allocator)
		v4, v6 counts
	}{{
		name: "nothing", spec: dual,
		do: func(*testing.T, *Allocator) {},
		v4: v4free, v6: v6free,
	}, {
		name: "granted: one address per Service, per family",
		spec: dual,
		do: func(t *testing.T, a *Allocator) {
			mustAllocate(t, a, Request{Service: "ns/a"})
			mustAllocate(t, a, Request{Service: "ns/b", FamilyPolicy: RequireDualStack, Families: []Family{IPv4, IPv6}})
		},
		v4: counts{8, 2, 2, 6}, v6: counts{7, 1, 1, 6},
	}, {
		name: "a shared address counts once",
		spec: dual,
		do: func(t *testing.T, a *Allocator) {
			mustAllocate(t, a, Request{Service: "ns/a", Sharing: Sharing{Key: "k", Ports: []Port{{Protocol: "TCP", Port: 80}}}})
			res := mustAllocate(t, a, Request{Service: "ns/b", Sharing: Sharing{Key: "k", Ports: []Port{{Protocol: "TCP", Port: 443}}}})
			if res.IPs[0] != netip.MustParseAddr("10.0.0.0") {
				t.Fatalf("ns/b got %v, not the shared 10.0.0.0", res.IPs)
			}
		},
		v4: counts{8, 1, 1, 7}, v6: v6free,
	}, {
		name: "a shared address stays held while one of its Services holds it",
		spec: dual,
		do: func(t *testing.T, a *Allocator) {
			mustAllocate(t, a, Request{Service: "ns/a", Sharing: Sharing{Key: "k", Ports: []Port{{Protocol: "TCP", Port: 80}}}})
			mustAllocate(t, a, Request{Service: "ns/b", Sharing: Sharing{Key: "k", Ports: []Port{{Protocol: "TCP", Port: 443}}}})
			releaseKeeping(t, a, "ns/a", t0)
		},
		v4: counts{8, 1, 1, 7}, v6: v6free,
	}, {
		name: "kept: used, not held, not available",
		spec: dual,
		do: func(t *testing.T, a *Allocator) {
			mustAllocate(t, a, Request{Service: "ns/a", FamilyPolicy: RequireDualStack, Families: []Family{IPv4, IPv6}})
			mustAllocate(t, a, Request{Service: "ns/b"})
			releaseKeeping(t, a, "ns/a", t0)
		},
		v4: counts{8, 2, 1, 6}, v6: counts{7, 1, 0, 6},
	}, {
		name: "kept, then taken back by its Service: held again",
		spec: dual,
		do: func(t *testing.T, a *Allocator) {
			mustAllocate(t, a, Request{Service: "ns/a"})
			releaseKeeping(t, a, "ns/a", t0)
			mustAllocate(t, a, Request{Service: "ns/a"})
		},
		v4: counts{8, 1, 1, 7}, v6: v6free,
	}, {
		name: "kept, then its keep ended: available again",
		spec: dual,
		do: func(t *testing.T, a *Allocator) {
			mustAllocate(t, a, Request{Service: "ns/a"})
			releaseKeeping(t, a, "ns/a", t0)
			for _, r := range a.ExpiredKept(t0.Add(time.Hour)) {
				a.Unreserve(r.IP)
			}
		},
		v4: v4free, v6: v6free,
	}, {
		name: "grace period 0: nothing is kept",
		spec: keeping(0, spec("10.0.0.0/29")),
		do: func(t *testing.T, a *Allocator) {
			mustAllocate(t, a, Request{Service: "ns/a"})
			releaseKeeping(t, a, "ns/a", t0)
		},
		v4: v4free, v6: counts{},
	}, {
		name: "reserved for a Service that does not hold it: used, not held",
		spec: dual,
		do: func(t *testing.T, a *Allocator) {
			reserve(t, a, Reservation{IP: netip.MustParseAddr("10.0.0.5"), Note: "dns", ForService: "ns/later"})
			reserve(t, a, Reservation{IP: netip.MustParseAddr("2001:db8::5"), Note: "router"})
		},
		v4: counts{8, 1, 0, 7}, v6: counts{7, 1, 0, 6},
	}, {
		name: "reserved and held by its Service: held",
		spec: dual,
		do: func(t *testing.T, a *Allocator) {
			reserve(t, a, Reservation{IP: netip.MustParseAddr("10.0.0.5"), Note: "dns", ForService: "ns/dns"})
			mustAllocate(t, a, Request{Service: "ns/dns", RequestedIPs: addrs("10.0.0.5")})
		},
		v4: counts{8, 1, 1, 7}, v6: v6free,
	}, {
		name: "shown by another controller's Service: held",
		spec: dual,
		do: func(t *testing.T, a *Allocator) {
			a.SetForeign("ns/metallb", addrs("10.0.0.3", "2001:db8::3"))
			a.SetForeign("ns/gone", addrs("10.0.0.4"))
			a.SetForeign("ns/gone", nil)
		},
		v4: counts{8, 1, 1, 7}, v6: counts{7, 1, 1, 6},
	}, {
		name: "excluded ranges are in no count",
		spec: withExclude(dual, "10.0.0.0-10.0.0.3"),
		do: func(t *testing.T, a *Allocator) {
			a.SetForeign("ns/metallb", addrs("10.0.0.1"))
			if err := a.Assign("ns/old", addrs("10.0.0.2"), Sharing{}); err != nil {
				t.Fatal(err)
			}
			reserve(t, a, Reservation{IP: netip.MustParseAddr("10.0.0.3"), Note: "gw"})
			mustAllocate(t, a, Request{Service: "ns/a"})
		},
		v4: counts{4, 1, 1, 3}, v6: v6free,
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := newAllocator(t, mustPool(t, "p", tt.spec))
			tt.do(t, a)
			u, ok := a.Usage("p")
			if !ok {
				t.Fatal("pool p not served")
			}
			for _, f := range []struct {
				name string
				got  FamilyUsage
				want counts
			}{{"IPv4", u.IPv4, tt.v4}, {"IPv6", u.IPv6, tt.v6}} {
				got := counts{f.got.Total.Int64(), f.got.Used.Int64(), f.got.Held, f.got.Available().Int64()}
				if got != f.want {
					t.Errorf("%s: total, used, held, available = %v, want %v", f.name, got, f.want)
				}
			}
		})
	}
}

// TestUsageCountsFollowPoolEdits: an edit recounts held, used and total
// from the addresses held now; an address the pool stops handing out
// leaves every count (HeldOutside counts it).
func TestUsageCountsFollowPoolEdits(t *testing.T) {
	a := newAllocator(t, mustPool(t, "p", spec("10.0.0.0/29")))
	for _, s := range []string{"ns/a", "ns/b", "ns/c"} {
		mustAllocate(t, a, Request{Service: s})
	}
	a.SetForeign("ns/metallb", addrs("10.0.0.6"))
	a.SetPools([]*Pool{mustPool(t, "p", withExclude(spec("10.0.0.0/29"), "10.0.0.1"))})
	u, _ := a.Usage("p")
	if u.IPv4.Total.Int64() != 7 || u.IPv4.Used.Int64() != 3 || u.IPv4.Held != 3 {
		t.Fatalf("after excluding a held address: total %s, used %s, held %d; want 7, 3, 3", u.IPv4.Total, u.IPv4.Used, u.IPv4.Held)
	}
	a.Release("ns/b") // the excluded one: no count moves
	if u, _ = a.Usage("p"); u.IPv4.Used.Int64() != 3 || u.IPv4.Held != 3 {
		t.Fatalf("after releasing it: used %s, held %d; want 3, 3", u.IPv4.Used, u.IPv4.Held)
	}
}

func reserve(t *testing.T, a *Allocator, r Reservation) {
	t.Helper()
	if err := a.Reserve(r); err != nil {
		t.Fatalf("reserve %s: %v", r.IP, err)
	}
}
