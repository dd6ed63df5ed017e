package allocator

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"
)

// releaseKeeping releases service the way the controller does: the addresses it
// held alone are kept for it (KeepOnRelease), then Release and Reserve.
func releaseKeeping(t *testing.T, a *Allocator, service string, at time.Time) []Reservation {
	t.Helper()
	kept := a.KeepOnRelease([]string{service}, at)
	a.Release(service)
	for _, r := range kept {
		if err := a.Reserve(r); err != nil {
			t.Fatalf("keep %s for %s: %v", r.IP, service, err)
		}
	}
	return kept
}

// keeping is s with grace period d.
func keeping(d time.Duration, s PoolSpec) PoolSpec {
	s.KeepReleased = &d
	return s
}

func ipsOf(res Result) []string {
	var out []string
	for _, ip := range res.IPs {
		out = append(out, ip.String())
	}
	return out
}

func TestKeptAddressComesBack(t *testing.T) {
	tests := []struct {
		name string
		// pools and the default grace period
		pools []*Pool
		keep  time.Duration
		// first is allocated, then released; others are allocated meanwhile
		first  Request
		others []Request
		// again asks after the release; want is what it gets
		again Request
		want  []string
		// kept: whether again ended a kept reservation
		kept bool
	}{{
		name:  "the same Service gets its address, not the lowest free one",
		pools: []*Pool{mustPool(t, "p", spec("10.0.0.0/29"))}, keep: time.Hour,
		first: Request{Service: "ns/web"}, again: Request{Service: "ns/web"},
		want: []string{"10.0.0.0"}, kept: true,
	}, {
		name:  "dual-stack: both families come back",
		pools: []*Pool{mustPool(t, "p", spec("10.0.0.0/29", "2001:db8::/125"))}, keep: time.Hour,
		first:  Request{Service: "ns/web", FamilyPolicy: RequireDualStack, Families: []Family{IPv6, IPv4}},
		others: []Request{{Service: "ns/other", FamilyPolicy: RequireDualStack, Families: []Family{IPv4, IPv6}}},
		again:  Request{Service: "ns/web", FamilyPolicy: RequireDualStack, Families: []Family{IPv6, IPv4}},
		want:   []string{"2001:db8::1", "10.0.0.0"}, kept: true,
	}, {
		name:  "another Service of the namespace gets a fresh address",
		pools: []*Pool{mustPool(t, "p", spec("10.0.0.0/29"))}, keep: time.Hour,
		first: Request{Service: "ns/web"}, again: Request{Service: "ns/api"},
		want: []string{"10.0.0.1"},
	}, {
		name:  "a Service of that name in another namespace gets a fresh address",
		pools: []*Pool{mustPool(t, "p", spec("10.0.0.0/29"))}, keep: time.Hour,
		first: Request{Service: "ns/web"}, again: Request{Service: "other/web"},
		want: []string{"10.0.0.1"},
	}, {
		name:  "grace period 0: the address is free at once, and reused last",
		pools: []*Pool{mustPool(t, "p", spec("10.0.0.0/29"))}, keep: 0,
		first: Request{Service: "ns/web"}, again: Request{Service: "ns/api"},
		want: []string{"10.0.0.1"},
	}, {
		name:  "grace period 0: the Service asking again gets what it freed, while it is free",
		pools: []*Pool{mustPool(t, "p", spec("10.0.0.0/29"))}, keep: 0,
		first: Request{Service: "ns/web"}, again: Request{Service: "ns/web"},
		want: []string{"10.0.0.0"},
	}, {
		name: "the pool's grace period wins over the default",
		pools: []*Pool{mustPool(t, "p", func() PoolSpec {
			s := spec("10.0.0.0/29")
			zero := time.Duration(0)
			s.KeepReleased = &zero
			return s
		}())}, keep: time.Hour,
		first: Request{Service: "ns/web"}, others: []Request{{Service: "ns/api"}}, again: Request{Service: "ns/web"},
		want: []string{"10.0.0.0"}, // what it freed, not kept: no kept reservation ends
	}, {
		name: "back to the pool that keeps it, though another ranks first now",
		pools: []*Pool{
			mustPool(t, "old", spec("10.0.0.0/29")),
			mustPool(t, "preferred", func() PoolSpec { s := spec("10.1.0.0/29"); s.Priority = 1; return s }()),
		}, keep: time.Hour,
		first: Request{Service: "ns/web", Pool: "old"}, again: Request{Service: "ns/web"},
		want: []string{"10.0.0.0"}, kept: true,
	}, {
		name:  "a pool that no longer serves the namespace keeps it from the Service",
		pools: []*Pool{mustPool(t, "p", spec("10.0.0.0/29")), mustPool(t, "q", spec("10.1.0.0/29"))}, keep: time.Hour,
		first: Request{Service: "ns/web", Pool: "p"}, again: Request{Service: "ns/web", Pool: "q"},
		want: []string{"10.1.0.0"},
	}}
	at := time.Date(2026, 12, 5, 12, 0, 0, 0, time.UTC)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var pools []*Pool
			for _, p := range tt.pools {
				spec := p.Spec()
				if spec.KeepReleased == nil {
					spec = keeping(tt.keep, spec)
				}
				pools = append(pools, mustPool(t, p.Name(), spec))
			}
			a := newAllocator(t, pools...)
			mustAllocate(t, a, tt.first)
			releaseKeeping(t, a, tt.first.Service, at)
			for _, o := range tt.others {
				mustAllocate(t, a, o)
			}
			res := mustAllocate(t, a, tt.again)
			if got := ipsOf(res); !slices.Equal(got, tt.want) {
				t.Fatalf("got %v, want %v", got, tt.want)
			}
			if got := len(res.Kept) > 0; got != tt.kept {
				t.Fatalf("ended kept reservations %+v, want kept = %v", res.Kept, tt.kept)
			}
			for _, r := range res.Kept {
				if r.ForService != tt.first.Service {
					t.Fatalf("ended %+v, kept for another Service", r)
				}
			}
		})
	}
}

