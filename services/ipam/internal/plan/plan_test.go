package plan

import (
	"fmt"
	"maps"
	"net/netip"
	"reflect"
	"slices"
	"testing"
	"time"

	watcherv1 "github.com/ipledger/ipledger/proto/ipledger/watcher/v1"
	"github.com/ipledger/ipledger/services/ipam/internal/allocator"
	"github.com/ipledger/ipledger/services/ipam/internal/ledger"
	"github.com/ipledger/ipledger/services/ipam/internal/objects"
)

// summary is a Plan in words, so that a table can say what it expects.
type summary struct {
	Allocate  []string // ledger entries written: service=ip@pool
	Unledger  []string // ledger entries removed: service=ip
	Release   []string
	Reask     []string
	Writes    []string // service: ingress pool condition [release] [event]
	Pending   []string // service:reason
	Settled   []string
	Failures  []string
	Allocated int
	Unfit     []string
}

func summarize(p Plan) summary {
	var s summary
	for _, a := range p.Change.Allocate {
		s.Allocate = append(s.Allocate, fmt.Sprintf("%s=%s@%s", a.Service.Key(), a.IP, a.Pool))
	}
	for _, a := range p.Change.Release {
		s.Unledger = append(s.Unledger, fmt.Sprintf("%s=%s", a.Service.Key(), a.IP))
	}
	s.Release, s.Reask, s.Settled, s.Allocated = p.Release, p.Reask, p.Settled, p.Allocated
	for _, w := range p.Writes {
		d := fmt.Sprintf("%s: %v pool=%q", w.Key, w.Want.Ingress, w.Want.Pool)
		if c := w.Want.Cond; c != nil {
			d += fmt.Sprintf(" %s/%s", c.Status, c.Reason)
		}
		if w.Release {
			d += " release"
		}
		if e := w.Event; e != nil {
			d += fmt.Sprintf(" event=%s/%s", e.Type, e.Reason)
		}
		s.Writes = append(s.Writes, d)
	}
	for _, pd := range p.Pending {
		s.Pending = append(s.Pending, pd.Service+":"+pd.Reason)
	}
	for _, f := range p.Failures {
		s.Failures = append(s.Failures, string(f))
	}
	for _, u := range p.Unfit {
		s.Unfit = append(s.Unfit, u.Service)
	}
	return s
}

func entry(service, ip, pool string) ledger.Allocation {
	return ledger.Allocation{IP: netip.MustParseAddr(ip), Pool: pool, Service: ledger.ServiceRef{Namespace: "ns", Name: service, UID: "uid-" + service}}
}

func allocated(ip, pool string) Status {
	return Status{Ingress: []string{ip}, Pool: pool, Cond: &Condition{Status: "True", Reason: "Allocated", Message: fmt.Sprintf("Allocated %s from pool %s", ip, pool)}}
}

