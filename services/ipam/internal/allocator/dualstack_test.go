package allocator

import (
	"slices"
	"testing"
)

// TestDualStackRules pins down the dual-stack rules of docs/pools.md
// ("Dual-stack Services"): a pool's rank (pinned, then priority) comes
// before the families it offers; PreferDualStack takes whatever family the
// chosen pool has, its first family or its second; RequireDualStack with one
// requested address gets the other family from the requested address's
// pool; Result.IPs follow the Service's ipFamilies.
func TestDualStackRules(t *testing.T) {
	v4 := func(mod ...func(*PoolSpec)) *Pool { return mustPool(t, "a-v4", modSpec(spec("10.0.1.0/24"), mod)) }
	v6 := func(mod ...func(*PoolSpec)) *Pool { return mustPool(t, "b-v6", modSpec(spec("2001:db8:1::/64"), mod)) }
	dual := func(mod ...func(*PoolSpec)) *Pool {
		return mustPool(t, "z-dual", modSpec(spec("10.0.2.0/24", "2001:db8:2::/64"), mod))
	}
	pinned := func(s *PoolSpec) { s.Namespaces = []string{"ns"} }
	prio := func(n int32) func(*PoolSpec) { return func(s *PoolSpec) { s.Priority = n } }
	v4v6, v6v4 := []Family{IPv4, IPv6}, []Family{IPv6, IPv4}
	tests := []struct {
		name       string
		pools      []*Pool
		req        Request
		want       []string
		wantReason Reason
	}{
		// 1. A named single-family pool gives PreferDualStack the family it has.
		{"PreferDualStack naming an IPv6-only pool gets its IPv6", []*Pool{v4(), v6(), dual()},
			Request{FamilyPolicy: PreferDualStack, Families: v4v6, Pool: "b-v6"}, []string{"2001:db8:1::1"}, ""},
		{"PreferDualStack naming an IPv4-only pool gets its IPv4", []*Pool{v4(), v6(), dual()},
			Request{FamilyPolicy: PreferDualStack, Families: v6v4, Pool: "a-v4"}, []string{"10.0.1.0"}, ""},
		{"RequireDualStack naming an IPv6-only pool gets nothing", []*Pool{v4(), v6(), dual()},
			Request{FamilyPolicy: RequireDualStack, Families: v4v6, Pool: "b-v6"}, nil, ReasonNoMatchingPool},
		{"PreferDualStack requesting only an IPv6 of an IPv6-only pool gets it", []*Pool{v4(), v6()},
			Request{FamilyPolicy: PreferDualStack, Families: v4v6, RequestedIPs: addrs("2001:db8:1::7")}, []string{"2001:db8:1::7"}, ""},
		// 2. Pinning and priority come before the families a pool offers.
		{"PreferDualStack in a namespace pinned to an IPv4-only pool takes that pool", []*Pool{v4(pinned), dual()},
			Request{FamilyPolicy: PreferDualStack, Families: v4v6}, []string{"10.0.1.0"}, ""},
		{"PreferDualStack takes the better priority over both families", []*Pool{v4(pinned, prio(1)), dual(pinned, prio(2))},
			Request{FamilyPolicy: PreferDualStack, Families: v4v6}, []string{"10.0.1.0"}, ""},
		{"PreferDualStack takes a pinned pool's second family over an unpinned first", []*Pool{v4(), v6(pinned)},
			Request{FamilyPolicy: PreferDualStack, Families: v4v6}, []string{"2001:db8:1::1"}, ""},
		{"among pools of one rank, both families win", []*Pool{v4(prio(1)), dual(prio(1))},
			Request{FamilyPolicy: PreferDualStack, Families: v4v6}, []string{"10.0.2.0", "2001:db8:2::1"}, ""},
		{"among pools of one rank, the first family wins over the second", []*Pool{mustPool(t, "a-v6", spec("2001:db8:1::/64")), mustPool(t, "b-v4", spec("10.0.1.0/24"))},
			Request{FamilyPolicy: PreferDualStack, Families: v4v6}, []string{"10.0.1.0"}, ""},
		{"RequireDualStack skips a better-ranked single-family pool", []*Pool{v4(pinned), dual()},
			Request{FamilyPolicy: RequireDualStack, Families: v4v6}, []string{"10.0.2.0", "2001:db8:2::1"}, ""},
		// 3. RequireDualStack with one requested address: the other family
		// comes from the requested address's pool.
		{"RequireDualStack requesting only an IPv4 gets an IPv6 of its pool", []*Pool{v6(), dual()},
			Request{FamilyPolicy: RequireDualStack, Families: v4v6, RequestedIPs: addrs("10.0.2.9")}, []string{"10.0.2.9", "2001:db8:2::1"}, ""},
		{"RequireDualStack requesting an IPv4 of an IPv4-only pool gets nothing", []*Pool{v4(), v6()},
			Request{FamilyPolicy: RequireDualStack, Families: v4v6, RequestedIPs: addrs("10.0.1.9")}, nil, ReasonNoMatchingPool},
		// 4. The first family comes first.
		{"ipFamilies [IPv6, IPv4] lists IPv6 first", []*Pool{dual()},
			Request{FamilyPolicy: PreferDualStack, Families: v6v4}, []string{"2001:db8:2::1", "10.0.2.0"}, ""},
		{"ipFamilies [IPv6, IPv4] with a requested IPv4 lists IPv6 first", []*Pool{dual()},
			Request{FamilyPolicy: RequireDualStack, Families: v6v4, RequestedIPs: addrs("10.0.2.9")}, []string{"2001:db8:2::1", "10.0.2.9"}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := newAllocator(t, tt.pools...)
			tt.req.Service = "ns/s"
			res, err := a.Allocate(tt.req)
			if tt.wantReason != "" {
				if reasonOf(err) != tt.wantReason {
					t.Fatalf("err = %v (IPs %v), want %s", err, res.IPs, tt.wantReason)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, ip := range res.IPs {
				got = append(got, ip.String())
			}
			if !slices.Equal(got, tt.want) {
				t.Fatalf("IPs = %v, want %v", got, tt.want)
			}
		})
	}
}

// TestDualStackRulesMoveNoHolder: a Service given both families by a pool
// that the old rule preferred over its namespace's pinned IPv4-only pool
// keeps them (an upgrade moves nothing); a new one takes the pinned pool.
func TestDualStackRulesMoveNoHolder(t *testing.T) {
	a := newAllocator(t, mustPool(t, "z-dual", spec("10.0.2.0/24", "2001:db8:2::/64")))
	req := Request{Service: "ns/old", FamilyPolicy: PreferDualStack, Families: []Family{IPv4, IPv6}}
	mustAllocate(t, a, req)
	a.SetPools([]*Pool{
		mustPool(t, "a-v4", modSpec(spec("10.0.1.0/24"), []func(*PoolSpec){func(s *PoolSpec) { s.Namespaces = []string{"ns"} }})),
		mustPool(t, "z-dual", spec("10.0.2.0/24", "2001:db8:2::/64")),
	})
	if res := mustAllocate(t, a, req); res.New || res.Pool != "z-dual" || len(res.IPs) != 2 {
		t.Fatalf("the holder moved: %+v", res)
	}
	req.Service = "ns/new"
	if res := mustAllocate(t, a, req); res.Pool != "a-v4" {
		t.Fatalf("the new Service: %+v, want pool a-v4", res)
	}
}

// TestPreferDualStackTakesTheSecondFamilyOfAFullPool: the pool chosen by
// rank gives PreferDualStack the family it has free, the second one when
// its first is full, rather than sending it to a lower-ranked pool.
func TestPreferDualStackTakesTheSecondFamilyOfAFullPool(t *testing.T) {
	a := newAllocator(t,
		mustPool(t, "a-dual", modSpec(spec("10.0.2.0/32", "2001:db8:2::/64"), []func(*PoolSpec){func(s *PoolSpec) { s.Priority = 1 }})),
		mustPool(t, "b-v4", spec("10.0.1.0/24")))
	mustAllocate(t, a, Request{Service: "ns/first"})
	res := mustAllocate(t, a, Request{Service: "ns/s", FamilyPolicy: PreferDualStack, Families: []Family{IPv4, IPv6}})
	if res.Pool != "a-dual" || len(res.IPs) != 1 || res.IPs[0].String() != "2001:db8:2::1" {
		t.Fatalf("res = %+v, want 2001:db8:2::1 from a-dual", res)
	}
}

func modSpec(s PoolSpec, mods []func(*PoolSpec)) PoolSpec {
	for _, m := range mods {
		m(&s)
	}
	return s
}