// Two Services share an address; both are deleted and created again, in
// the other order: the address is kept under the sharing key, so whichever
// comes first takes it and the other joins it.
func TestKeptSharedAddressComesBackToBoth(t *testing.T) {
	a := newAllocator(t, mustPool(t, "p", keeping(time.Hour, spec("10.0.0.0/29"))))
	sh := func(port int32) Sharing { return Sharing{Key: "k", Ports: []Port{{"TCP", port}}} }
	mustAllocate(t, a, Request{Service: "ns/a", Sharing: sh(80)})
	mustAllocate(t, a, Request{Service: "ns/b", Sharing: sh(443)})
	at := time.Date(2026, 12, 5, 12, 0, 0, 0, time.UTC)
	if kept := releaseKeeping(t, a, "ns/a", at); len(kept) != 0 {
		t.Fatalf("ns/a's release kept %+v while ns/b holds the address", kept)
	}
	if kept := releaseKeeping(t, a, "ns/b", at); len(kept) != 1 || kept[0].SharingKey != "k" {
		t.Fatalf("ns/b's release kept %+v, want the address under key k", kept)
	}
	mustAllocate(t, a, Request{Service: "ns/other"}) // takes a fresh one
	for _, s := range []Request{{Service: "ns/a", Sharing: sh(80)}, {Service: "ns/b", Sharing: sh(443)}} {
		if got := ipsOf(mustAllocate(t, a, s)); !slices.Equal(got, []string{"10.0.0.0"}) {
			t.Fatalf("%s got %v, want the shared 10.0.0.0 back", s.Service, got)
		}
	}
	// Another namespace's Service under the same key learns nothing of it.
	if got := ipsOf(mustAllocate(t, a, Request{Service: "other/c", Sharing: sh(8080)})); slices.Equal(got, []string{"10.0.0.0"}) {
		t.Fatalf("a Service of another namespace joined the kept address")
	}
}

