package plan

import (
	"errors"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ipledger/ipledger/pkg/stream/objkey"
	watcherv1 "github.com/ipledger/ipledger/proto/ipledger/watcher/v1"
	"github.com/ipledger/ipledger/services/ipam/internal/allocator"
	"github.com/ipledger/ipledger/services/ipam/internal/ledger"
	"github.com/ipledger/ipledger/services/ipam/internal/objects"
)

func pool(t *testing.T, name, addr string) *allocator.Pool {
	t.Helper()
	p, err := allocator.ParsePool(name, allocator.PoolSpec{Addresses: []string{addr}, AutoAssign: true, CreatedAt: time.Unix(1, 0)})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

type svcOpt func(*watcherv1.Object)

func svc(name string, created int64, opts ...svcOpt) *watcherv1.Object {
	o := &watcherv1.Object{
		Kind: watcherv1.Kind_KIND_SERVICE,
		Meta: &watcherv1.ObjectMeta{Namespace: "ns", Name: name, Uid: "uid-" + name, CreationTimestamp: created, Annotations: map[string]string{}},
		Body: &watcherv1.Object_Service{Service: &watcherv1.Service{Type: "LoadBalancer", IpFamilies: []string{"IPv4"}}},
	}
	for _, f := range opts {
		f(o)
	}
	return o
}

func withStatus(ip string) svcOpt {
	return func(o *watcherv1.Object) {
		o.GetService().Ingress = append(o.GetService().Ingress, &watcherv1.LoadBalancerIngress{Ip: ip, IpMode: "VIP"})
	}
}

func withAnnotation(k, v string) svcOpt {
	return func(o *watcherv1.Object) { o.Meta.Annotations[k] = v }
}

func withClass(c string) svcOpt {
	return func(o *watcherv1.Object) { o.GetService().LoadBalancerClass = c }
}

// allocatePending does what the controller does after the rebuild.
func allocatePending(r Rebuilt, services []*watcherv1.Object) map[string]string {
	out := map[string]string{}
	for _, s := range services {
		req, _ := objects.Request(s, objects.Env{})
		res, err := r.Alloc.Allocate(req)
		var ae *allocator.Error
		switch {
		case err == nil:
			out[objkey.Of(s)] = res.IPs[0].String()
		case errors.As(err, &ae):
			out[objkey.Of(s)] = string(ae.Reason)
		default:
			out[objkey.Of(s)] = err.Error()
		}
	}
	return out
}

// MetalLB #1984 and its request variant: pending Services that come first
// (older, or listed first) must never take an IP another Service's status or
// request names.
func TestRebuildNeverHandsOutANamedIP(t *testing.T) {
	pools := []*allocator.Pool{pool(t, "one", "10.0.0.1/32"), pool(t, "two", "10.0.0.2/32")}
	for _, tc := range []struct {
		name     string
		ledger   []ledger.Allocation
		services []*watcherv1.Object
		want     map[string]string
	}{
		{
			name: "status and annotation request, pending first",
			services: []*watcherv1.Object{
				svc("c", 1), svc("d", 2),
				svc("a", 3, withStatus("10.0.0.1")),
				svc("b", 4, withAnnotation(allocator.AnnotationLoadBalancerIPs, "10.0.0.2")),
			},
			want: map[string]string{"ns/a": "10.0.0.1", "ns/b": "10.0.0.2", "ns/c": "PoolExhausted", "ns/d": "PoolExhausted"},
		},
		{
			name: "metallb annotation and spec.loadBalancerIP spellings",
			services: []*watcherv1.Object{
				svc("c", 1), svc("d", 2),
				svc("a", 3, func(o *watcherv1.Object) { o.GetService().LoadBalancerIp = "10.0.0.1" }),
				svc("b", 4, withAnnotation("metallb.universe.tf/loadBalancerIPs", "10.0.0.2")),
			},
			want: map[string]string{"ns/a": "10.0.0.1", "ns/b": "10.0.0.2", "ns/c": "PoolExhausted", "ns/d": "PoolExhausted"},
		},
		{
			name:   "wiped status: the ledger still names A",
			ledger: []ledger.Allocation{{IP: netip.MustParseAddr("10.0.0.1"), Pool: "one", Service: ledger.ServiceRef{Namespace: "ns", Name: "a"}}},
			services: []*watcherv1.Object{
				svc("c", 1), svc("a", 3),
			},
			want: map[string]string{"ns/a": "10.0.0.1", "ns/c": "10.0.0.2"},
		},
		{
			name:   "ledger beats a status naming the same IP",
			ledger: []ledger.Allocation{{IP: netip.MustParseAddr("10.0.0.1"), Pool: "one", Service: ledger.ServiceRef{Namespace: "ns", Name: "a"}}},
			services: []*watcherv1.Object{
				svc("x", 1, withStatus("10.0.0.1")), svc("a", 3),
			},
			want: map[string]string{"ns/a": "10.0.0.1", "ns/x": "10.0.0.2"},
		},
		{
			name:   "ledger entry of a Service the stream does not show yet stays held",
			ledger: []ledger.Allocation{{IP: netip.MustParseAddr("10.0.0.1"), Pool: "one", Service: ledger.ServiceRef{Namespace: "ns", Name: "new"}}},
			services: []*watcherv1.Object{
				svc("c", 1), svc("d", 2),
			},
			want: map[string]string{"ns/c": "10.0.0.2", "ns/d": "PoolExhausted"},
		},
		{
			name: "another class's Service is not ours, nor is the address its controller gave it",
			services: []*watcherv1.Object{
				svc("c", 1), svc("other", 0, withClass("example.com/lb"), withStatus("10.0.0.1")),
			},
			want: map[string]string{"ns/c": "10.0.0.2"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var ours []*watcherv1.Object
			for _, s := range tc.services {
				if (objects.Class{Name: objects.DefaultLBClass}).Serves(s) {
					ours = append(ours, s)
				}
			}
			// Whatever order the stream delivers, the result is the same.
			for _, order := range [][]*watcherv1.Object{tc.services, reversed(tc.services)} {
				r := Rebuild(Inputs{Ledger: ledger.State{Allocations: tc.ledger}, Pools: pools, Services: slices.Values(order), LBClass: objects.DefaultLBClass})
				got := allocatePending(r, ours)
				for k, v := range tc.want {
					if got[k] != v {
						t.Errorf("%s: got %s, want %s (all: %v)", k, got[k], v, got)
					}
				}
			}
		})
	}
}

func reversed(in []*watcherv1.Object) []*watcherv1.Object {
	out := make([]*watcherv1.Object, len(in))
	for i, o := range in {
		out[len(in)-1-i] = o
	}
	return out
}

func TestRebuildReportsConflicts(t *testing.T) {
	pools := []*allocator.Pool{pool(t, "one", "10.0.0.0/30")}
	r := Rebuild(Inputs{
		Pools: pools,
		Services: slices.Values([]*watcherv1.Object{
			svc("first", 1, withStatus("10.0.0.1")),
			svc("second", 2, withStatus("10.0.0.1")),
			svc("req", 3, withAnnotation(allocator.AnnotationLoadBalancerIPs, "10.0.0.1")),
		}),
		LBClass: objects.DefaultLBClass,
	})
	if len(r.Conflicts) != 2 || r.Conflicts[0].Service != "ns/second" || r.Conflicts[0].Source != FromStatus ||
		r.Conflicts[1].Service != "ns/req" || r.Conflicts[1].Source != FromRequest {
		t.Fatalf("conflicts = %+v", r.Conflicts)
	}
	if got := r.Alloc.Allocations("ns/first"); len(got) != 1 || got[0].IP != netip.MustParseAddr("10.0.0.1") {
		t.Fatalf("ns/first holds %+v, want 10.0.0.1 from its status", got)
	}
}

func TestReservationNeverAutoAssigned(t *testing.T) {
	pools := []*allocator.Pool{pool(t, "one", "10.0.0.1/32")}
	st := ledger.State{Reservations: []ledger.Reservation{{IP: netip.MustParseAddr("10.0.0.1"), Note: "lab"}}}
	r := Rebuild(Inputs{Ledger: st, Pools: pools, Services: slices.Values([]*watcherv1.Object{svc("c", 1)}), LBClass: objects.DefaultLBClass})
	if got := allocatePending(r, []*watcherv1.Object{svc("c", 1)}); got["ns/c"] != "PoolExhausted" {
		t.Fatalf("pending Service got %v", got)
	}
}

// A dual-stack requester asking only for its IPv4 address has its IPv6
// address filled from the pool; that fill must skip the IPv6 address a
// younger Service requests, or the younger one would find it taken.
func TestRebuildFillsAroundRequestedIPs(t *testing.T) {
	p, err := allocator.ParsePool("dual", allocator.PoolSpec{
		Addresses: []string{"10.0.0.0/30", "fd00::-fd00::3"}, AutoAssign: true, CreatedAt: time.Unix(1, 0),
	})
	if err != nil {
		t.Fatal(err)
	}
	dualStack := func(o *watcherv1.Object) {
		o.GetService().IpFamilyPolicy = "RequireDualStack"
		o.GetService().IpFamilies = []string{"IPv4", "IPv6"}
	}
	older := svc("older", 1, dualStack, withAnnotation("ipledger.io/loadBalancerIPs", "10.0.0.1"))
	younger := svc("younger", 2, withAnnotation("ipledger.io/loadBalancerIPs", "fd00::"), func(o *watcherv1.Object) {
		o.GetService().IpFamilies = []string{"IPv6"}
	})
	r := Rebuild(Inputs{Pools: []*allocator.Pool{p}, Services: slices.Values([]*watcherv1.Object{older, younger}), LBClass: "ipledger.io/lb"})
	if len(r.Conflicts) != 0 {
		t.Fatalf("conflicts: %+v", r.Conflicts)
	}
	for _, a := range r.Alloc.Allocations("ns/older") {
		if a.IP == netip.MustParseAddr("fd00::") {
			t.Fatalf("older was filled with fd00::, which younger requests")
		}
	}
	if got := r.Alloc.Allocations("ns/younger"); len(got) != 1 || got[0].IP != netip.MustParseAddr("fd00::") {
		t.Fatalf("younger holds %+v, want fd00::", got)
	}
}

// Beside MetalLB (--require-lb-class): a class-less Service is MetalLB's,
// and the address its status shows is MetalLB's to give. A restart of ipam
// must not hand it to one of ipam's Services, nor take it from one that the
// ledger says holds it (that clash is reported).
func TestRebuildLeavesOtherControllersAddresses(t *testing.T) {
	ours := withClass(objects.DefaultLBClass)
	services := []*watcherv1.Object{
		svc("metallb", 1, withStatus("10.0.0.0")),
		svc("clash", 2, withStatus("10.0.0.3")),
		svc("held", 3, ours),
		svc("new", 4, ours),
		svc("asker", 5, ours, withAnnotation(allocator.AnnotationLoadBalancerIPs, "10.0.0.0")),
	}
	r := Rebuild(Inputs{
		Ledger:   ledger.State{Allocations: []ledger.Allocation{entry("held", "10.0.0.3", "one")}},
		Pools:    []*allocator.Pool{pool(t, "one", "10.0.0.0/30")},
		Services: slices.Values(services), LBClass: objects.DefaultLBClass, RequireLBClass: true,
	})
	if len(r.Conflicts) != 2 || r.Conflicts[0].Service != "ns/clash" || !strings.Contains(r.Conflicts[0].Message, "ns/held") ||
		r.Conflicts[1].Service != "ns/asker" || !strings.Contains(r.Conflicts[1].Message, "ns/metallb") {
		t.Fatalf("conflicts = %+v, want ns/clash's status (naming ns/held) and ns/asker's request (naming ns/metallb)", r.Conflicts)
	}
	got := allocatePending(r, services[3:])
	want := map[string]string{"ns/new": "10.0.0.1", "ns/asker": "RequestedIPInUse"}
	if !maps.Equal(got, want) {
		t.Fatalf("pending Services got %v, want %v", got, want)
	}
	if held := r.Alloc.Allocations("ns/held"); len(held) != 1 || held[0].IP.String() != "10.0.0.3" {
		t.Fatalf("ns/held holds %+v, want 10.0.0.3 from the ledger", held)
	}
}

// TestRebuildSuspectsAndOverrulesAHandEditedLedger: a ledger entry that
// gives ns/x's address to ns/a, whose own status does not show it, is a
// Suspect (the stream may lag); once the caller confirmed it, the entry is
// overruled and ns/x keeps the address its status shows.
func TestRebuildSuspectsAndOverrulesAHandEditedLedger(t *testing.T) {
	edited := entry("a", "10.0.0.1", "one")
	services := []*watcherv1.Object{svc("x", 1, withStatus("10.0.0.1")), svc("a", 3)}
	in := Inputs{
		Ledger:   ledger.State{Allocations: []ledger.Allocation{edited}},
		Pools:    []*allocator.Pool{pool(t, "one", "10.0.0.0/30")},
		Services: slices.Values(services), LBClass: objects.DefaultLBClass,
	}
	r := Rebuild(in)
	if len(r.Suspects) != 1 || r.Suspects[0].Entry != edited || r.Suspects[0].Shows != "ns/x" {
		t.Fatalf("suspects = %+v, want the entry of ns/a, which ns/x's status contradicts", r.Suspects)
	}
	if held := r.Alloc.Allocations("ns/a"); len(held) != 1 {
		t.Fatalf("before it is confirmed, the ledger is obeyed: ns/a holds %+v", held)
	}
	in.Services = slices.Values(services)
	in.Overruled = []ledger.Allocation{edited}
	r = Rebuild(in)
	if len(r.Suspects) != 0 || len(r.Conflicts) != 0 {
		t.Fatalf("overruled: suspects %+v, conflicts %+v", r.Suspects, r.Conflicts)
	}
	if got := allocatePending(r, services); got["ns/x"] != "10.0.0.1" || got["ns/a"] == "10.0.0.1" {
		t.Fatalf("got %v, want ns/x to keep 10.0.0.1 and ns/a another address", got)
	}
	// Where the entry's own Service shows the address too, nothing is suspect.
	in.Overruled = nil
	in.Services = slices.Values([]*watcherv1.Object{svc("x", 1, withStatus("10.0.0.1")), svc("a", 3, withStatus("10.0.0.1"))})
	if r := Rebuild(in); len(r.Suspects) != 0 {
		t.Fatalf("suspects = %+v, want none when the ledger's holder shows its address", r.Suspects)
	}
}
