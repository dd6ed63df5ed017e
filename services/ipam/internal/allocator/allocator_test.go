package allocator

import (
	"errors"
	"fmt"
	"math/big"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// spec is a PoolSpec with autoAssign on, the CRD default.
func spec(addresses ...string) PoolSpec {
	return PoolSpec{Addresses: addresses, AutoAssign: true, CreatedAt: t0}
}

func newAllocator(t testing.TB, pools ...*Pool) *Allocator {
	t.Helper()
	a := New()
	if upd := a.SetPools(pools); len(upd.Conflicts) > 0 {
		t.Fatalf("unexpected conflicts: %+v", upd.Conflicts)
	}
	return a
}

func reasonOf(err error) Reason {
	var ae *Error
	if errors.As(err, &ae) {
		return ae.Reason
	}
	return ""
}

func mustAllocate(t testing.TB, a *Allocator, req Request) Result {
	t.Helper()
	res, err := a.Allocate(req)
	if err != nil {
		t.Fatalf("Allocate(%s): %v", req.Service, err)
	}
	return res
}

func TestLowestFreeAndAvoidBuggyIPs(t *testing.T) {
	plain := mustPool(t, "plain", spec("10.0.0.255-10.0.1.1"))
	a := newAllocator(t, plain)
	var got []string
	for i := range 3 {
		got = append(got, mustAllocate(t, a, Request{Service: fmt.Sprintf("ns/s%d", i)}).IPs[0].String())
	}
	if want := []string{"10.0.0.255", "10.0.1.0", "10.0.1.1"}; !slices.Equal(got, want) {
		t.Fatalf("plain pool gave %v, want %v", got, want)
	}
	if _, err := a.Allocate(Request{Service: "ns/s3"}); reasonOf(err) != ReasonPoolExhausted {
		t.Fatalf("4th allocation: err = %v, want PoolExhausted", err)
	}

	bs := spec("10.0.0.254-10.0.1.2")
	bs.AvoidBuggyIPs = true
	a = newAllocator(t, mustPool(t, "buggy", bs))
	got = nil
	for i := range 3 {
		got = append(got, mustAllocate(t, a, Request{Service: fmt.Sprintf("ns/s%d", i)}).IPs[0].String())
	}
	if want := []string{"10.0.0.254", "10.0.1.1", "10.0.1.2"}; !slices.Equal(got, want) {
		t.Fatalf("avoidBuggyIPs pool gave %v, want %v", got, want)
	}
	if _, err := a.Allocate(Request{Service: "ns/x", RequestedIPs: addrs("10.0.1.0")}); reasonOf(err) != ReasonRequestedIPNotInPool {
		t.Fatalf("requesting .0 in an avoidBuggyIPs pool: err = %v, want RequestedIPNotInPool", err)
	}
}

// Freed addresses are reused last: never-used addresses first (lowest
// first), then the least recently freed, so that a stale DNS record naming
// an address does not at once reach another Service.
func TestFreedAddressesAreReusedLast(t *testing.T) {
	a := newAllocator(t, mustPool(t, "p", spec("10.0.0.0/29")))
	for i := range 5 {
		mustAllocate(t, a, Request{Service: fmt.Sprintf("ns/s%d", i)})
	}
	a.Release("ns/s3")
	a.Release("ns/s1")
	var got []string
	for i := range 5 {
		got = append(got, mustAllocate(t, a, Request{Service: fmt.Sprintf("ns/new%d", i)}).IPs[0].String())
	}
	if want := []string{"10.0.0.5", "10.0.0.6", "10.0.0.7", "10.0.0.3", "10.0.0.1"}; !slices.Equal(got, want) {
		t.Fatalf("after releasing .3 then .1, new Services got %v, want %v", got, want)
	}
}

func TestPoolSelection(t *testing.T) {
	withNS := func(s PoolSpec, ns ...string) PoolSpec { s.Namespaces = ns; return s }
	withPrio := func(s PoolSpec, p int32) PoolSpec { s.Priority = p; return s }
	manual := func(s PoolSpec) PoolSpec { s.AutoAssign = false; return s }
	nsSel := func(s PoolSpec, k, v string) PoolSpec {
		s.NamespaceSelectors = []Selector{{MatchLabels: map[string]string{k: v}}}
		return s
	}
	svcSel := func(s PoolSpec, k, v string) PoolSpec {
		s.ServiceSelectors = []Selector{{MatchExpressions: []SelectorRequirement{{Key: k, Operator: OpIn, Values: []string{v}}}}}
		return s
	}
	tests := []struct {
		name       string
		pools      map[string]PoolSpec
		req        Request
		wantPool   string
		wantReason Reason
	}{
		{
			name:     "name breaks ties",
			pools:    map[string]PoolSpec{"b": spec("10.0.2.0/24"), "a": spec("10.0.1.0/24")},
			req:      Request{Service: "ns/s"},
			wantPool: "a",
		},
		{
			name:     "set priority before unset, lower first",
			pools:    map[string]PoolSpec{"a": spec("10.0.1.0/24"), "b": withPrio(spec("10.0.2.0/24"), 20), "c": withPrio(spec("10.0.3.0/24"), 10)},
			req:      Request{Service: "ns/s"},
			wantPool: "c",
		},
		{
			name:     "pinned before unrestricted, whatever the priority",
			pools:    map[string]PoolSpec{"open": withPrio(spec("10.0.1.0/24"), 1), "mine": withNS(spec("10.0.2.0/24"), "ns")},
			req:      Request{Service: "ns/s"},
			wantPool: "mine",
		},
		{
			name:     "namespace list excludes others",
			pools:    map[string]PoolSpec{"theirs": withNS(spec("10.0.2.0/24"), "other"), "open": spec("10.0.1.0/24")},
			req:      Request{Service: "ns/s"},
			wantPool: "open",
		},
		{
			name:     "namespace selector",
			pools:    map[string]PoolSpec{"prod": nsSel(spec("10.0.2.0/24"), "env", "prod"), "open": spec("10.0.1.0/24")},
			req:      Request{Service: "ns/s", NamespaceLabels: map[string]string{"env": "prod"}},
			wantPool: "prod",
		},
		{
			name:     "service selector",
			pools:    map[string]PoolSpec{"web": svcSel(spec("10.0.2.0/24"), "tier", "web"), "open": spec("10.0.1.0/24")},
			req:      Request{Service: "ns/s", ServiceLabels: map[string]string{"tier": "db"}},
			wantPool: "open",
		},
		{
			name:       "autoAssign off is skipped",
			pools:      map[string]PoolSpec{"manual": manual(spec("10.0.1.0/24"))},
			req:        Request{Service: "ns/s"},
			wantReason: ReasonNoMatchingPool,
		},
		{
			name:     "autoAssign off serves a Service naming it",
			pools:    map[string]PoolSpec{"manual": manual(spec("10.0.1.0/24")), "open": spec("10.0.2.0/24")},
			req:      Request{Service: "ns/s", Pool: "manual"},
			wantPool: "manual",
		},
		{
			name:     "autoAssign off serves a Service requesting its IP",
			pools:    map[string]PoolSpec{"manual": manual(spec("10.0.1.0/24"))},
			req:      Request{Service: "ns/s", RequestedIPs: addrs("10.0.1.9")},
			wantPool: "manual",
		},
		{
			name:     "a named pool is the only pool",
			pools:    map[string]PoolSpec{"a": spec("10.0.1.0/24"), "b": spec("10.0.2.0/24")},
			req:      Request{Service: "ns/s", Pool: "b"},
			wantPool: "b",
		},
		{
			name:     "a named pool wins over a better ranked one",
			pools:    map[string]PoolSpec{"a": spec("10.0.1.0/24"), "b": spec("10.0.2.0/32")},
			req:      Request{Service: "ns/s", Pool: "b"},
			wantPool: "b",
		},
		{
			name:       "unknown pool",
			pools:      map[string]PoolSpec{"a": spec("10.0.1.0/24")},
			req:        Request{Service: "ns/s", Pool: "nope"},
			wantReason: ReasonNoMatchingPool,
		},
		{
			name:       "named pool in another namespace",
			pools:      map[string]PoolSpec{"a": withNS(spec("10.0.1.0/24"), "other")},
			req:        Request{Service: "ns/s", Pool: "a"},
			wantReason: ReasonNoMatchingPool,
		},
		{
			name:       "requested IP outside every pool",
			pools:      map[string]PoolSpec{"a": spec("10.0.1.0/24")},
			req:        Request{Service: "ns/s", RequestedIPs: addrs("10.9.9.9")},
			wantReason: ReasonRequestedIPNotInPool,
		},
		{
			name:       "requested IP outside the named pool",
			pools:      map[string]PoolSpec{"a": spec("10.0.1.0/24"), "b": spec("10.0.2.0/24")},
			req:        Request{Service: "ns/s", Pool: "a", RequestedIPs: addrs("10.0.2.1")},
			wantReason: ReasonNoMatchingPool,
		},
		{
			name:       "requested IPs from two pools",
			pools:      map[string]PoolSpec{"a": spec("10.0.1.0/24"), "b": spec("2001:db8::/64")},
			req:        Request{Service: "ns/s", FamilyPolicy: RequireDualStack, Families: []Family{IPv4, IPv6}, RequestedIPs: addrs("10.0.1.1", "2001:db8::1")},
			wantReason: ReasonInvalidRequest,
		},
		{
			name:       "requested IP of a family the Service does not have",
			pools:      map[string]PoolSpec{"a": spec("2001:db8::/64")},
			req:        Request{Service: "ns/s", Families: []Family{IPv4}, RequestedIPs: addrs("2001:db8::1")},
			wantReason: ReasonInvalidRequest,
		},
		{
			name:       "bad service key",
			pools:      map[string]PoolSpec{"a": spec("10.0.1.0/24")},
			req:        Request{Service: "noslash"},
			wantReason: ReasonInvalidRequest,
		},
		{
			name:       "no pools",
			req:        Request{Service: "ns/s"},
			wantReason: ReasonNoMatchingPool,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var pools []*Pool
			for name, s := range tt.pools {
				pools = append(pools, mustPool(t, name, s))
			}
			a := newAllocator(t, pools...)
			res, err := a.Allocate(tt.req)
			if tt.wantReason != "" {
				if reasonOf(err) != tt.wantReason {
					t.Fatalf("err = %v (%s), want reason %s", err, reasonOf(err), tt.wantReason)
				}
				x := a.Explain(tt.req)
				if x.Reason != tt.wantReason {
					t.Fatalf("Explain reason = %s, want %s (%s)", x.Reason, tt.wantReason, x.Decision)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if res.Pool != tt.wantPool {
				t.Fatalf("pool = %s, want %s", res.Pool, tt.wantPool)
			}
		})
	}
}

// TestSelectionIsDeterministic: the pool order given to SetPools never changes
// a decision.
func TestSelectionIsDeterministic(t *testing.T) {
	specs := map[string]PoolSpec{"a": spec("10.0.1.0/30"), "b": spec("10.0.2.0/30"), "c": spec("10.0.3.0/30")}
	var first []string
	for round := range 6 {
		var pools []*Pool
		for _, name := range []string{"a", "b", "c"} {
			pools = append(pools, mustPool(t, name, specs[name]))
		}
		// rotate the input order
		pools = append(pools[round%3:], pools[:round%3]...)
		a := newAllocator(t, pools...)
		var got []string
		for i := range 12 {
			got = append(got, mustAllocate(t, a, Request{Service: fmt.Sprintf("ns/s%d", i)}).IPs[0].String())
		}
		if first == nil {
			first = got
		} else if !slices.Equal(got, first) {
			t.Fatalf("round %d gave %v, first round %v", round, got, first)
		}
	}
	if first[0] != "10.0.1.0" || first[4] != "10.0.2.0" || first[11] != "10.0.3.3" {
		t.Fatalf("order = %v", first)
	}
}

func TestDualStack(t *testing.T) {
	v4 := func() *Pool { return mustPool(t, "a-v4", spec("10.0.1.0/24")) }
	v6 := func() *Pool { return mustPool(t, "b-v6", spec("2001:db8:1::/64")) }
	dual := func() *Pool { return mustPool(t, "z-dual", spec("10.0.2.0/24", "2001:db8:2::/64")) }
	tests := []struct {
		name       string
		pools      []*Pool
		req        Request
		want       []string
		wantReason Reason
	}{
		{"SingleStack IPv6", []*Pool{v4(), v6(), dual()}, Request{FamilyPolicy: SingleStack, Families: []Family{IPv6, IPv4}}, []string{"2001:db8:1::1"}, ""},
		{"empty policy is SingleStack", []*Pool{dual()}, Request{Families: []Family{IPv4, IPv6}}, []string{"10.0.2.0"}, ""},
		{"RequireDualStack takes the pool with both", []*Pool{v4(), v6(), dual()}, Request{FamilyPolicy: RequireDualStack, Families: []Family{IPv6, IPv4}}, []string{"2001:db8:2::1", "10.0.2.0"}, ""},
		{"RequireDualStack without such a pool", []*Pool{v4(), v6()}, Request{FamilyPolicy: RequireDualStack, Families: []Family{IPv4, IPv6}}, nil, ReasonNoMatchingPool},
		{"PreferDualStack prefers a pool with both over one of the same rank", []*Pool{v4(), dual()}, Request{FamilyPolicy: PreferDualStack, Families: []Family{IPv4, IPv6}}, []string{"10.0.2.0", "2001:db8:2::1"}, ""},
		{"PreferDualStack falls back to one family", []*Pool{v4(), v6()}, Request{FamilyPolicy: PreferDualStack, Families: []Family{IPv4, IPv6}}, []string{"10.0.1.0"}, ""},
		{"PreferDualStack in a single-stack cluster stays single", []*Pool{dual()}, Request{FamilyPolicy: PreferDualStack, Families: []Family{IPv4}}, []string{"10.0.2.0"}, ""},
		{"requested IPv6 fixes the family, IPv4 auto from the same pool", []*Pool{v4(), dual()}, Request{FamilyPolicy: RequireDualStack, Families: []Family{IPv4, IPv6}, RequestedIPs: addrs("2001:db8:2::9")}, []string{"10.0.2.0", "2001:db8:2::9"}, ""},
		{"no families, requested IP decides", []*Pool{v6()}, Request{RequestedIPs: addrs("2001:db8:1::7")}, []string{"2001:db8:1::7"}, ""},
		{"unknown policy", []*Pool{v4()}, Request{FamilyPolicy: "Both"}, nil, ReasonInvalidRequest},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := newAllocator(t, tt.pools...)
			tt.req.Service = "ns/s"
			res, err := a.Allocate(tt.req)
			if tt.wantReason != "" {
				if reasonOf(err) != tt.wantReason {
					t.Fatalf("err = %v, want %s", err, tt.wantReason)
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

func TestSharing(t *testing.T) {
	tcp := func(ports ...int32) []Port {
		var out []Port
		for _, p := range ports {
			out = append(out, Port{Protocol: "TCP", Port: p})
		}
		return out
	}
	ip := addrs("10.0.0.5")
	tests := []struct {
		name      string
		first     Sharing
		second    Sharing
		wantShare bool
		wantWhy   string
	}{
		{"same key, other ports", Sharing{Key: "k", Ports: tcp(80)}, Sharing{Key: "k", Ports: tcp(443)}, true, ""},
		{"same key, same port other protocol", Sharing{Key: "k", Ports: tcp(53)}, Sharing{Key: "k", Ports: []Port{{Protocol: "UDP", Port: 53}}}, true, ""},
		{"same key, same port", Sharing{Key: "k", Ports: tcp(80)}, Sharing{Key: "k", Ports: []Port{{Port: 80}}}, false, "also uses TCP/80"},
		{"other key", Sharing{Key: "k", Ports: tcp(80)}, Sharing{Key: "j", Ports: tcp(443)}, false, `sharing key "k"`},
		{"holder does not share", Sharing{Ports: tcp(80)}, Sharing{Key: "k", Ports: tcp(443)}, false, "does not share it"},
		{"requester does not share", Sharing{Key: "k", Ports: tcp(80)}, Sharing{Ports: tcp(443)}, false, `set ipledger.io/allow-shared-ip="k"`},
		{"Local, same selector", Sharing{Key: "k", Ports: tcp(80), Local: true, Selector: map[string]string{"app": "x"}}, Sharing{Key: "k", Ports: tcp(443), Local: true, Selector: map[string]string{"app": "x"}}, true, ""},
		{"Local, other selector", Sharing{Key: "k", Ports: tcp(80), Local: true, Selector: map[string]string{"app": "x"}}, Sharing{Key: "k", Ports: tcp(443), Local: true, Selector: map[string]string{"app": "y"}}, false, "select the same Pods"},
		{"Local and Cluster", Sharing{Key: "k", Ports: tcp(80), Local: true}, Sharing{Key: "k", Ports: tcp(443)}, false, "same externalTrafficPolicy"},
		{"Cluster ignores selectors", Sharing{Key: "k", Ports: tcp(80), Selector: map[string]string{"app": "x"}}, Sharing{Key: "k", Ports: tcp(443), Selector: map[string]string{"app": "y"}}, true, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := newAllocator(t, mustPool(t, "p", spec("10.0.0.0/24")))
			mustAllocate(t, a, Request{Service: "ns/one", RequestedIPs: ip, Sharing: tt.first})
			// requested explicitly
			_, err := a.Allocate(Request{Service: "ns/two", RequestedIPs: ip, Sharing: tt.second})
			if tt.wantShare != (err == nil) {
				t.Fatalf("requested: err = %v, want share %v", err, tt.wantShare)
			}
			if err != nil {
				var ae *Error
				if !errors.As(err, &ae) || ae.Reason != ReasonRequestedIPInUse || !slices.Equal(ae.Holders, []string{"ns/one"}) || !strings.Contains(ae.Message, tt.wantWhy) {
					t.Fatalf("err = %#v, want RequestedIPInUse held by ns/one saying %q", err, tt.wantWhy)
				}
				return
			}
			// auto-allocated with the same key: the shared IP comes first
			a.Release("ns/two")
			res := mustAllocate(t, a, Request{Service: "ns/three", Sharing: tt.second})
			if res.IPs[0] != ip[0] {
				t.Fatalf("auto allocation with a compatible key got %s, want the shared %s", res.IPs[0], ip[0])
			}
			if u, _ := a.Usage("p"); u.IPv4.Used.Int64() != 1 {
				t.Fatalf("a shared IP counts once, used = %s", u.IPv4.Used)
			}
			a.Release("ns/one")
			if h := a.Holders(ip[0]); len(h) != 1 || h[0].Service != "ns/three" {
				t.Fatalf("after releasing one sharer, holders = %+v", h)
			}
		})
	}
}

// TestSharingStaysInNamespace: a sharing key joins Services of one
// namespace; across namespaces both must admit the other's namespace, and a
// refusal names nothing of the other namespace (the CVE-2020-8554 class:
// a tenant's Service that joined prod's address would receive its traffic).
func TestSharingStaysInNamespace(t *testing.T) {
	web := Sharing{Key: "k", Ports: []Port{{Protocol: "TCP", Port: 443}}}
	evil := func(cross ...string) Sharing {
		return Sharing{Key: "k", Ports: []Port{{Protocol: "TCP", Port: 8443}}, CrossNamespace: cross}
	}
	withCross := func(sh Sharing, cross ...string) Sharing { sh.CrossNamespace = cross; return sh }
	tests := []struct {
		name      string
		holder    Sharing
		requester Sharing
		wantShare bool
	}{
		{"same key, no opt-in", web, evil(), false},
		{"only the requester admits the holder", web, evil("prod"), false},
		{"only the holder admits the requester", withCross(web, "evil"), evil(), false},
		{"both admit each other", withCross(web, "evil"), evil("prod"), true},
		{"holder admits every namespace, requester the holder", withCross(web, "*"), evil("prod"), true},
		{"holder admits another namespace", withCross(web, "staging"), evil("prod"), false},
		{"both admit, other keys", withCross(web, "evil"), Sharing{Key: "j", Ports: []Port{{Port: 8443}}, CrossNamespace: []string{"prod"}}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := newAllocator(t, mustPool(t, "p", spec("10.0.0.0/24")))
			ip := mustAllocate(t, a, Request{Service: "prod/web", Sharing: tt.holder}).IPs
			other := tt.requester
			other.Ports = []Port{{Protocol: "TCP", Port: 9443}}
			for _, req := range []Request{
				{Service: "evil/x", RequestedIPs: ip, Sharing: tt.requester}, // asks for prod's address
				{Service: "evil/y", Sharing: other},                          // same key, any address
			} {
				res, err := a.Allocate(req)
				switch {
				case tt.wantShare && (err != nil || res.IPs[0] != ip[0]):
					t.Fatalf("%s: got %v, %v; want to share %s", req.Service, res.IPs, err, ip[0])
				case !tt.wantShare && err == nil && res.IPs[0] == ip[0]:
					t.Fatalf("%s joined prod/web's %s", req.Service, ip[0])
				case err != nil:
					for _, secret := range []string{"prod/web", "web", `"k"`, "prod"} {
						if strings.Contains(err.Error(), secret) {
							t.Fatalf("%s's refusal names %q: %v", req.Service, secret, err)
						}
					}
					if x := a.Explain(req); !strings.Contains(x.Decision, "prod/web") {
						t.Fatalf("ExplainService (operators) does not name the holder: %q", x.Decision)
					}
				}
			}
		})
	}
}

// TestSharedAcrossNamespacesBeforeTheRuleIsKept: Services of two namespaces
// that shared an address before sharing was kept within a namespace keep it
// through a restart (Assign), say so, and nobody new joins.
func TestSharedAcrossNamespacesBeforeTheRuleIsKept(t *testing.T) {
	a := newAllocator(t, mustPool(t, "p", spec("10.0.0.0/24")))
	ip := addrs("10.0.0.7")
	web := Sharing{Key: "k", Ports: []Port{{Port: 443}}}
	old := Sharing{Key: "k", Ports: []Port{{Port: 8443}}}
	if err := a.Assign("prod/web", ip, web); err != nil {
		t.Fatal(err)
	}
	if err := a.Assign("team/old", ip, old); err != nil {
		t.Fatalf("restoring a share from before the rule: %v", err)
	}
	for _, s := range []struct {
		svc string
		sh  Sharing
	}{{"prod/web", web}, {"team/old", old}} {
		res, err := a.Allocate(Request{Service: s.svc, Sharing: s.sh})
		if err != nil || !slices.Equal(res.IPs, ip) || !slices.Equal(res.Across, ip) {
			t.Fatalf("%s: got %+v, %v; want it to keep %s, marked as shared across namespaces", s.svc, res, err, ip[0])
		}
		if x := a.Explain(Request{Service: s.svc, Sharing: s.sh}); x.Reason != ReasonHeldSharedAcrossNamespaces {
			t.Fatalf("%s explained as %s", s.svc, x.Reason)
		}
	}
	if res, err := a.Allocate(Request{Service: "team/new", Sharing: Sharing{Key: "k", Ports: []Port{{Port: 9000}}}}); err != nil || res.IPs[0] == ip[0] {
		t.Fatalf("a new Service of the old sharer's namespace got %v, %v; want another address", res.IPs, err)
	}
	// Opting in ends the condition.
	web.CrossNamespace, old.CrossNamespace = []string{"team"}, []string{"prod"}
	if err := a.Assign("prod/web", ip, web); err != nil {
		t.Fatal(err)
	}
	if res, err := a.Allocate(Request{Service: "team/old", Sharing: old}); err != nil || len(res.Across) != 0 {
		t.Fatalf("after both opted in: %+v, %v", res, err)
	}
}

func TestAutoAllocationDoesNotShareIncompatible(t *testing.T) {
	a := newAllocator(t, mustPool(t, "p", spec("10.0.0.0/24")))
	mustAllocate(t, a, Request{Service: "ns/one", Sharing: Sharing{Key: "k", Ports: []Port{{Port: 80}}}})
	res := mustAllocate(t, a, Request{Service: "ns/two", Sharing: Sharing{Key: "k", Ports: []Port{{Port: 80}}}})
	if res.IPs[0] != netip.MustParseAddr("10.0.0.1") {
		t.Fatalf("got %s, want a fresh IP because ports overlap", res.IPs[0])
	}
}

// TestMetalLB1984 replays the restart of MetalLB #1984 in the order the
// controller uses: ledger and status first, then requests, then pending.
func TestMetalLB1984(t *testing.T) {
	pools := func() []*Pool {
		return []*Pool{mustPool(t, "pool1", spec("192.0.2.1/32")), mustPool(t, "pool2", spec("192.0.2.2/32"))}
	}
	ip1, ip2 := netip.MustParseAddr("192.0.2.1"), netip.MustParseAddr("192.0.2.2")
	for restart := range 5 {
		a := newAllocator(t, pools()...)
		// A holds IP1 in its status.
		if err := a.Assign("ns/a", []netip.Addr{ip1}, Sharing{}); err != nil {
			t.Fatal(err)
		}
		// B only requests IP2 by annotation: claimed before anything is
		// allocated.
		a.Claim(Request{Service: "ns/b", RequestedIPs: []netip.Addr{ip2}})
		if restart%2 == 1 {
			// Variant: a pending Service is allocated before B. It must not
			// take IP2.
			if _, err := a.Allocate(Request{Service: "ns/c"}); reasonOf(err) != ReasonPoolExhausted {
				t.Fatalf("restart %d: C before B: err = %v, want PoolExhausted", restart, err)
			}
		}
		if res := mustAllocate(t, a, Request{Service: "ns/b", RequestedIPs: []netip.Addr{ip2}}); res.IPs[0] != ip2 {
			t.Fatalf("restart %d: B got %v", restart, res.IPs)
		}
		// C and D are pending (and were delivered first by the stream: it
		// does not matter, they are allocated last).
		for _, svc := range []string{"ns/c", "ns/d"} {
			_, err := a.Allocate(Request{Service: svc})
			if reasonOf(err) != ReasonPoolExhausted {
				t.Fatalf("restart %d: %s: err = %v, want PoolExhausted", restart, svc, err)
			}
			if x := a.Explain(Request{Service: svc}); x.Reason != ReasonPoolExhausted || len(x.Verdicts) != 2 || x.Verdicts[0].Reason != VerdictExhausted {
				t.Fatalf("restart %d: Explain = %+v", restart, x)
			}
		}
		if h := a.Holders(ip1); len(h) != 1 || h[0].Service != "ns/a" {
			t.Fatalf("IP1 holders = %+v", h)
		}
		if h := a.Holders(ip2); len(h) != 1 || h[0].Service != "ns/b" {
			t.Fatalf("IP2 holders = %+v", h)
		}
	}
}

// TestAssignNeverMovesAnIP: a status naming an IP the ledger gives to
// another Service is refused, naming the holder.
func TestAssignNeverMovesAnIP(t *testing.T) {
	a := newAllocator(t, mustPool(t, "p", spec("10.0.0.0/24")))
	ip := addrs("10.0.0.1")
	if err := a.Assign("ns/a", ip, Sharing{}); err != nil {
		t.Fatal(err)
	}
	if err := a.Assign("ns/a", ip, Sharing{}); err != nil {
		t.Fatalf("assigning again: %v", err)
	}
	err := a.Assign("ns/b", ip, Sharing{})
	var ae *Error
	if !errors.As(err, &ae) || ae.Reason != ReasonRequestedIPInUse || !slices.Equal(ae.Holders, []string{"ns/a"}) || !strings.Contains(ae.Message, "ns/a") {
		t.Fatalf("err = %v, want RequestedIPInUse naming ns/a", err)
	}
	if err := a.Assign("ns/a", addrs("10.0.0.2"), Sharing{}); reasonOf(err) != ReasonInvalidRequest {
		t.Fatalf("a second IPv4 for ns/a: err = %v", err)
	}
	// dual-stack in two calls
	if err := a.Assign("ns/a", addrs("2001:db8::1"), Sharing{}); err != nil {
		t.Fatal(err)
	}
	if got := a.Allocations("ns/a"); len(got) != 2 || got[1].Pool != "" {
		t.Fatalf("allocations = %+v (the IPv6 one is outside every pool: an orphan)", got)
	}
	// Assign is atomic: one bad IP, nothing assigned
	if err := a.Assign("ns/c", addrs("10.0.0.9", "2001:db8::1"), Sharing{}); err == nil {
		t.Fatal("want error")
	}
	if len(a.Holders(netip.MustParseAddr("10.0.0.9"))) != 0 {
		t.Fatal("a refused Assign left 10.0.0.9 held")
	}
}

func TestReservations(t *testing.T) {
	a := newAllocator(t, mustPool(t, "p", spec("10.0.0.0/30")))
	r0 := netip.MustParseAddr("10.0.0.0")
	if err := a.Reserve(Reservation{IP: r0, Note: "ops: router", ForService: "ns/router"}); err != nil {
		t.Fatal(err)
	}
	if err := a.Reserve(Reservation{IP: r0, Note: "ops: router", ForService: "ns/router"}); err != nil {
		t.Fatalf("same reservation again: %v", err)
	}
	if err := a.Reserve(Reservation{IP: r0, Note: "other"}); reasonOf(err) != ReasonRequestedIPInUse {
		t.Fatalf("different reservation: %v", err)
	}
	// never auto-assigned
	if got := mustAllocate(t, a, Request{Service: "ns/x"}).IPs[0]; got == r0 {
		t.Fatal("auto-assigned a reserved IP")
	}
	// requested by someone else
	_, err := a.Allocate(Request{Service: "ns/y", RequestedIPs: []netip.Addr{r0}})
	if reasonOf(err) != ReasonRequestedIPInUse || !strings.Contains(err.Error(), "reserved for Service ns/router") || strings.Contains(err.Error(), "ops: router") {
		t.Fatalf("err = %v, want the reservation named without its note", err)
	}
	if x := a.Explain(Request{Service: "ns/y", RequestedIPs: []netip.Addr{r0}}); !strings.Contains(x.Decision, `"ops: router"`) {
		t.Fatalf("ExplainService (operators) lost the note: %q", x.Decision)
	}
	if _, err := a.Allocate(Request{Service: "other/y", RequestedIPs: []netip.Addr{r0}}); err == nil || strings.Contains(err.Error(), "ns/router") || strings.Contains(err.Error(), "ops: router") {
		t.Fatalf("another namespace's refusal = %v, want it to name neither the Service nor the note", err)
	}
	// requested by the named Service
	if got := mustAllocate(t, a, Request{Service: "ns/router", RequestedIPs: []netip.Addr{r0}}).IPs[0]; got != r0 {
		t.Fatalf("got %s", got)
	}
	// releasing the Service keeps the reservation
	a.Release("ns/router")
	if _, ok := a.Reservation(r0); !ok {
		t.Fatal("reservation lost")
	}
	if u, _ := a.Usage("p"); u.IPv4.Used.Int64() != 2 {
		t.Fatalf("used = %s, want 2 (one held, one reserved)", u.IPv4.Used)
	}
	// reserving an IP someone holds
	if err := a.Reserve(Reservation{IP: netip.MustParseAddr("10.0.0.1"), Note: "n"}); reasonOf(err) != ReasonRequestedIPInUse || !strings.Contains(err.Error(), "ns/x") {
		t.Fatalf("err = %v", err)
	}
	// unreserve lets the waiting requester take it
	if _, ok := a.Unreserve(r0); !ok {
		t.Fatal("Unreserve")
	}
	if got := mustAllocate(t, a, Request{Service: "ns/y", RequestedIPs: []netip.Addr{r0}}).IPs[0]; got != r0 {
		t.Fatalf("got %s", got)
	}
	if _, ok := a.Unreserve(r0); ok {
		t.Fatal("Unreserve twice")
	}
	// a reservation outside every pool is fine
	if err := a.Reserve(Reservation{IP: netip.MustParseAddr("192.0.2.1"), Note: "n"}); err != nil {
		t.Fatal(err)
	}
}

func TestPoolChanges(t *testing.T) {
	ip := netip.MustParseAddr
	t.Run("grow", func(t *testing.T) {
		a := newAllocator(t, mustPool(t, "p", spec("10.0.0.0/32")))
		mustAllocate(t, a, Request{Service: "ns/a"})
		if _, err := a.Allocate(Request{Service: "ns/b"}); reasonOf(err) != ReasonPoolExhausted {
			t.Fatal(err)
		}
		upd := a.SetPools([]*Pool{mustPool(t, "p", spec("10.0.0.0/31"))})
		if len(upd.Conflicts) != 0 || len(a.HeldOutside()) != 0 {
			t.Fatalf("update = %+v, held outside %v", upd, a.HeldOutside())
		}
		if got := mustAllocate(t, a, Request{Service: "ns/b"}).IPs[0]; got != ip("10.0.0.1") {
			t.Fatalf("got %s", got)
		}
	})
	t.Run("shrink leaves orphans held", func(t *testing.T) {
		a := newAllocator(t, mustPool(t, "p", spec("10.0.0.0/30")))
		for _, s := range []string{"ns/a", "ns/b", "ns/c"} {
			mustAllocate(t, a, Request{Service: s})
		}
		a.SetPools([]*Pool{mustPool(t, "p", spec("10.0.0.0/31"))})
		if got := a.Allocations("ns/c"); len(got) != 1 || got[0].IP != ip("10.0.0.2") || got[0].Pool != "" || got[0].From != "p" || a.HeldOutside()["p"] != 1 {
			t.Fatalf("ns/c holds %+v, held outside %v; want 10.0.0.2 kept outside pool p", got, a.HeldOutside())
		}
		if u, _ := a.Usage("p"); u.IPv4.Used.Int64() != 2 || u.IPv4.Total.Int64() != 2 {
			t.Fatalf("usage = %v/%v", u.IPv4.Used, u.IPv4.Total)
		}
		// still held: growing back does not hand it to someone else
		a.SetPools([]*Pool{mustPool(t, "p", spec("10.0.0.0/30"))})
		if got := a.Allocations("ns/c"); got[0].Pool != "p" || len(a.HeldOutside()) != 0 {
			t.Fatalf("ns/c holds %+v after the pool grew back", got)
		}
		if got := mustAllocate(t, a, Request{Service: "ns/d"}).IPs[0]; got != ip("10.0.0.3") {
			t.Fatalf("got %s", got)
		}
		// an orphan is kept, held outside its pool: never moved, never given away
		a.SetPools([]*Pool{mustPool(t, "p", spec("10.0.0.0/31")), mustPool(t, "q", spec("10.0.1.0/30"))})
		res, err := a.Allocate(Request{Service: "ns/c"})
		if err != nil || res.Outside == "" || res.New || len(res.IPs) != 1 || res.IPs[0] != ip("10.0.0.2") {
			t.Fatalf("res = %+v, err = %v; want 10.0.0.2 kept outside its pool", res, err)
		}
		if x := a.Explain(Request{Service: "ns/c"}); x.Reason != ReasonHeldOutsidePool || !strings.Contains(x.Decision, "10.0.0.2 is no longer in any serving IPPool") {
			t.Fatalf("explain = %+v", x)
		}
		// the owner asks for something else: now it moves
		if _, err := a.Allocate(Request{Service: "ns/c", Pool: "q"}); !IsUnfit(err) {
			t.Fatalf("err = %v, want ErrHeldAddressUnfit", err)
		}
	})
	t.Run("rename", func(t *testing.T) {
		a := newAllocator(t, mustPool(t, "old", spec("10.0.0.0/30")))
		mustAllocate(t, a, Request{Service: "ns/a"})
		a.SetPools([]*Pool{mustPool(t, "new", spec("10.0.0.0/30"))})
		if got := a.Allocations("ns/a"); len(got) != 1 || got[0].Pool != "new" || got[0].From != "old" {
			t.Fatalf("ns/a holds %+v, want its address in pool new, handed out from old", got)
		}
		if res := mustAllocate(t, a, Request{Service: "ns/a"}); res.New || res.Pool != "new" {
			t.Fatalf("res = %+v", res)
		}
		if _, ok := a.Usage("old"); ok {
			t.Fatal("usage of a deleted pool")
		}
	})
	t.Run("overlap: the newer pool is Conflicting", func(t *testing.T) {
		older := spec("10.0.0.0/24")
		newer := spec("10.0.0.128/25", "10.0.5.0/24")
		newer.CreatedAt = t0.Add(time.Hour)
		newer.Priority = 1
		a := New()
		upd := a.SetPools([]*Pool{mustPool(t, "newer", newer), mustPool(t, "older", older)})
		if len(upd.Conflicts) != 1 || upd.Conflicts[0].Pool != "newer" || upd.Conflicts[0].With != "older" ||
			!strings.Contains(upd.Conflicts[0].Message, "older pool older") {
			t.Fatalf("conflicts = %+v", upd.Conflicts)
		}
		// serves nothing, even its own non-overlapping part
		if _, ok := a.PoolOf(ip("10.0.5.1")); ok {
			t.Fatal("a Conflicting pool serves")
		}
		if _, err := a.Allocate(Request{Service: "ns/x", RequestedIPs: addrs("10.0.5.1")}); reasonOf(err) != ReasonRequestedIPNotInPool ||
			!strings.Contains(err.Error(), "Conflicting") {
			t.Fatalf("err = %v", err)
		}
		if _, err := a.Allocate(Request{Service: "ns/x", Pool: "newer"}); reasonOf(err) != ReasonNoMatchingPool {
			t.Fatalf("err = %v", err)
		}
		if res := mustAllocate(t, a, Request{Service: "ns/x"}); res.Pool != "older" {
			t.Fatalf("res = %+v", res)
		}
		if u, _ := a.Usage("newer"); u.IPv4.Used.Sign() != 0 || u.IPv4.Total.Int64() != 384 {
			t.Fatalf("usage = %+v", u)
		}
		// equal age: the name decides
		same := spec("10.0.0.0/24")
		upd = New().SetPools([]*Pool{mustPool(t, "b", same), mustPool(t, "a", same)})
		if len(upd.Conflicts) != 1 || upd.Conflicts[0].Pool != "b" {
			t.Fatalf("conflicts = %+v", upd.Conflicts)
		}
		// the older pool goes away: the newer one serves, IPs move to it
		a.Assign("ns/y", addrs("10.0.0.200"), Sharing{})
		upd = a.SetPools([]*Pool{mustPool(t, "newer", newer)})
		if len(upd.Conflicts) != 0 || a.HeldOutside()["older"] != 1 || a.Allocations("ns/x")[0].Pool != "" || a.Allocations("ns/y")[0].Pool != "newer" {
			t.Fatalf("update = %+v, held outside %v, x %+v, y %+v", upd, a.HeldOutside(), a.Allocations("ns/x"), a.Allocations("ns/y"))
		}

	})
}

func TestHeldAddresses(t *testing.T) {
	both := spec("10.0.0.0/24", "2001:db8::/64")
	a := newAllocator(t, mustPool(t, "a", both), mustPool(t, "b", spec("10.0.1.0/24")))
	res := mustAllocate(t, a, Request{Service: "ns/s", Families: []Family{IPv4, IPv6}})
	if !res.New || len(res.IPs) != 1 {
		t.Fatalf("res = %+v", res)
	}
	if again := mustAllocate(t, a, Request{Service: "ns/s", Families: []Family{IPv4, IPv6}}); again.New || again.IPs[0] != res.IPs[0] {
		t.Fatalf("again = %+v", again)
	}
	// upgrade to dual-stack keeps the IPv4 and adds an IPv6 from the same pool
	up := mustAllocate(t, a, Request{Service: "ns/s", FamilyPolicy: RequireDualStack, Families: []Family{IPv4, IPv6}})
	if !up.New || len(up.IPs) != 2 || up.IPs[0] != res.IPs[0] || up.Pool != "a" {
		t.Fatalf("up = %+v", up)
	}
	// back to single stack: the IPv6 no longer fits
	if _, err := a.Allocate(Request{Service: "ns/s", Families: []Family{IPv4}}); !IsUnfit(err) {
		t.Fatalf("err = %v", err)
	}
	// naming another pool: unfit; nothing released by Allocate
	if _, err := a.Allocate(Request{Service: "ns/s", FamilyPolicy: RequireDualStack, Families: []Family{IPv4, IPv6}, Pool: "b"}); !IsUnfit(err) {
		t.Fatalf("err = %v", err)
	}
	if len(a.Allocations("ns/s")) != 2 {
		t.Fatal("Allocate released something")
	}
	x := a.Explain(Request{Service: "ns/s", Pool: "b"})
	if x.Reason != ReasonAllocated || !strings.Contains(x.Decision, "release it and choose again") {
		t.Fatalf("explain = %+v", x)
	}
	// requesting a different IP: unfit
	if _, err := a.Allocate(Request{Service: "ns/s", FamilyPolicy: RequireDualStack, Families: []Family{IPv4, IPv6}, RequestedIPs: addrs("10.0.0.77")}); !IsUnfit(err) {
		t.Fatalf("err = %v", err)
	}
	// the controller's answer: release, then allocate
	a.Release("ns/s")
	if got := mustAllocate(t, a, Request{Service: "ns/s", Pool: "b"}); got.Pool != "b" {
		t.Fatalf("got %+v", got)
	}
}

func TestExplain(t *testing.T) {
	manual := spec("10.0.3.0/24")
	manual.AutoAssign = false
	team := spec("10.0.4.0/24")
	team.Namespaces = []string{"team"}
	web := spec("10.0.5.0/24")
	web.ServiceSelectors = []Selector{{MatchLabels: map[string]string{"tier": "web"}}}
	a := newAllocator(t,
		mustPool(t, "full", spec("10.0.1.0/32")),
		mustPool(t, "open", spec("10.0.2.0/24")),
		mustPool(t, "manual", manual),
		mustPool(t, "team", team),
		mustPool(t, "web", web),
		mustPool(t, "v6", spec("2001:db8::/64")),
	)
	late := spec("10.0.2.128/25")
	late.CreatedAt = t0.Add(time.Hour)
	all := append([]*Pool{}, a.pools.byName["full"], a.pools.byName["open"], a.pools.byName["manual"], a.pools.byName["team"], a.pools.byName["web"], a.pools.byName["v6"], mustPool(t, "late", late))
	a.SetPools(all)
	mustAllocate(t, a, Request{Service: "x/filler", Pool: "full"})

	x := a.Explain(Request{Service: "ns/s", Families: []Family{IPv4}})
	got := map[string]VerdictReason{}
	var order []string
	for _, v := range x.Verdicts {
		got[v.Pool] = v.Reason
		order = append(order, v.Pool)
		if v.Message == "" {
			t.Errorf("verdict for %s has no message", v.Pool)
		}
	}
	want := map[string]VerdictReason{
		"team": VerdictNamespaceMismatch, "web": VerdictServiceSelectorMismatch, "full": VerdictExhausted,
		"manual": VerdictAutoAssignOff, "open": VerdictSelected, "v6": VerdictFamilyMismatch, "late": VerdictConflicting,
	}
	for p, r := range want {
		if got[p] != r {
			t.Errorf("verdict for %s = %s, want %s", p, got[p], r)
		}
	}
	if wantOrder := []string{"team", "web", "full", "manual", "open", "v6", "late"}; !slices.Equal(order, wantOrder) {
		t.Errorf("order = %v, want %v (pinned first, then name; Conflicting last)", order, wantOrder)
	}
	if x.Reason != ReasonAllocated || x.Decision != "The Service gets 10.0.2.0 from pool open." {
		t.Errorf("decision = %s %q", x.Reason, x.Decision)
	}
	// Explain changes nothing
	if len(a.Allocations("ns/s")) != 0 {
		t.Fatal("Explain allocated")
	}
	// a requested IP in use
	mustAllocate(t, a, Request{Service: "ns/holder", RequestedIPs: addrs("10.0.2.9")})
	x = a.Explain(Request{Service: "ns/s", RequestedIPs: addrs("10.0.2.9")})
	if x.Reason != ReasonRequestedIPInUse || !strings.Contains(x.Decision, "held by Service ns/holder") {
		t.Errorf("explain = %+v", x)
	}
	for _, v := range x.Verdicts {
		if v.Pool == "open" && v.Reason != VerdictRequestedIPInUse || v.Pool == "web" && v.Reason != VerdictRequestedIPNotInPool {
			t.Errorf("verdict %+v", v)
		}
	}
	// a Service holding its IP
	x = a.Explain(Request{Service: "ns/holder", RequestedIPs: addrs("10.0.2.9")})
	if x.Reason != ReasonAllocated || x.Decision != "The Service holds 10.0.2.9 from pool open." || len(x.IPs) != 1 {
		t.Errorf("explain = %+v", x)
	}
	// NotChosen
	x = a.Explain(Request{Service: "team/s"})
	for _, v := range x.Verdicts {
		if v.Pool == "open" && (v.Reason != VerdictNotChosen || !v.Eligible || !strings.Contains(v.Message, "pool team ranks first")) {
			t.Errorf("verdict %+v", v)
		}
	}
}

func TestUsageBigPools(t *testing.T) {
	a := newAllocator(t, mustPool(t, "big", spec("2001:db8::/64", "10.0.0.0/8")))
	for i := range 3 {
		mustAllocate(t, a, Request{Service: fmt.Sprintf("ns/s%d", i), FamilyPolicy: RequireDualStack, Families: []Family{IPv6, IPv4}})
	}
	u, _ := a.Usage("big")
	v6Total := new(big.Int).Sub(bigPow2(64), big.NewInt(1)) // without the Subnet-Router anycast
	if u.IPv6.Total.Cmp(v6Total) != 0 || u.IPv6.Used.Int64() != 3 || u.IPv4.Total.Int64() != 1<<24 || u.IPv4.Used.Int64() != 3 {
		t.Fatalf("usage = v4 %s/%s v6 %s/%s", u.IPv4.Used, u.IPv4.Total, u.IPv6.Used, u.IPv6.Total)
	}
	// the returned numbers are copies
	u.IPv6.Total.SetInt64(0)
	if u2, _ := a.Usage("big"); u2.IPv6.Total.Cmp(v6Total) != 0 {
		t.Fatal("Usage returned shared big.Ints")
	}
	// exhausting the tail of a /64 without scanning it
	tail := mustPool(t, "tail", spec("2001:db8:1::/64"))
	b := newAllocator(t, tail)
	last := netip.MustParseAddr("2001:db8:1::ffff:ffff:ffff:ffff")
	if err := b.Assign("ns/first", addrs("2001:db8:1::1"), Sharing{}); err != nil {
		t.Fatal(err)
	}
	if got := mustAllocate(t, b, Request{Service: "ns/x", Families: []Family{IPv6}}).IPs[0]; got != netip.MustParseAddr("2001:db8:1::2") {
		t.Fatalf("got %s", got)
	}
	if _, err := b.Allocate(Request{Service: "ns/y", RequestedIPs: []netip.Addr{last}}); err != nil {
		t.Fatal(err)
	}
	if u, _ := b.Usage("tail"); u.IPv6.Used.Int64() != 3 || new(big.Int).Sub(u.IPv6.Total, u.IPv6.Used).Cmp(new(big.Int).Sub(bigPow2(64), big.NewInt(4))) != 0 { // 3 used, the anycast never
		t.Fatalf("usage = %+v", u)
	}
}

func TestNamedPoolFullDoesNotSpillOver(t *testing.T) {
	a := newAllocator(t, mustPool(t, "a", spec("10.0.1.0/24")), mustPool(t, "b", spec("10.0.2.0/32")))
	mustAllocate(t, a, Request{Service: "ns/first", Pool: "b"})
	_, err := a.Allocate(Request{Service: "ns/second", Pool: "b"})
	if reasonOf(err) != ReasonPoolExhausted || !strings.Contains(err.Error(), "pool b has no free IPv4 address (1 of 1 in use)") {
		t.Fatalf("err = %v", err)
	}
}

func TestHeldButMissingFamilyExhausted(t *testing.T) {
	a := newAllocator(t, mustPool(t, "a", spec("10.0.0.0/24", "2001:db8::/128")))
	mustAllocate(t, a, Request{Service: "ns/other", Families: []Family{IPv6}})
	mustAllocate(t, a, Request{Service: "ns/s"})
	req := Request{Service: "ns/s", FamilyPolicy: RequireDualStack, Families: []Family{IPv4, IPv6}}
	if _, err := a.Allocate(req); reasonOf(err) != ReasonPoolExhausted {
		t.Fatalf("err = %v", err)
	}
	if len(a.Allocations("ns/s")) != 1 {
		t.Fatal("lost the IPv4")
	}
	x := a.Explain(req)
	if x.Reason != ReasonAllocated || x.Decision != "The Service keeps 10.0.0.0, but pool a has no free IPv6 address (1 of 1 in use)." {
		t.Fatalf("explain = %+v", x)
	}
	// PreferDualStack is content with what it has
	if res := mustAllocate(t, a, Request{Service: "ns/s", FamilyPolicy: PreferDualStack, Families: []Family{IPv4, IPv6}}); res.New {
		t.Fatalf("res = %+v", res)
	}
}

func TestListAndReservations(t *testing.T) {
	a := newAllocator(t, mustPool(t, "p", spec("10.0.0.0/24", "2001:db8::/64")))
	for i := range 5 {
		mustAllocate(t, a, Request{Service: fmt.Sprintf("ns/s%d", i), FamilyPolicy: RequireDualStack, Families: []Family{IPv4, IPv6}, Sharing: Sharing{Key: "k", Ports: []Port{{Port: int32(80 + i)}}}})
	}
	// s0..s4 share 10.0.0.0 and 2001:db8::1 (same key, different ports)
	mustAllocate(t, a, Request{Service: "ns/solo", RequestedIPs: addrs("10.0.0.200")})
	a.Reserve(Reservation{IP: netip.MustParseAddr("10.0.0.100"), Note: "spare"})
	a.Reserve(Reservation{IP: netip.MustParseAddr("10.0.0.7"), Note: "hold"})
	all := a.List(netip.Addr{}, 0)
	if len(all) != 11 || all[0].IP.String() != "10.0.0.0" || all[5].IP.String() != "10.0.0.200" || all[10].IP.String() != "2001:db8::1" {
		t.Fatalf("List = %+v", all)
	}
	var paged []Allocation
	var after netip.Addr
	for {
		page := a.List(after, 1)
		if len(page) == 0 {
			break
		}
		paged = append(paged, page...)
		after = page[len(page)-1].IP
	}
	if fmt.Sprint(paged) != fmt.Sprint(all) {
		t.Fatalf("paged = %v\nall = %v", paged, all)
	}
	if last := a.List(netip.MustParseAddr("255.255.255.255"), 0); len(last) != 5 {
		t.Fatalf("after the last IPv4: %v", last)
	}
	rs := a.Reservations()
	if len(rs) != 2 || rs[0].Note != "hold" || rs[1].Note != "spare" {
		t.Fatalf("reservations = %+v", rs)
	}
}

// TestSharingKeyChange: a Service re-assigned with a new sharing key is no
// longer found under the old one.
func TestSharingKeyChange(t *testing.T) {
	a := newAllocator(t, mustPool(t, "p", spec("10.0.0.0/24")))
	ip := addrs("10.0.0.3")
	if err := a.Assign("ns/a", ip, Sharing{Key: "old", Ports: []Port{{Port: 80}}}); err != nil {
		t.Fatal(err)
	}
	if err := a.Assign("ns/a", ip, Sharing{Key: "new", Ports: []Port{{Port: 80}}}); err != nil {
		t.Fatal(err)
	}
	if _, ok := a.idx.byShare["old"]; ok {
		t.Fatal("IP still listed under the old key")
	}
	if got := mustAllocate(t, a, Request{Service: "ns/b", Sharing: Sharing{Key: "old", Ports: []Port{{Port: 443}}}}).IPs[0]; got == ip[0] {
		t.Fatal("shared under a key its holder no longer has")
	}
	if got := mustAllocate(t, a, Request{Service: "ns/c", Sharing: Sharing{Key: "new", Ports: []Port{{Port: 443}}}}).IPs[0]; got != ip[0] {
		t.Fatalf("got %s, want the shared %s", got, ip[0])
	}
}

// TestClaimsProtectRequestedIPs: the half of MetalLB #1984 its fix missed.
// B only requests IP2; a dual-stack Service allocated before B must not take
// IP2 for its auto-assigned family, nor may a pending Service.
func TestClaimsProtectRequestedIPs(t *testing.T) {
	a := newAllocator(t, mustPool(t, "p", spec("192.0.2.1-192.0.2.2", "2001:db8::1-2001:db8::2")))
	a.Claim(Request{Service: "ns/b", RequestedIPs: addrs("192.0.2.1")})
	a.Claim(Request{Service: "ns/e", RequestedIPs: addrs("2001:db8::1")})
	// E requests its IPv6 and needs an IPv4 too: it must skip B's IP.
	res := mustAllocate(t, a, Request{Service: "ns/e", FamilyPolicy: RequireDualStack, Families: []Family{IPv4, IPv6}, RequestedIPs: addrs("2001:db8::1")})
	if res.IPs[0] != netip.MustParseAddr("192.0.2.2") {
		t.Fatalf("E got %v, want 192.0.2.2 (192.0.2.1 is requested by B)", res.IPs)
	}
	_, err := a.Allocate(Request{Service: "ns/pending"})
	if reasonOf(err) != ReasonPoolExhausted || !strings.Contains(err.Error(), "the others are requested by other Services") {
		t.Fatalf("pending: err = %v", err)
	}
	if got := mustAllocate(t, a, Request{Service: "ns/b", RequestedIPs: addrs("192.0.2.1")}); got.IPs[0] != netip.MustParseAddr("192.0.2.1") {
		t.Fatalf("B got %v", got.IPs)
	}
	// B stops requesting (and is released): the IP is free for anyone.
	a.Release("ns/b")
	if got := mustAllocate(t, a, Request{Service: "ns/pending"}); got.IPs[0] != netip.MustParseAddr("192.0.2.1") {
		t.Fatalf("pending got %v", got.IPs)
	}
	// Claim replaces; nil clears.
	a.Claim(Request{Service: "ns/x", RequestedIPs: addrs("2001:db8::2")})
	a.Claim(Request{Service: "ns/x"})
	if got := mustAllocate(t, a, Request{Service: "ns/v6", Families: []Family{IPv6}}); got.IPs[0] != netip.MustParseAddr("2001:db8::2") {
		t.Fatalf("got %v", got.IPs)
	}
	if a.idx.claimed.len() != 1 {
		t.Fatalf("claimed = %v, want only E's", a.idx.claimed.ranges())
	}
}

// An address another controller gave out (the status of a Service ipam does
// not serve) is handed to nobody — automatically, on request, by sharing —
// until that status lets it go.
func TestForeignAddressesAreNeverHandedOut(t *testing.T) {
	a := newAllocator(t, mustPool(t, "p", spec("10.0.0.0/30")))
	a.SetForeign("ns/metallb", addrs("10.0.0.0"))
	if got := mustAllocate(t, a, Request{Service: "ns/auto"}).IPs[0].String(); got != "10.0.0.1" {
		t.Fatalf("auto allocation got %s, want 10.0.0.1 (10.0.0.0 is in another controller's status)", got)
	}
	_, err := a.Allocate(Request{Service: "ns/asker", RequestedIPs: addrs("10.0.0.0")})
	if reasonOf(err) != ReasonRequestedIPInUse || !strings.Contains(err.Error(), "ns/metallb") {
		t.Fatalf("request of a foreign address: err = %v, want RequestedIPInUse naming ns/metallb", err)
	}
	if err := a.Assign("ns/sharer", addrs("10.0.0.0"), Sharing{Key: "k"}); reasonOf(err) != ReasonRequestedIPInUse {
		t.Fatalf("assign of a foreign address: err = %v, want RequestedIPInUse", err)
	}
	if u, _ := a.Usage("p"); u.IPv4.Used.Int64() != 2 {
		t.Fatalf("used = %v, want 2 (one foreign, one held)", u.IPv4.Used)
	}
	a.SetForeign("ns/metallb", addrs("10.0.0.2")) // its status moved
	if got := mustAllocate(t, a, Request{Service: "ns/asker", RequestedIPs: addrs("10.0.0.0")}).IPs[0].String(); got != "10.0.0.0" {
		t.Fatalf("after the foreign status moved, the request got %s", got)
	}
	a.SetForeign("ns/metallb", nil)
	// 10.0.0.2 is free again, but was in use: the never-used .3 goes first.
	if got := mustAllocate(t, a, Request{Service: "ns/next"}).IPs[0].String(); got != "10.0.0.3" {
		t.Fatalf("after the foreign status cleared, auto allocation got %s, want 10.0.0.3", got)
	}
	if u, _ := a.Usage("p"); u.IPv4.Used.Int64() != 3 {
		t.Fatalf("used = %v, want 3", u.IPv4.Used)
	}
}

// A foreign mark never takes an address from a Service ipam serves.
func TestForeignMarkKeepsOurHolder(t *testing.T) {
	a := newAllocator(t, mustPool(t, "p", spec("10.0.0.0/30")))
	mustAllocate(t, a, Request{Service: "ns/ours"})
	a.SetForeign("ns/other", addrs("10.0.0.0"))
	if got := a.Allocations("ns/ours"); len(got) != 1 || got[0].IP.String() != "10.0.0.0" {
		t.Fatalf("ns/ours holds %+v", got)
	}
	a.Release("ns/ours")
	if _, err := a.Allocate(Request{Service: "ns/third", RequestedIPs: addrs("10.0.0.0")}); reasonOf(err) != ReasonRequestedIPInUse {
		t.Fatalf("released, but still in another controller's status: err = %v, want RequestedIPInUse", err)
	}
}