// TestKeptSharedAddressStillRefusesAClashingPort: an address kept under a
// sharing key and taken back from its status by its own Service (Assign)
// goes to another Service of that key only if the two may share it — found
// by FuzzAllocatorInvariants: both held it on TCP/80.
func TestKeptSharedAddressStillRefusesAClashingPort(t *testing.T) {
	a := newAllocator(t, mustPool(t, "p", keeping(time.Hour, spec("10.0.0.0/30"))))
	sh := Sharing{Key: "k", Ports: []Port{{"TCP", 80}}}
	ip := netip.MustParseAddr("10.0.0.1")
	a.Assign("ns/a", []netip.Addr{ip}, sh)
	releaseKeeping(t, a, "ns/a", time.Date(2026, 12, 6, 3, 0, 0, 0, time.UTC))
	a.Assign("ns/a", []netip.Addr{ip}, sh) // its status still shows it
	res, err := a.Allocate(Request{Service: "ns/b", Sharing: sh})
	if err != nil {
		t.Fatal(err)
	}
	if slices.Contains(res.IPs, ip) {
		t.Fatalf("ns/b was given %s on TCP/80, which ns/a holds on TCP/80", ip)
	}
	if got := a.Holders(ip); len(got) != 1 || got[0].Service != "ns/a" {
		t.Fatalf("holders of %s: %+v, want ns/a alone", ip, got)
	}
}

// Nobody waits for a kept address while another is free; when nothing else
// is, a waiter takes the one kept longest, and Result.Kept says whose.
func TestKeptAddressesNeverStarveAWaiter(t *testing.T) {
	a := newAllocator(t, mustPool(t, "p", keeping(time.Hour, spec("10.0.0.0/30"))))
	for _, s := range []string{"ns/s0", "ns/s1", "ns/s2"} {
		mustAllocate(t, a, Request{Service: s})
	}
	t0 := time.Date(2026, 12, 5, 12, 0, 0, 0, time.UTC)
	releaseKeeping(t, a, "ns/s1", t0.Add(time.Minute))
	releaseKeeping(t, a, "ns/s2", t0)
	if got := ipsOf(mustAllocate(t, a, Request{Service: "ns/w1"})); !slices.Equal(got, []string{"10.0.0.3"}) {
		t.Fatalf("w1 got %v, want the free 10.0.0.3", got)
	}
	res := mustAllocate(t, a, Request{Service: "other/w2"})
	if got := ipsOf(res); !slices.Equal(got, []string{"10.0.0.2"}) {
		t.Fatalf("w2 got %v, want 10.0.0.2, kept longest", got)
	}
	if len(res.Kept) != 1 || res.Kept[0].ForService != "ns/s2" {
		t.Fatalf("Result.Kept = %+v, want the reservation kept for ns/s2", res.Kept)
	}
	if got := ipsOf(mustAllocate(t, a, Request{Service: "ns/s2"})); !slices.Equal(got, []string{"10.0.0.1"}) {
		t.Fatalf("s2, back, got %v, want the last address, kept for s1", got)
	}
	if _, err := a.Allocate(Request{Service: "ns/s1"}); reasonOf(err) != ReasonPoolExhausted {
		t.Fatalf("s1, back with nothing left: err = %v, want PoolExhausted", err)
	}
}

