package allocator

import (
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestNamespaceQuota: a pool's maxAddressesPerNamespace caps what one
// namespace holds or requests of it; other namespaces and other pools are
// untouched, an address shared within the namespace counts once, and
// lowering the cap takes nothing back.
func TestNamespaceQuota(t *testing.T) {
	capped := spec("10.0.0.0/28")
	capped.MaxAddressesPerNamespace = 2
	a := newAllocator(t, mustPool(t, "capped", capped))
	mustAllocate(t, a, Request{Service: "a/one", Sharing: Sharing{Key: "k", Ports: []Port{{Port: 80}}}})
	mustAllocate(t, a, Request{Service: "a/two"})
	// Shared within the namespace: no new address, allowed.
	if res := mustAllocate(t, a, Request{Service: "a/shares", Sharing: Sharing{Key: "k", Ports: []Port{{Port: 443}}}}); res.IPs[0] != netip.MustParseAddr("10.0.0.0") {
		t.Fatalf("a/shares got %s, want the shared 10.0.0.0", res.IPs[0])
	}
	_, err := a.Allocate(Request{Service: "a/three"})
	if reasonOf(err) != ReasonNamespaceQuotaExceeded || !strings.Contains(err.Error(), "namespace a holds or requests 2 addresses of pool capped, whose spec.allocation.maxAddressesPerNamespace is 2") {
		t.Fatalf("a/three: %v, want NamespaceQuotaExceeded naming the count and pool", err)
	}
	// Asking for a free address by name does not reach around the cap.
	if _, err := a.Allocate(Request{Service: "a/asks", RequestedIPs: addrs("10.0.0.9")}); reasonOf(err) != ReasonNamespaceQuotaExceeded {
		t.Fatalf("a/asks: %v, want NamespaceQuotaExceeded", err)
	}
	if err := a.Claim(Request{Service: "a/asks", RequestedIPs: addrs("10.0.0.9")}); err == nil || !strings.Contains(err.Error(), "maxAddressesPerNamespace") {
		t.Fatalf("a claim past the quota: %v, want it refused", err)
	}
	mustAllocate(t, a, Request{Service: "b/one"})
	if got := a.AtQuota("capped"); !slices.Equal(got, []NamespaceUse{{"a", 2}}) {
		t.Fatalf("AtQuota = %v", got)
	}
	// Requests count: namespace c requests two addresses and is at its cap
	// before it holds any, so it cannot block the pool by requesting all.
	if err := a.Claim(Request{Service: "c/x", RequestedIPs: addrs("10.0.0.12")}); err != nil {
		t.Fatal(err)
	}
	if err := a.Claim(Request{Service: "c/y", RequestedIPs: addrs("10.0.0.13")}); err != nil {
		t.Fatal(err)
	}
	if err := a.Claim(Request{Service: "c/z", RequestedIPs: addrs("10.0.0.14")}); err == nil {
		t.Fatal("c's third request was claimed past its quota of 2")
	}
	if _, err := a.Allocate(Request{Service: "c/auto"}); reasonOf(err) != ReasonNamespaceQuotaExceeded {
		t.Fatalf("c/auto: %v, want NamespaceQuotaExceeded (c requests 2)", err)
	}
	if res := mustAllocate(t, a, Request{Service: "c/x", RequestedIPs: addrs("10.0.0.12")}); res.IPs[0] != netip.MustParseAddr("10.0.0.12") {
		t.Fatalf("c/x got %v, want its requested address within the quota", res.IPs)
	}
	// Releasing frees quota.
	a.Release("a/two")
	mustAllocate(t, a, Request{Service: "a/three"})
	// Lowered under what the namespace holds: it keeps all of it.
	capped.MaxAddressesPerNamespace = 1
	a.SetPools([]*Pool{mustPool(t, "capped", capped)})
	for _, svc := range []string{"a/one", "a/shares", "a/three"} {
		if res, err := a.Allocate(Request{Service: svc, Sharing: a.sharingOf(svc)}); err != nil || len(res.IPs) != 1 {
			t.Fatalf("%s after the quota was lowered: %v, %v; want it to keep its address", svc, res, err)
		}
	}
	if got := a.AtQuota("capped"); !slices.Equal(got, []NamespaceUse{{"a", 2}, {"b", 1}, {"c", 2}}) {
		t.Fatalf("AtQuota after lowering = %v", got)
	}
}

// TestNamespaceQuotaSetLater: a pool without a cap keeps no count per
// namespace; a cap set later counts what each namespace already holds,
// requests and keeps.
func TestNamespaceQuotaSetLater(t *testing.T) {
	open := spec("10.0.0.0/28")
	a := newAllocator(t, mustPool(t, "p", open))
	mustAllocate(t, a, Request{Service: "a/one"})
	mustAllocate(t, a, Request{Service: "a/two"})
	if err := a.Claim(Request{Service: "a/asks", RequestedIPs: addrs("10.0.0.9")}); err != nil {
		t.Fatal(err)
	}
	mustAllocate(t, a, Request{Service: "b/one"})
	if len(a.idx.nsAddrs.refs) != 0 {
		t.Fatalf("a pool without a cap is counted per namespace: %v", a.idx.nsAddrs.refs)
	}
	capped := open
	capped.MaxAddressesPerNamespace = 3
	a.SetPools([]*Pool{mustPool(t, "p", capped)})
	if got := a.AtQuota("p"); !slices.Equal(got, []NamespaceUse{{"a", 3}}) {
		t.Fatalf("AtQuota once the cap is set = %v, want a at 3 (two held, one requested)", got)
	}
	if _, err := a.Allocate(Request{Service: "a/three"}); reasonOf(err) != ReasonNamespaceQuotaExceeded {
		t.Fatalf("a/three: %v, want NamespaceQuotaExceeded", err)
	}
	mustAllocate(t, a, Request{Service: "b/two"})
	// The cap lifted again: nothing is counted, a takes what it asks.
	a.SetPools([]*Pool{mustPool(t, "p", open)})
	mustAllocate(t, a, Request{Service: "a/three"})
	if len(a.idx.nsAddrs.refs) != 0 {
		t.Fatalf("counts kept after the cap was lifted: %v", a.idx.nsAddrs.refs)
	}
}

// TestNamespaceQuotaSendsToAnotherPool: a namespace at one pool's cap takes
// the next pool that serves it; a dual-stack Service needs room for both.
func TestNamespaceQuotaSendsToAnotherPool(t *testing.T) {
	first := spec("10.0.0.0/30", "2001:db8::/126")
	first.Priority, first.MaxAddressesPerNamespace = 1, 1
	second := spec("10.0.1.0/30", "2001:db8:1::/126")
	second.Priority = 2
	a := newAllocator(t, mustPool(t, "first", first), mustPool(t, "second", second))
	if res := mustAllocate(t, a, Request{Service: "a/dual", FamilyPolicy: RequireDualStack}); res.Pool == "first" {
		t.Fatalf("a RequireDualStack Service took 2 addresses of a pool capped at 1: %v", res.IPs)
	}
	if x := a.Explain(Request{Service: "a/dual2", FamilyPolicy: RequireDualStack}); !strings.Contains(x.Verdicts[0].Message, "this Service needs 2 more") {
		t.Fatalf("first's verdict = %q, want it to say the Service needs 2", x.Verdicts[0].Message)
	}
	if res := mustAllocate(t, a, Request{Service: "a/single"}); res.Pool != "first" {
		t.Fatalf("a/single got pool %s, want first (a holds none of it)", res.Pool)
	}
	if res := mustAllocate(t, a, Request{Service: "a/next"}); res.Pool != "second" {
		t.Fatalf("a/next got pool %s, want second (a is at first's quota)", res.Pool)
	}
}

// sharingOf is the sharing a Service holds its first address with.
func (a *Allocator) sharingOf(service string) Sharing {
	for _, ip := range a.idx.bySvc[service] {
		for _, h := range a.idx.ips[ip].holders {
			if h.service == service && h.shared != nil {
				return *h.shared
			}
		}
	}
	return Sharing{}
}

// TestRequestsFollowThePoolsTenancy: neither a share both owners agreed to,
// nor a reservation made for a Service, reaches an address of a pool that
// does not serve the Service's namespace.
func TestRequestsFollowThePoolsTenancy(t *testing.T) {
	prodOnly := spec("10.0.0.0/29")
	prodOnly.Namespaces = []string{"prod"}
	a := newAllocator(t, mustPool(t, "prod-only", prodOnly))
	web := mustAllocate(t, a, Request{Service: "prod/web", Sharing: Sharing{Key: "k", Ports: []Port{{Port: 443}}, CrossNamespace: []string{"*"}}}).IPs
	if _, err := a.Allocate(Request{Service: "evil/x", RequestedIPs: web, Sharing: Sharing{Key: "k", Ports: []Port{{Port: 80}}, CrossNamespace: []string{"prod"}}}); reasonOf(err) != ReasonNoMatchingPool {
		t.Fatalf("a share across namespaces into a pool that does not serve evil: %v, want NoMatchingPool", err)
	}
	reserved := netip.MustParseAddr("10.0.0.5")
	if err := a.Reserve(Reservation{IP: reserved, Note: "n", ForService: "evil/y"}); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Allocate(Request{Service: "evil/y", RequestedIPs: []netip.Addr{reserved}}); reasonOf(err) != ReasonNoMatchingPool {
		t.Fatalf("a reservation for evil/y in a pool that does not serve evil: %v, want NoMatchingPool", err)
	}
	if err := a.Claim(Request{Service: "evil/z", RequestedIPs: addrs("10.0.0.6")}); err == nil {
		t.Fatal("evil/z claimed an address of a pool that does not serve it")
	}
	if a.idx.claimedByOther(netip.MustParseAddr("10.0.0.6"), "prod/next") {
		t.Fatal("evil/z's refused claim keeps 10.0.0.6 from prod's auto allocation")
	}
	// An address evil holds from before the pool stopped serving it stays
	// evil's Service's, and is no way in for another Service of evil.
	kept := netip.MustParseAddr("10.0.0.7")
	sh := Sharing{Key: "old", Ports: []Port{{Port: 80}}}
	if err := a.Assign("evil/kept", []netip.Addr{kept}, sh); err != nil {
		t.Fatal(err)
	}
	if res, err := a.Allocate(Request{Service: "evil/kept", Sharing: sh}); err != nil || res.IPs[0] != kept || res.Outside == "" {
		t.Fatalf("evil/kept: %+v, %v; want it to keep %s, held outside its pool", res, err, kept)
	}
	joiner := Sharing{Key: "old", Ports: []Port{{Port: 443}}}
	if _, err := a.Allocate(Request{Service: "evil/joins", RequestedIPs: []netip.Addr{kept}, Sharing: joiner}); reasonOf(err) != ReasonNoMatchingPool {
		t.Fatalf("evil/joins asked for the held %s under its key: %v, want NoMatchingPool", kept, err)
	}
	if _, err := a.Allocate(Request{Service: "evil/joins", Sharing: joiner}); reasonOf(err) != ReasonNoMatchingPool {
		t.Fatalf("evil/joins with the held address's key: %v, want NoMatchingPool", err)
	}
}

// TestNamespaceQuotaCountsTheGatewaysNamespace: a Service serving a Gateway
// of another namespace (Request.Namespace, Envoy Gateway's Services in
// envoy-gateway-system) counts against the Gateway's namespace: tenants a
// and b each get their Gateway's address under a cap of 1, a second of a's
// is refused naming a, and the Gateway controller's namespace counts
// nothing. The count follows the tenant through Assign (a restart), a
// release that keeps the address, and SetPools' recount.
func TestNamespaceQuotaCountsTheGatewaysNamespace(t *testing.T) {
	capped := spec("10.0.0.0/28")
	capped.MaxAddressesPerNamespace = 1
	keep := time.Hour
	capped.KeepReleased = &keep
	a := newAllocator(t, mustPool(t, "capped", capped))
	gw := func(svc, tenant string) Request {
		return Request{Service: "envoy-gateway-system/" + svc, Namespace: tenant}
	}
	mustAllocate(t, a, gw("envoy-a-one", "a"))
	mustAllocate(t, a, gw("envoy-b-one", "b"))
	_, err := a.Allocate(gw("envoy-a-two", "a"))
	if reasonOf(err) != ReasonNamespaceQuotaExceeded || !strings.Contains(err.Error(), "namespace a holds or requests 1 addresses of pool capped") {
		t.Fatalf("a's second Gateway: %v, want NamespaceQuotaExceeded naming namespace a", err)
	}
	if err := a.Claim(Request{Service: "envoy-gateway-system/envoy-a-asks", Namespace: "a", RequestedIPs: addrs("10.0.0.9")}); err == nil || !strings.Contains(err.Error(), "namespace a holds") {
		t.Fatalf("a's claim past its quota: %v, want it refused naming namespace a", err)
	}
	// The controller's own namespace has its own cap, untouched.
	mustAllocate(t, a, Request{Service: "envoy-gateway-system/metrics"})
	if got := a.AtQuota("capped"); !slices.Equal(got, []NamespaceUse{{"a", 1}, {"b", 1}, {"envoy-gateway-system", 1}}) {
		t.Fatalf("AtQuota = %v", got)
	}
	a.SetPools([]*Pool{mustPool(t, "capped", capped)})
	if got := a.AtQuota("capped"); !slices.Equal(got, []NamespaceUse{{"a", 1}, {"b", 1}, {"envoy-gateway-system", 1}}) {
		t.Fatalf("AtQuota after SetPools = %v", got)
	}

	// A restart: Assign from the ledger before the tenant is known counts
	// against the Service's namespace; SetTenant moves it to the Gateway's.
	b := newAllocator(t, mustPool(t, "capped", capped))
	b.SetTenant("envoy-gateway-system/envoy-a-one", "a")
	if err := b.Assign("envoy-gateway-system/envoy-a-one", addrs("10.0.0.0"), Sharing{}); err != nil {
		t.Fatal(err)
	}
	if err := b.Assign("envoy-gateway-system/envoy-b-one", addrs("10.0.0.1"), Sharing{}); err != nil {
		t.Fatal(err)
	}
	if got := b.AtQuota("capped"); !slices.Equal(got, []NamespaceUse{{"a", 1}, {"envoy-gateway-system", 1}}) {
		t.Fatalf("AtQuota before b's tenant is known = %v", got)
	}
	b.SetTenant("envoy-gateway-system/envoy-b-one", "b")
	if got := b.AtQuota("capped"); !slices.Equal(got, []NamespaceUse{{"a", 1}, {"b", 1}}) {
		t.Fatalf("AtQuota once b's tenant is known = %v", got)
	}

	// Released and kept: the kept address still counts against a, and
	// the reservation says so (the ledger records it).
	kept := b.KeepOnRelease([]string{"envoy-gateway-system/envoy-a-one"}, time.Unix(1_700_000_000, 0))
	if len(kept) != 1 || kept[0].Tenant != "a" {
		t.Fatalf("KeepOnRelease = %+v, want one reservation kept for tenant a", kept)
	}
	b.Release("envoy-gateway-system/envoy-a-one")
	if err := b.Reserve(kept[0]); err != nil {
		t.Fatal(err)
	}
	if res := mustAllocate(t, b, Request{Service: "envoy-gateway-system/other"}); res.IPs[0] == kept[0].IP {
		t.Fatalf("another namespace took %s, kept for a", res.IPs[0])
	}
	// At its cap, a takes back what is kept for it, and nothing more.
	if res := mustAllocate(t, b, gw("envoy-a-two", "a")); res.IPs[0] != kept[0].IP {
		t.Fatalf("a's new Gateway got %v, want %s kept for a", res.IPs, kept[0].IP)
	}
	if _, err := b.Allocate(gw("envoy-a-three", "a")); reasonOf(err) != ReasonNamespaceQuotaExceeded {
		t.Fatalf("a's third Gateway: %v, want NamespaceQuotaExceeded", err)
	}
}