func TestDecide(t *testing.T) {
	now := time.Unix(1000, 0)
	for _, tc := range []struct {
		name     string
		pool     string
		held     map[string]string // service -> IP it holds when the pass starts
		services []*watcherv1.Object
		current  map[string]Status
		ledger   []ledger.Allocation
		gone     []string
		want     summary
	}{{
		name:     "a new Service is allocated, recorded in the ledger and told, with an Event",
		pool:     "10.0.0.0/30",
		services: []*watcherv1.Object{svc("a", 1)},
		want: summary{
			Allocate:  []string{"ns/a=10.0.0.0@one"},
			Writes:    []string{`ns/a: [10.0.0.0] pool="one" True/Allocated event=Normal/Allocated`},
			Settled:   []string{"ns/a"},
			Allocated: 1,
		},
	}, {
		name:     "a Service whose status and ledger say what it holds changes nothing",
		pool:     "10.0.0.0/30",
		held:     map[string]string{"a": "10.0.0.1"},
		services: []*watcherv1.Object{svc("a", 1)},
		current:  map[string]Status{"ns/a": allocated("10.0.0.1", "one")},
		ledger:   []ledger.Allocation{entry("a", "10.0.0.1", "one")},
		want:     summary{Settled: []string{"ns/a"}},
	}, {
		name:     "a held address missing from the ledger is recorded before the status is written",
		pool:     "10.0.0.0/30",
		held:     map[string]string{"a": "10.0.0.1"},
		services: []*watcherv1.Object{svc("a", 1)},
		current:  map[string]Status{"ns/a": allocated("10.0.0.1", "one")},
		want:     summary{Allocate: []string{"ns/a=10.0.0.1@one"}, Settled: []string{"ns/a"}},
	}, {
		name:     "a message change alone is written without an Event",
		pool:     "10.0.0.0/30",
		held:     map[string]string{"a": "10.0.0.1"},
		services: []*watcherv1.Object{svc("a", 1)},
		current: map[string]Status{"ns/a": {Ingress: []string{"10.0.0.1"}, Pool: "one",
			Cond: &Condition{Status: "True", Reason: "Allocated", Message: "an older wording"}}},
		ledger: []ledger.Allocation{entry("a", "10.0.0.1", "one")},
		want: summary{
			Writes:  []string{`ns/a: [10.0.0.1] pool="one" True/Allocated`},
			Settled: []string{"ns/a"},
		},
	}, {
		name:     "a full pool leaves the Service pending, with a Warning",
		pool:     "10.0.0.1/32",
		held:     map[string]string{"a": "10.0.0.1"},
		services: []*watcherv1.Object{svc("a", 1), svc("b", 2)},
		current:  map[string]Status{"ns/a": allocated("10.0.0.1", "one")},
		ledger:   []ledger.Allocation{entry("a", "10.0.0.1", "one")},
		want: summary{
			Writes:   []string{`ns/b: [] pool="" False/PoolExhausted event=Warning/PoolExhausted`},
			Settled:  []string{"ns/a"},
			Pending:  []string{"ns/b:PoolExhausted"},
			Failures: []string{"PoolExhausted"},
		},
	}, {
		name: "an older pending Service never takes the IP a younger one in the batch requests",
		pool: "10.0.0.0/31",
		services: []*watcherv1.Object{
			svc("old", 1),
			svc("young", 2, withAnnotation(allocator.AnnotationLoadBalancerIPs, "10.0.0.0")),
		},
		want: summary{
			Allocate: []string{"ns/old=10.0.0.1@one", "ns/young=10.0.0.0@one"},
			Writes: []string{
				`ns/old: [10.0.0.1] pool="one" True/Allocated event=Normal/Allocated`,
				`ns/young: [10.0.0.0] pool="one" True/Allocated event=Normal/Allocated`,
			},
			Settled:   []string{"ns/old", "ns/young"},
			Allocated: 2,
		},
	}, {
		name:     "a Service no longer ours has its status cleared first",
		pool:     "10.0.0.0/30",
		held:     map[string]string{"a": "10.0.0.1"},
		services: []*watcherv1.Object{svc("a", 1, withClass("other.example/lb"))},
		current:  map[string]Status{"ns/a": allocated("10.0.0.1", "one")},
		ledger:   []ledger.Allocation{entry("a", "10.0.0.1", "one")},
		want: summary{
			Writes:  []string{`ns/a: [] pool="" release`},
			Settled: []string{"ns/a"},
		},
	}, {
		name:     "a Service no longer ours whose status is clear gives its address back",
		pool:     "10.0.0.0/30",
		held:     map[string]string{"a": "10.0.0.1"},
		services: []*watcherv1.Object{svc("a", 1, withClass("other.example/lb"))},
		ledger:   []ledger.Allocation{entry("a", "10.0.0.1", "one")},
		want: summary{
			Unledger: []string{"ns/a=10.0.0.1"},
			Release:  []string{"ns/a"},
			Settled:  []string{"ns/a"},
		},
	}, {
		name: "an address in the status of another controller's Service is never handed out",
		pool: "10.0.0.0/30",
		services: []*watcherv1.Object{
			svc("metallb", 1, withClass("other.example/lb"), withStatus("10.0.0.0")),
			svc("a", 2),
		},
		want: summary{
			Allocate:  []string{"ns/a=10.0.0.1@one"},
			Writes:    []string{`ns/a: [10.0.0.1] pool="one" True/Allocated event=Normal/Allocated`},
			Settled:   []string{"ns/metallb", "ns/a"},
			Allocated: 1,
		},
	}, {
		name:   "a Service confirmed gone gives its address back",
		pool:   "10.0.0.0/30",
		held:   map[string]string{"a": "10.0.0.1"},
		ledger: []ledger.Allocation{entry("a", "10.0.0.1", "one")},
		gone:   []string{"ns/a"},
		want:   summary{Unledger: []string{"ns/a=10.0.0.1"}, Release: []string{"ns/a"}},
	}, {
		name:     "an address that no longer fits is first taken out of the status",
		pool:     "10.0.0.0/30",
		held:     map[string]string{"a": "10.0.0.1"},
		services: []*watcherv1.Object{svc("a", 1, withAnnotation(allocator.AnnotationLoadBalancerIPs, "10.0.0.2"))},
		current:  map[string]Status{"ns/a": allocated("10.0.0.1", "one")},
		ledger:   []ledger.Allocation{entry("a", "10.0.0.1", "one")},
		want: summary{
			Writes: []string{`ns/a: [] pool="" True/Allocated`},
			Unfit:  []string{"ns/a"},
		},
	}, {
		name:     "an address that no longer fits and is not shown is released, and the Service decided again",
		pool:     "10.0.0.0/30",
		held:     map[string]string{"a": "10.0.0.1"},
		services: []*watcherv1.Object{svc("a", 1, withAnnotation(allocator.AnnotationLoadBalancerIPs, "10.0.0.2"))},
		ledger:   []ledger.Allocation{entry("a", "10.0.0.1", "one")},
		want: summary{
			Unledger: []string{"ns/a=10.0.0.1"},
			Release:  []string{"ns/a"},
			Reask:    []string{"ns/a"},
		},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			a := allocator.New()
			a.SetPools([]*allocator.Pool{pool(t, "one", tc.pool)})
			for s, ip := range tc.held {
				if err := a.Assign("ns/"+s, []netip.Addr{netip.MustParseAddr(ip)}, allocator.Sharing{}); err != nil {
					t.Fatal(err)
				}
			}
			got := summarize(Decide(a, Batch{
				Services: tc.services, Current: tc.current, Gone: tc.gone, Ledger: ledger.IndexByService(tc.ledger),
				Class: objects.Class{Name: objects.DefaultLBClass}, Now: now,
			}))
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("plan:\n got %+v\nwant %+v", got, tc.want)
			}
		})
	}
}