// A request for a kept address takes it when it comes from the tenant the
// address is kept for (a rename: shop/web-v1 deleted, shop/web-v2 asking
// for its address), ending the keep; from any other namespace it is refused
// until the grace period ends. The tenant is the Gateway's namespace for a
// Gateway's Service, on either side.
func TestKeptAddressOnRequest(t *testing.T) {
	kk := Sharing{Key: "k", Ports: []Port{{"TCP", 80}}}
	for _, tc := range []struct {
		name string
		// keptFor held 10.0.0.0 (serving a Gateway of namespace
		// keptTenant, when set) and released it; it is kept.
		keptFor, keptTenant string
		keptSharing         Sharing
		// back: keptFor holds it again from its status (Assign).
		back bool
		req  Request
		// took: granted, ending the keep, by TookOnRequest; returned:
		// granted back to its own Service; else RequestedIPInUse.
		took, returned bool
	}{
		{name: "its own Service", keptFor: "shop/web-v1", req: Request{Service: "shop/web-v1"}, returned: true},
		{name: "a rename in its namespace", keptFor: "shop/web-v1", req: Request{Service: "shop/web-v2"}, took: true},
		{name: "same namespace, another sharing key", keptFor: "shop/web-v1", keptSharing: kk,
			req: Request{Service: "shop/web-v2", Sharing: Sharing{Key: "other", Ports: []Port{{"TCP", 80}}}}, took: true},
		{name: "same namespace, same sharing key", keptFor: "shop/web-v1", keptSharing: kk,
			req: Request{Service: "shop/web-v2", Sharing: Sharing{Key: "k", Ports: []Port{{"TCP", 443}}}}, returned: true},
		{name: "another namespace", keptFor: "shop/web-v1", req: Request{Service: "other/thief"}},
		{name: "another namespace, same sharing key", keptFor: "shop/web-v1", keptSharing: kk,
			req: Request{Service: "other/thief", Sharing: Sharing{Key: "k", Ports: []Port{{"TCP", 443}}}}},
		{name: "same namespace while its Service holds it again", keptFor: "shop/web-v1", back: true, req: Request{Service: "shop/web-v2"}},
		{name: "a Gateway's address, asked by the Gateway's namespace", keptFor: "gw-system/shop-gw", keptTenant: "shop",
			req: Request{Service: "shop/web"}, took: true},
		{name: "a Gateway's address, asked by the Gateway Services' namespace", keptFor: "gw-system/shop-gw", keptTenant: "shop",
			req: Request{Service: "gw-system/plain"}},
		{name: "a Gateway's address, asked by another Gateway of its namespace", keptFor: "gw-system/shop-gw", keptTenant: "shop",
			req: Request{Service: "gw-system/shop-gw2", Namespace: "shop"}, took: true},
		{name: "a Gateway's address, asked by a Gateway of another namespace", keptFor: "gw-system/shop-gw", keptTenant: "shop",
			req: Request{Service: "gw-system/other-gw", Namespace: "other"}},
		{name: "a namespace's address, asked by a Gateway of that namespace", keptFor: "shop/web-v1",
			req: Request{Service: "gw-system/shop-gw", Namespace: "shop"}, took: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := newAllocator(t, mustPool(t, "p", keeping(time.Hour, spec("10.0.0.0/29"))))
			ip := netip.MustParseAddr("10.0.0.0")
			mustAllocate(t, a, Request{Service: tc.keptFor, Namespace: tc.keptTenant, Sharing: tc.keptSharing})
			at := time.Date(2026, 12, 5, 12, 0, 0, 0, time.UTC)
			releaseKeeping(t, a, tc.keptFor, at)
			if tc.back {
				if err := a.Assign(tc.keptFor, []netip.Addr{ip}, tc.keptSharing); err != nil {
					t.Fatal(err)
				}
			}
			req := tc.req
			req.RequestedIPs = []netip.Addr{ip}
			if x := a.Explain(req); tc.took != strings.Contains(x.Decision, "10.0.0.0 is kept for Service "+tc.keptFor+", which released it at 2026-12-05T12:00:00Z: it requests it and is of the same namespace, so it takes it, ending the keep.") {
				t.Fatalf("Explain: %q", x.Decision)
			}
			res, err := a.Allocate(req)
			if !tc.took && !tc.returned {
				if reasonOf(err) != ReasonRequestedIPInUse {
					t.Fatalf("err = %v (granted %v), want RequestedIPInUse", err, res.IPs)
				}
				if r, ok := a.Reservation(ip); !ok || !r.Kept || r.ForService != tc.keptFor {
					t.Fatalf("after the refusal 10.0.0.0 is %+v, %v; want still kept for %s", r, ok, tc.keptFor)
				}
				return
			}
			if err != nil {
				t.Fatalf("err = %v, want 10.0.0.0 granted", err)
			}
			if got := ipsOf(res); !slices.Equal(got, []string{"10.0.0.0"}) {
				t.Fatalf("granted %v, want 10.0.0.0", got)
			}
			if len(res.Kept) != 1 || res.Kept[0].IP != ip || res.Kept[0].ForService != tc.keptFor {
				t.Fatalf("Result.Kept = %+v, want the keep for %s ended", res.Kept, tc.keptFor)
			}
			if got := TookOnRequest(req, res.Kept[0]); got != tc.took {
				t.Fatalf("TookOnRequest = %v, want %v", got, tc.took)
			}
			if _, ok := a.Reservation(ip); ok {
				t.Fatalf("the kept reservation outlived the grant")
			}
		})
	}
}

