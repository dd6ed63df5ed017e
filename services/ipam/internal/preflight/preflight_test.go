package preflight

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	watcherv1 "github.com/ipledger/ipledger/proto/ipledger/watcher/v1"
	"github.com/ipledger/ipledger/services/ipam/internal/ledger"
	"github.com/ipledger/ipledger/services/ipam/internal/objects"
	"github.com/ipledger/ipledger/services/ipam/internal/preview"
)

var now = time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)

// svc is a LoadBalancer Service of ns "web" (created at second created),
// whose status shows ips with condition reason and message; families are
// its spec.ipFamilies.
func svc(name string, created int64, families []string, reason, message string, ips ...string) *watcherv1.Object {
	policy := "SingleStack"
	if len(families) > 1 {
		policy = "RequireDualStack"
	}
	s := &watcherv1.Service{Type: "LoadBalancer", IpFamilyPolicy: policy, IpFamilies: families,
		Ports: []*watcherv1.ServicePort{{Name: "http", Protocol: "TCP", Port: 80}}}
	for _, ip := range ips {
		s.Ingress = append(s.Ingress, &watcherv1.LoadBalancerIngress{Ip: ip, IpMode: "VIP"})
	}
	meta := &watcherv1.ObjectMeta{Namespace: "web", Name: name, Uid: "uid-" + name, CreationTimestamp: created * int64(time.Second), Generation: 1}
	if reason != "" {
		s.Conditions = []*watcherv1.Condition{{Type: objects.ConditionType, Status: "True", Reason: reason, Message: message, ObservedGeneration: 1, LastTransitionTime: 1}}
		meta.Annotations = map[string]string{"ipledger.io/allocated-from-pool": "p"}
	}
	return &watcherv1.Object{Kind: watcherv1.Kind_KIND_SERVICE, Meta: meta, Body: &watcherv1.Object_Service{Service: s}}
}

func entry(name, ip string) ledger.Allocation {
	return ledger.Allocation{IP: netip.MustParseAddr(ip), Pool: "p", Service: ledger.ServiceRef{Namespace: "web", Name: name, UID: "uid-" + name}}
}

func TestCheck(t *testing.T) {
	v4 := []string{"IPv4"}
	in := preview.Inputs{
		Pools: []*watcherv1.Object{{Kind: watcherv1.Kind_KIND_IP_POOL,
			Meta: &watcherv1.ObjectMeta{Name: "p", Uid: "uid-p", CreationTimestamp: int64(time.Second), Generation: 1, Finalizers: []string{objects.PoolFinalizer}},
			Body: &watcherv1.Object_IpPool{IpPool: &watcherv1.IPPool{Addresses: []string{"10.0.0.0/28", "fd00::/124"}, AutoAssign: true}}}},
		Services: []*watcherv1.Object{
			svc("right", 1, v4, "Allocated", "Allocated 10.0.0.1 from pool p", "10.0.0.1"),
			// Written by an older version with other words: written again,
			// same treatment.
			svc("reworded", 2, v4, "Allocated", "Got 10.0.0.2 from p", "10.0.0.2"),
			// Single-stack IPv4 now, but shows an IPv6 address too.
			svc("family", 3, v4, "Allocated", "Allocated 10.0.0.3, fd00::3 from pool p", "10.0.0.3", "fd00::3"),
			// The ledger gives 10.0.0.5 to "ledgered", whose status does not
			// show it; "shower" shows it: the status wins.
			svc("ledgered", 4, v4, "", ""),
			svc("shower", 5, v4, "Allocated", "Allocated 10.0.0.5 from pool p", "10.0.0.5"),
		},
		Ledger: ledger.State{Allocations: []ledger.Allocation{
			entry("right", "10.0.0.1"), entry("reworded", "10.0.0.2"), entry("family", "10.0.0.3"), entry("family", "fd00::3"),
			entry("ledgered", "10.0.0.5"), entry("gone", "10.0.0.9"),
		}},
		Gone:    []string{"web/gone"},
		PoolSet: &objects.PoolSet{}, Class: objects.Class{Name: objects.DefaultLBClass}, Now: now,
	}
	slices.SortFunc(in.Ledger.Allocations, ledger.CompareAllocations)
	r := Check(in)
	var got []string
	for _, c := range r.Changes {
		got = append(got, fmt.Sprintf("%s %s moves=%v %s>%s ledger %s>%s", c.Name, c.Change, c.Moves,
			strings.Join(c.IPsBefore, ","), strings.Join(c.IPsAfter, ","), strings.Join(c.LedgerBefore, ","), strings.Join(c.LedgerAfter, ",")))
	}
	want := []string{
		"family AddressRemoved moves=true 10.0.0.3,fd00::3>10.0.0.3 ledger 10.0.0.3,fd00::3>10.0.0.3",
		"gone LedgerReleased moves=false > ledger 10.0.0.9>",
		"ledgered AddressAdded moves=false >10.0.0.0 ledger 10.0.0.5>10.0.0.0",
		"shower Ledger moves=false 10.0.0.5>10.0.0.5 ledger >10.0.0.5",
	}
	if !slices.Equal(got, want) {
		t.Errorf("changes:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	for _, c := range r.Changes {
		t.Logf("%s: %s", c.Name, c.Why)
	}
	if r.Rewrites != 1 {
		t.Errorf("rewrites %d, want 1 (reworded)", r.Rewrites)
	}
	if len(r.Overruled) != 1 || !strings.Contains(r.Overruled[0], "10.0.0.5 given to web/ledgered") {
		t.Errorf("overruled %q, want the entry of web/ledgered", r.Overruled)
	}
	if exitCode(r, false) != ExitMoves {
		t.Errorf("exit code %d, want %d", exitCode(r, false), ExitMoves)
	}
	t.Log(strings.Join(r.Summary, "\n"))
}

func TestExitCode(t *testing.T) {
	added := &Report{Changes: []Change{{Change: AddressAdded}}}
	for _, tc := range []struct {
		r    *Report
		any  bool
		want int
	}{
		{&Report{}, false, ExitOK}, {&Report{}, true, ExitOK},
		{added, false, ExitOK}, {added, true, ExitChanges},
		{&Report{Changes: []Change{{Change: AddressAdded}, {Change: AddressRemoved, Moves: true}}}, true, ExitMoves},
	} {
		if got := exitCode(tc.r, tc.any); got != tc.want {
			t.Errorf("exitCode(%v, any=%v) = %d, want %d", tc.r.Changes, tc.any, got, tc.want)
		}
	}
}
