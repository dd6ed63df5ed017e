package allocator

import (
	"net/netip"
	"strings"
	"testing"
	"time"
)

// TestUnusableAddressesAreNeverHandedOut: addresses no client can reach are
// skipped by auto allocation and refused when requested.
func TestUnusableAddressesAreNeverHandedOut(t *testing.T) {
	tests := []struct {
		name      string
		addresses []string
		want      []string // what 3 Services get, in order
	}{
		{"unspecified", []string{"0.0.0.0/30"}, []string{"0.0.0.1", "0.0.0.2", "0.0.0.3"}},
		{"hops over loopback", []string{"126.255.255.254-128.0.0.0"}, []string{"126.255.255.254", "126.255.255.255", "128.0.0.0"}},
		{"link-local", []string{"169.254.255.255-169.255.0.1"}, []string{"169.255.0.0", "169.255.0.1"}},
		{"multicast", []string{"223.255.255.255-240.0.0.0"}, []string{"223.255.255.255", "240.0.0.0"}},
		{"limited broadcast", []string{"255.255.255.254/31"}, []string{"255.255.255.254"}},
		{"IPv6 Subnet-Router anycast", []string{"2001:db8:1::/120"}, []string{"2001:db8:1::1", "2001:db8:1::2", "2001:db8:1::3"}},
		{"IPv6 loopback and unspecified", []string{"::/126"}, []string{"::2", "::3"}},
		{"IPv6 link-local", []string{"fe80::/126", "2001:db8::7/128"}, []string{"2001:db8::7"}},
		{"IPv6 multicast", []string{"ff02::1-ff02::3"}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := newAllocator(t, mustPool(t, "p", spec(tt.addresses...)))
			fam := IPv4
			if strings.Contains(tt.addresses[0], ":") {
				fam = IPv6
			}
			var got []string
			for _, s := range []string{"ns/a", "ns/b", "ns/c"} {
				res, err := a.Allocate(Request{Service: s, Families: []Family{fam}})
				if err != nil {
					if r := reasonOf(err); r != ReasonPoolExhausted && r != ReasonNoMatchingPool {
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
	a := newAllocator(t, mustPool(t, "p", spec("127.0.0.0/30", "2001:db8::/64")))
	for ip, want := range map[string]string{
		"127.0.0.1":   "pool p never hands out 127.0.0.1: it is a loopback address",
		"2001:db8::":  "pool p never hands out 2001:db8::: it is the Subnet-Router anycast address of its prefix",
		"2001:db8::1": "",
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

// TestPoolEditsNeverMoveAnAddress: whatever happens to a pool, a Service
// keeps what it holds until the Service itself asks for something else.
func TestPoolEditsNeverMoveAnAddress(t *testing.T) {
	ip := netip.MustParseAddr
	base := func() PoolSpec { return spec("10.0.0.0/29") }
	tests := []struct {
		name  string
		edit  func(*PoolSpec) // nil: the pool is deleted
		other bool            // another pool serves the Service
		why   string          // in the Outside message ("" = still fits)
	}{
		{"deleted", nil, true, "10.0.0.5 is no longer in any serving IPPool"},
		{"shrunk below it", func(s *PoolSpec) { s.Addresses = []string{"10.0.0.0/30"} }, true, "no longer in any serving IPPool"},
		{"moved elsewhere", func(s *PoolSpec) { s.Addresses = []string{"10.9.0.0/29"} }, true, "no longer in any serving IPPool"},
		{"namespace no longer served", func(s *PoolSpec) { s.Namespaces = []string{"other"} }, true, "pool p serves only namespaces other"},
		{"service selector", func(s *PoolSpec) {
			s.ServiceSelectors = []Selector{{MatchLabels: map[string]string{"tier": "db"}}}
		}, true, "serviceSelectors"},
		{"avoidBuggyIPs turned on", func(s *PoolSpec) { s.AvoidBuggyIPs = true; s.Addresses = []string{"10.0.0.0/24"} }, false, ""},
		{"autoAssign off", func(s *PoolSpec) { s.AutoAssign = false }, true, ""},
		{"terminating", func(s *PoolSpec) { s.Terminating = true }, true, ""},
		{"grown", func(s *PoolSpec) { s.Addresses = []string{"10.0.0.0/24"} }, false, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := newAllocator(t, mustPool(t, "p", base()))
			if err := a.Assign("ns/s", addrs("10.0.0.5"), Sharing{}); err != nil {
				t.Fatal(err)
			}
			pools := []*Pool{mustPool(t, "q", spec("10.0.1.0/24"))}
			if !tt.other {
				pools = nil
			}
			if tt.edit != nil {
				s := base()
				tt.edit(&s)
				pools = append(pools, mustPool(t, "p", s))
			}
			a.SetPools(pools)
			res, err := a.Allocate(Request{Service: "ns/s"})
			if err != nil || len(res.IPs) != 1 || res.IPs[0] != ip("10.0.0.5") || res.New {
				t.Fatalf("res = %+v, err = %v; want 10.0.0.5 kept", res, err)
			}
			if !strings.Contains(res.Outside, tt.why) || (tt.why == "") != (res.Outside == "") {
				t.Fatalf("outside = %q, want %q", res.Outside, tt.why)
			}
			if geometric := tt.edit == nil || strings.Contains(tt.why, "no longer in any"); tt.why != "" && geometric {
				if got := a.HeldOutside()["p"]; got != 1 {
					t.Fatalf("HeldOutside = %v, want p: 1", a.HeldOutside())
				}
			}
			if tt.why != "" {
				if got := a.HeldOutside()["p"]; got > 1 {
					t.Fatalf("HeldOutside = %v, want p: 1", a.HeldOutside())
				}
				x := a.Explain(Request{Service: "ns/s"})
				if x.Reason != ReasonHeldOutsidePool || !strings.Contains(x.Decision, "ipam never moves an address") {
					t.Fatalf("explain = %+v", x)
				}
			}
			// Nobody else is ever handed 10.0.0.5.
			for _, s := range []string{"ns/x", "ns/y", "ns/z"} {
				if r, _ := a.Allocate(Request{Service: s}); len(r.IPs) > 0 && r.IPs[0] == ip("10.0.0.5") {
					t.Fatalf("%s got the held 10.0.0.5", s)
				}
			}
			if _, err := a.Allocate(Request{Service: "ns/w", RequestedIPs: addrs("10.0.0.5")}); err == nil {
				t.Fatal("another Service was granted the held 10.0.0.5 on request")
			}
			// The owner asks for another pool: now, and only now, it moves.
			if _, err := a.Allocate(Request{Service: "ns/s", Pool: "q"}); tt.other && !IsUnfit(err) {
				t.Fatalf("asking for pool q: err = %v, want unfit", err)
			}
		})
	}
}

func TestTerminatingPoolHandsOutNothingNew(t *testing.T) {
	s := spec("10.0.0.0/29", "2001:db8::/120")
	a := newAllocator(t, mustPool(t, "p", s))
	mustAllocate(t, a, Request{Service: "ns/held"})
	s.Terminating = true
	a.SetPools([]*Pool{mustPool(t, "p", s)})
	if res, err := a.Allocate(Request{Service: "ns/held"}); err != nil || res.Outside != "" || res.Pool != "p" {
		t.Fatalf("held: res = %+v, err = %v", res, err)
	}
	if _, err := a.Allocate(Request{Service: "ns/new"}); reasonOf(err) != ReasonNoMatchingPool {
		t.Fatalf("new: err = %v, want NoMatchingPool", err)
	}
	if _, err := a.Allocate(Request{Service: "ns/req", RequestedIPs: addrs("10.0.0.3")}); err == nil || !strings.Contains(err.Error(), "being deleted") {
		t.Fatalf("requested: err = %v", err)
	}
	// a held Service asking for a second family gets nothing new from it
	_, err := a.Allocate(Request{Service: "ns/held", FamilyPolicy: RequireDualStack, Families: []Family{IPv4, IPv6}})
	if reasonOf(err) != ReasonPoolExhausted || !strings.Contains(err.Error(), "being deleted") || len(a.Allocations("ns/held")) != 1 {
		t.Fatalf("second family: err = %v, held %v", err, a.Allocations("ns/held"))
	}
	if x := a.Explain(Request{Service: "ns/new"}); x.Verdicts[0].Reason != VerdictTerminating {
		t.Fatalf("verdicts = %+v", x.Verdicts)
	}
}

// TestClaimsFollowEligibility: a Service may not block a pool's addresses
// by requesting them when the pool would not serve it.
func TestClaimsFollowEligibility(t *testing.T) {
	team := spec("10.0.0.1-10.0.0.2")
	team.Namespaces = []string{"team"}
	a := newAllocator(t, mustPool(t, "team", team), mustPool(t, "other", spec("10.0.9.0/24")))
	err := a.Claim(Request{Service: "intruder/s", RequestedIPs: addrs("10.0.0.1")})
	if reasonOf(err) != ReasonNoMatchingPool || !strings.Contains(err.Error(), "pool team serves only namespaces team; the Service is in namespace intruder") {
		t.Fatalf("claim: err = %v", err)
	}
	if err := a.Claim(Request{Service: "team/named", RequestedIPs: addrs("10.0.0.2"), Pool: "other"}); err == nil {
		t.Fatal("a claim against the Service's own named pool was accepted")
	}
	if got := mustAllocate(t, a, Request{Service: "team/pending"}); got.IPs[0] != netip.MustParseAddr("10.0.0.1") {
		t.Fatalf("pending got %v, want 10.0.0.1 (the intruder's claim must not block it)", got.IPs)
	}
	if err := a.Claim(Request{Service: "team/ok", RequestedIPs: addrs("10.0.0.2")}); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Allocate(Request{Service: "team/late", Pool: "team"}); reasonOf(err) != ReasonPoolExhausted {
		t.Fatalf("late: err = %v, want PoolExhausted (10.0.0.2 is claimed by team/ok)", err)
	}
}

// TestPinnedServiceNeverMovesOnPoolEdits: a Service that names its pool
// (ipledger.io/address-pool) keeps its address when pool edits put the
// address in another pool or in none, and after a restart from the ledger.
func TestPinnedServiceNeverMovesOnPoolEdits(t *testing.T) {
	ip := netip.MustParseAddr("10.0.0.5")
	older := spec("10.9.0.0/24")
	older.CreatedAt = t0.Add(-time.Hour)
	newer := spec("10.0.0.0/24")
	pinned := Request{Service: "ns/s", Pool: "a"}
	tests := []struct {
		name  string
		pools []*Pool
	}{
		{"an older pool grows over it", []*Pool{mustPool(t, "a", newer), mustPool(t, "c", spec2(older, "10.9.0.0/24", "10.0.0.0/24"))}},
		{"shrunk, then another pool created over it", []*Pool{mustPool(t, "a", spec("10.0.0.0/30")), mustPool(t, "b", spec("10.0.0.4/30"))}},
		{"deleted", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := newAllocator(t, mustPool(t, "a", newer))
			if err := a.Assign("ns/s", []netip.Addr{ip}, Sharing{}); err != nil {
				t.Fatal(err)
			}
			a.SetPools(tt.pools)
			check := func(a *Allocator, when string) {
				res, err := a.Allocate(pinned)
				if err != nil || res.Outside == "" || len(res.IPs) != 1 || res.IPs[0] != ip {
					t.Fatalf("%s: res = %+v, err = %v; want 10.0.0.5 kept outside its pool", when, res, err)
				}
				if got := a.Allocations("ns/s")[0].From; got != "a" {
					t.Fatalf("%s: From = %q, want a", when, got)
				}
			}
			check(a, "running")
			// A restart: the ledger says the address came from pool a.
			r := New()
			r.SetPools(tt.pools)
			if err := r.Assign("ns/s", []netip.Addr{ip}, Sharing{}); err != nil {
				t.Fatal(err)
			}
			r.NoteOrigin(ip, "a")
			check(r, "after a restart")
		})
	}
	// An address registered from a status outside every pool (MetalLB's, say)
	// has no known origin (the ledger says NoPool): it is kept, not moved to
	// the pool the Service names.
	a := newAllocator(t, mustPool(t, "a", newer))
	other := netip.MustParseAddr("192.0.2.7")
	if err := a.Assign("ns/m", []netip.Addr{other}, Sharing{}); err != nil {
		t.Fatal(err)
	}
	a.NoteOrigin(other, NoPool)
	if res, err := a.Allocate(Request{Service: "ns/m", Pool: "a"}); err != nil || res.Outside == "" || res.IPs[0] != other {
		t.Fatalf("migrated: res = %+v, err = %v", res, err)
	}
}

// TestLostFamilyKeepsTheAddress: a dual-stack Service waiting for its IPv6
// keeps its IPv4 when the pool loses its IPv6 range.
func TestLostFamilyKeepsTheAddress(t *testing.T) {
	a := newAllocator(t, mustPool(t, "p", spec("10.0.0.0/30", "2001:db8::1/128")))
	mustAllocate(t, a, Request{Service: "ns/x", Families: []Family{IPv6}})
	mustAllocate(t, a, Request{Service: "ns/s", Families: []Family{IPv4}})
	req := Request{Service: "ns/s", FamilyPolicy: RequireDualStack, Families: []Family{IPv4, IPv6}}
	if _, err := a.Allocate(req); reasonOf(err) != ReasonPoolExhausted || len(a.Allocations("ns/s")) != 1 {
		t.Fatalf("waiting for IPv6: err = %v, holds %v", err, a.Allocations("ns/s"))
	}
	a.SetPools([]*Pool{mustPool(t, "p", spec("10.0.0.0/30"))})
	_, err := a.Allocate(req)
	if IsUnfit(err) || reasonOf(err) != ReasonNoMatchingPool || !strings.Contains(err.Error(), "the Service keeps 10.0.0.0") || len(a.Allocations("ns/s")) != 1 {
		t.Fatalf("after the pool lost IPv6: err = %v, holds %v", err, a.Allocations("ns/s"))
	}
}

func spec2(s PoolSpec, addresses ...string) PoolSpec {
	s.Addresses = addresses
	return s
}