func TestKeptExpiry(t *testing.T) {
	hour, zero := time.Hour, time.Duration(0)
	short := spec("10.0.0.0/29")
	short.KeepReleased = &hour
	long := keeping(24*time.Hour, spec("10.1.0.0/29"))
	a := newAllocator(t, mustPool(t, "short", short), mustPool(t, "default", long))
	t0 := time.Date(2026, 12, 5, 12, 0, 0, 0, time.UTC)
	mustAllocate(t, a, Request{Service: "ns/a", Pool: "short"})
	mustAllocate(t, a, Request{Service: "ns/b", Pool: "default"})
	releaseKeeping(t, a, "ns/a", t0)
	releaseKeeping(t, a, "ns/b", t0)
	if next, ok := a.NextKeptExpiry(); !ok || !next.Equal(t0.Add(time.Hour)) {
		t.Fatalf("NextKeptExpiry = %v, %v; want %v", next, ok, t0.Add(time.Hour))
	}
	if got := a.ExpiredKept(t0.Add(time.Hour - time.Second)); len(got) != 0 {
		t.Fatalf("expired a second early: %+v", got)
	}
	got := a.ExpiredKept(t0.Add(time.Hour))
	if len(got) != 1 || got[0].IP.String() != "10.0.0.0" {
		t.Fatalf("ExpiredKept at one hour = %+v, want short's 10.0.0.0", got)
	}
	if c := a.KeptCount(); c["short"] != 1 || c["default"] != 1 {
		t.Fatalf("KeptCount = %v", c)
	}
	// Shortening the pool's grace period applies to what it keeps already.
	short.KeepReleased = &zero
	a.SetPools([]*Pool{mustPool(t, "short", short), mustPool(t, "default", long)})
	if got := a.ExpiredKept(t0); len(got) != 1 {
		t.Fatalf("after the grace period became 0, ExpiredKept(release time) = %+v", got)
	}
	// A deleted pool takes its kept addresses along.
	a.SetPools([]*Pool{mustPool(t, "short", short)})
	if got := a.ExpiredKept(t0); len(got) != 2 {
		t.Fatalf("after the pool keeping 10.1.0.0 was deleted, ExpiredKept = %+v, want both", got)
	}
}

// Services released in one pass keep what they shared.
func TestKeepOnReleaseTogether(t *testing.T) {
	a := newAllocator(t, mustPool(t, "p", keeping(time.Hour, spec("10.0.0.0/29"))))
	sh := func(port int32) Sharing { return Sharing{Key: "k", Ports: []Port{{"TCP", port}}} }
	mustAllocate(t, a, Request{Service: "ns/b", Sharing: sh(80)})
	mustAllocate(t, a, Request{Service: "ns/a", Sharing: sh(443)})
	mustAllocate(t, a, Request{Service: "ns/c", Sharing: sh(8080)})
	at := time.Date(2026, 12, 5, 12, 0, 0, 0, time.UTC)
	if kept := a.KeepOnRelease([]string{"ns/b", "ns/a"}, at); len(kept) != 0 {
		t.Fatalf("kept %+v while ns/c still holds the address", kept)
	}
	kept := a.KeepOnRelease([]string{"ns/c", "ns/b", "ns/a"}, at)
	if len(kept) != 1 || kept[0].ForService != "ns/a" || kept[0].SharingKey != "k" || kept[0].IP.String() != "10.0.0.0" {
		t.Fatalf("kept %+v, want 10.0.0.0 for ns/a (the first by key) under k", kept)
	}
}