// A Service that already waited when this term began keeps its age: its
// wait starts at the False condition's lastTransitionTime.
func TestDecidePendingSince(t *testing.T) {
	now := time.Unix(1000, 0)
	before := time.Unix(400, 0)
	a := allocator.New()
	cond := &Condition{Status: "False", Reason: "NoMatchingPool", Message: "no pool", LastTransition: before}
	p := Decide(a, Batch{
		Services: []*watcherv1.Object{svc("a", 1), svc("b", 2)},
		Current:  map[string]Status{"ns/a": {Cond: cond}},
		Class:    objects.Class{Name: objects.DefaultLBClass}, Now: now,
	})
	since := map[string]time.Time{}
	for _, pd := range p.Pending {
		since[pd.Service] = pd.Since
	}
	if !since["ns/a"].Equal(before) || !since["ns/b"].Equal(now) {
		t.Fatalf("pending since %v, want ns/a at %v and ns/b at %v", since, before, now)
	}
}

// Another controller's address is free again once its Service is gone from
// the stream (or its status lets it go).
func TestDecideForgetsForeignAddressesOfAbsentServices(t *testing.T) {
	a := allocator.New()
	a.SetPools([]*allocator.Pool{pool(t, "one", "10.0.0.0/31")})
	class := objects.Class{Name: objects.DefaultLBClass, Required: true}
	metallb := svc("metallb", 1, withStatus("10.0.0.0"))
	decide := func(b Batch) summary {
		b.Class, b.Now = class, time.Unix(1000, 0)
		return summarize(Decide(a, b))
	}
	decide(Batch{Services: []*watcherv1.Object{metallb}})
	if got := decide(Batch{Services: []*watcherv1.Object{svc("a", 2, withClass(objects.DefaultLBClass))}}); !slices.Equal(got.Allocate, []string{"ns/a=10.0.0.1@one"}) {
		t.Fatalf("while MetalLB's Service shows 10.0.0.0: %+v", got)
	}
	if got := decide(Batch{Services: []*watcherv1.Object{svc("b", 3, withClass(objects.DefaultLBClass))}, Absent: []string{"ns/metallb"}}); !slices.Equal(got.Allocate, []string{"ns/b=10.0.0.0@one"}) {
		t.Fatalf("after MetalLB's Service left the stream: %+v", got)
	}
}

