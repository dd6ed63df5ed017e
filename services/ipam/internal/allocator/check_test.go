package allocator

import (
	"net/netip"
	"os"
	"strings"
	"testing"
	"time"
)

// TestMain makes every operation of every Allocator in these tests and
// fuzzers check its indexes afterwards (checkIndexes).
func TestMain(m *testing.M) {
	checkIndexes = true
	os.Exit(m.Run())
}

// noChecks turns the checks off for a benchmark, which measures what
// production runs.
func noChecks(b *testing.B) {
	checkIndexes = false
	b.Cleanup(func() { checkIndexes = true })
}

// everyIndex builds an allocator in whose indexes every kind of entry
// exists: dual-stack and shared holds, a claim, a foreign Service's
// address, a kept and an operator's reservation, a freed address, a
// Service counted against a Gateway's namespace, an address held outside
// every pool, and a pool with a namespace quota.
func everyIndex(t *testing.T) *Allocator {
	t.Helper()
	a := newAllocator(t,
		mustPool(t, "a", quota(keeping(time.Hour, spec("10.0.0.0/28", "2001:db8::/124")), 8)),
		mustPool(t, "b", spec("10.0.1.0/28")))
	at := time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	allocate := func(req Request) {
		t.Helper()
		_, err := a.Allocate(req)
		must(err)
	}
	allocate(Request{Service: "ns/web", FamilyPolicy: RequireDualStack, Families: []Family{IPv4, IPv6}})
	allocate(Request{Service: "ns/s1", Sharing: Sharing{Key: "k", Ports: []Port{{Port: 80}}}})
	allocate(Request{Service: "ns/s2", Sharing: Sharing{Key: "k", Ports: []Port{{Port: 81}}}})
	allocate(Request{Service: "ns/gw", Namespace: "tenant"})
	allocate(Request{Service: "ns/gone"})
	allocate(Request{Service: "ns/tmp", Pool: "b"})
	must(a.Claim(Request{Service: "ns/req", RequestedIPs: addrs("10.0.0.9")}))
	a.SetForeign("other/f", addrs("10.0.0.12"))
	must(a.Assign("ns/out", addrs("10.0.5.5"), Sharing{}))
	must(a.Reserve(Reservation{IP: netip.MustParseAddr("10.0.0.14"), Note: "operator"}))
	kept := a.KeepOnRelease([]string{"ns/gone"}, at)
	if len(kept) != 1 {
		t.Fatalf("kept %v, want one address", kept)
	}
	a.Release("ns/gone")
	must(a.Reserve(kept[0]))
	a.Release("ns/tmp")
	return a
}

// TestCheckNamesTheIndex: a fresh allocator passes check; corrupting any
// one index makes check fail, naming it.
func TestCheckNamesTheIndex(t *testing.T) {
	ip := netip.MustParseAddr
	for _, tc := range []struct {
		index   string
		corrupt func(x *indexes)
	}{
		{"ips", func(x *indexes) { x.ips[ip("10.0.0.0")].pool = "b" }},
		{"ips", func(x *indexes) { x.ips[ip("10.0.0.14")].reservation = nil }},
		{"ips", func(x *indexes) { x.ips[ip("10.0.0.0")].reservation = &Reservation{ForService: "ns/x"} }},
		{"ips", func(x *indexes) { x.ips[ip("10.0.0.1")].holders[1].shared = nil }}, // ns/s2 stops sharing, ns/s1 still does
		{"taken", func(x *indexes) { x.taken.remove(ip("10.0.0.0")) }},
		{"taken", func(x *indexes) { x.taken.add(ip("10.0.0.13")) }},
		{"bySvc", func(x *indexes) { delete(x.bySvc, "ns/web") }},
		{"bySvc", func(x *indexes) { x.bySvc["ns/nobody"] = addrs("10.0.0.0") }},
		{"byShare", func(x *indexes) { delete(x.byShare, "k") }},
		{"byShare", func(x *indexes) { x.byShare["j"] = map[netip.Addr]struct{}{ip("10.0.0.0"): {}} }},
		{"foreign", func(x *indexes) { delete(x.foreignOf, "other/f") }},
		{"foreign", func(x *indexes) {
			delete(x.foreignAt, ip("10.0.0.12"))
			x.ips[ip("10.0.0.12")].reservation = &Reservation{}
		}},
		{"claims", func(x *indexes) { x.claimed.remove(ip("10.0.0.9")) }},
		{"claims", func(x *indexes) { delete(x.claimsOf, "ns/req") }},
		{"counts", func(x *indexes) { x.counts["a"].held[0]++ }},
		{"counts", func(x *indexes) { x.counts["a"].used[1].SetInt64(7) }},
		{"counts", func(x *indexes) { delete(x.counts, "b") }},
		{"nsAddrs", func(x *indexes) { x.nsAddrs.remove("a", "ns", ip("10.0.0.0")) }},
		{"nsAddrs", func(x *indexes) { x.nsAddrs.capped["b"] = true }},
		{"tenants", func(x *indexes) { x.tenants["ns/web"] = "ns" }},
		{"outside", func(x *indexes) { x.outside["a"]++ }},
		{"outside", func(x *indexes) { delete(x.outside, "") }},
		{"kept", func(x *indexes) { clear(x.kept.all) }},
		{"kept", func(x *indexes) { clear(x.kept.byService) }},
		{"kept", func(x *indexes) {
			x.kept.add(Reservation{IP: ip("10.0.0.14"), ForService: "ns/web", Kept: true})
		}},
		{"freed", func(x *indexes) { x.freed.add(ip("10.0.0.0")) }},
		{"freed", func(x *indexes) { x.freed.set.add(ip("10.0.1.15")) }},
		{"freed", func(x *indexes) { clear(x.freed.of) }},
	} {
		t.Run(tc.index, func(t *testing.T) {
			a := everyIndex(t)
			if err := a.idx.check(); err != nil {
				t.Fatalf("before corrupting: %v", err)
			}
			tc.corrupt(&a.idx)
			err := a.idx.check()
			if err == nil || !strings.HasPrefix(err.Error(), tc.index+": ") {
				t.Fatalf("check() = %v, want an error naming %s", err, tc.index)
			}
			t.Log(err)
		})
	}
}

// TestEveryOperationChecks: with checkIndexes set (TestMain), an operation
// on corrupt indexes panics, naming the operation and the index.
func TestEveryOperationChecks(t *testing.T) {
	a := everyIndex(t)
	delete(a.idx.bySvc, "ns/web")
	defer func() {
		msg, _ := recover().(string)
		if !strings.Contains(msg, "Claim left the indexes inconsistent: bySvc: ") {
			t.Fatalf("recovered %q, want Claim's check naming bySvc", msg)
		}
	}()
	a.Claim(Request{Service: "ns/other", RequestedIPs: addrs("10.0.0.10")})
	t.Fatal("Claim did not check the indexes")
}