// Explain says when a Service would get a kept address, and whose.
func TestExplainKeptAddress(t *testing.T) {
	a := newAllocator(t, mustPool(t, "p", keeping(time.Hour, spec("10.0.0.0/31"))))
	mustAllocate(t, a, Request{Service: "ns/a"})
	mustAllocate(t, a, Request{Service: "ns/b"})
	at := time.Date(2026, 12, 5, 12, 0, 0, 0, time.UTC)
	releaseKeeping(t, a, "ns/a", at)
	if x := a.Explain(Request{Service: "ns/a"}); !strings.Contains(x.Decision, "10.0.0.0 is kept for it since its release at 2026-12-05T12:00:00Z, until 2026-12-05T13:00:00Z") {
		t.Fatalf("ns/a, created again: %q", x.Decision)
	}
	if x := a.Explain(Request{Service: "other/c"}); !strings.Contains(x.Decision, "10.0.0.0 is kept for Service ns/a, which released it") {
		t.Fatalf("other/c, with nothing else free: %q", x.Decision)
	}
}

// A namespace that creates and deletes Services cannot pile up kept
// addresses past its cap, nor make others' kept addresses go first: kept
// addresses count toward maxAddressesPerNamespace, and a namespace takes
// its own kept addresses first (at its cap, only those).
func TestChurnUsesItsOwnKeptAddresses(t *testing.T) {
	s := keeping(time.Hour, spec("10.0.0.0/29"))
	s.MaxAddressesPerNamespace = 2
	a := newAllocator(t, mustPool(t, "p", s))
	t0 := time.Date(2026, 12, 5, 12, 0, 0, 0, time.UTC)
	mustAllocate(t, a, Request{Service: "prod/web"}) // 10.0.0.0
	releaseKeeping(t, a, "prod/web", t0)             // kept, oldest
	// evil: at its cap of 2 (held and kept), it takes back its own oldest.
	for i, want := range []string{"10.0.0.1", "10.0.0.2", "10.0.0.1", "10.0.0.2", "10.0.0.1"} {
		svc := fmt.Sprintf("evil/s%d", i)
		if got := ipsOf(mustAllocate(t, a, Request{Service: svc})); !slices.Equal(got, []string{want}) {
			t.Fatalf("round %d: %s got %v, want %s", i, svc, got, want)
		}
		releaseKeeping(t, a, svc, t0.Add(time.Duration(i+1)*time.Minute))
	}
	if got := ipsOf(mustAllocate(t, a, Request{Service: "prod/web"})); !slices.Equal(got, []string{"10.0.0.0"}) {
		t.Fatalf("prod/web, back, got %v: evil's churn took its kept address", got)
	}
}

// Another namespace requesting a kept address cannot keep it from its
// Service.
func TestKeptAddressIsNotBlockedByAClaim(t *testing.T) {
	a := newAllocator(t, mustPool(t, "p", keeping(time.Hour, spec("10.0.0.0/29"))))
	mustAllocate(t, a, Request{Service: "prod/web"})
	releaseKeeping(t, a, "prod/web", time.Date(2026, 12, 5, 12, 0, 0, 0, time.UTC))
	thief := Request{Service: "evil/thief", RequestedIPs: addrs("10.0.0.0")}
	if err := a.Claim(thief); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Allocate(thief); reasonOf(err) != ReasonRequestedIPInUse {
		t.Fatalf("evil/thief: err = %v, want RequestedIPInUse", err)
	}
	if got := ipsOf(mustAllocate(t, a, Request{Service: "prod/web"})); !slices.Equal(got, []string{"10.0.0.0"}) {
		t.Fatalf("prod/web, back, got %v: another namespace's request kept its address from it", got)
	}
}