// TestOptInOfTheSecondEndsTheFirstsHold: a share across namespaces is
// decided from both ends. When the second Service's opt-in ends its
// HeldSharedAcrossNamespaces, the first (opted in earlier, decided then
// and unchanged since) is asked again, or it would stay held; a Service
// whose reason stays asks nobody.
func TestOptInOfTheSecondEndsTheFirstsHold(t *testing.T) {
	ip := netip.MustParseAddr("10.0.0.2")
	in := func(ns string, o *watcherv1.Object) *watcherv1.Object { o.Meta.Namespace = ns; return o }
	held := Status{Ingress: []string{ip.String()}, Pool: "one", Cond: &Condition{Status: "True", Reason: string(allocator.ReasonHeldSharedAcrossNamespaces)}}
	for _, tc := range []struct {
		name      string
		decide    *watcherv1.Object
		wantReask []string
	}{{
		name: "the second opts in: both now share, the first is decided again",
		decide: in("b", svc("old", 2, withAnnotation(allocator.AnnotationAllowSharedIP, "shared"),
			withAnnotation(allocator.AnnotationSharingCrossNamespace, "a"))),
		wantReask: []string{"a/web"},
	}, {
		name:   "the second has not opted in: it stays held and asks nobody",
		decide: in("b", svc("old", 2, withAnnotation(allocator.AnnotationAllowSharedIP, "shared"))),
	}} {
		t.Run(tc.name, func(t *testing.T) {
			a := allocator.New()
			a.SetPools([]*allocator.Pool{pool(t, "one", "10.0.0.0/30")})
			if err := a.Assign("a/web", []netip.Addr{ip}, allocator.Sharing{Key: "shared", CrossNamespace: []string{"b"}}); err != nil {
				t.Fatal(err)
			}
			if err := a.Assign("b/old", []netip.Addr{ip}, allocator.Sharing{Key: "shared"}); err != nil {
				t.Fatal(err)
			}
			p := Decide(a, Batch{
				Services: []*watcherv1.Object{tc.decide}, Current: map[string]Status{"b/old": held},
				Class: objects.Class{Name: objects.DefaultLBClass}, Now: time.Unix(1000, 0),
			})
			if !slices.Equal(p.Reask, tc.wantReask) {
				t.Errorf("Reask = %v, want %v (plan %+v)", p.Reask, tc.wantReask, summarize(p))
			}
		})
	}
}

// What follows a committed plan, on the leader and in a preview alike.
func TestAfterCommit(t *testing.T) {
	for _, tc := range []struct {
		name        string
		p           Plan
		pending     []string
		want        []string
		wantPending []string
	}{
		{name: "nothing released: only the reasked", p: Plan{Reask: []string{"ns/r"}}, pending: []string{"ns/p"}, want: []string{"ns/r"}, wantPending: []string{"ns/p"}},
		{name: "a release wakes every pending Service", p: Plan{Release: []string{"ns/gone"}, Reask: []string{"ns/r"}},
			pending: []string{"ns/gone", "ns/p", "ns/q"}, want: []string{"ns/p", "ns/q", "ns/r"}, wantPending: []string{"ns/p", "ns/q"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pending := map[string]bool{}
			for _, k := range tc.pending {
				pending[k] = true
			}
			got := AfterCommit(allocator.New(), tc.p, pending)
			slices.Sort(got)
			left := slices.Sorted(maps.Keys(pending))
			if !slices.Equal(got, tc.want) || !slices.Equal(left, tc.wantPending) {
				t.Errorf("reask %v, pending %v; want %v, %v", got, left, tc.want, tc.wantPending)
			}
		})
	}
}

func TestWriteDecideAgain(t *testing.T) {
	two := Status{Ingress: []string{"10.0.0.1", "2001:db8::1"}}
	one := Status{Ingress: []string{"10.0.0.1"}}
	for _, tc := range []struct {
		name string
		w    Write
		cur  Status
		want bool
	}{
		{"same addresses", Write{Want: two}, two, false},
		{"more addresses", Write{Want: two}, one, false},
		{"fewer addresses: released once the status shows it", Write{Want: one}, two, true},
		{"no longer ours", Write{Release: true}, Status{}, true},
	} {
		if got := tc.w.DecideAgain(tc.cur); got != tc.want {
			t.Errorf("%s: DecideAgain = %v", tc.name, got)
		}
	}
}
