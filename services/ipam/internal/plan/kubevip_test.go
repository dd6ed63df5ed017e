package plan

import (
	"net/netip"
	"testing"
	"time"

	watcherv1 "github.com/ipledger/ipledger/proto/ipledger/watcher/v1"
	"github.com/ipledger/ipledger/services/ipam/internal/allocator"
	"github.com/ipledger/ipledger/services/ipam/internal/ledger"
	"github.com/ipledger/ipledger/services/ipam/internal/objects"
)

// TestKubeVIPAnnotation: under WriteKubeVIPAnnotation each of our Services'
// writes carries kube-vip.io/loadbalancerIPs naming what it was granted
// (written where ipam wrote none yet, removed with the address); one another
// writer set is a request, never overwritten; off, what ipam wrote goes.
func TestKubeVIPAnnotation(t *testing.T) {
	held := func(a *allocator.Allocator) {
		if err := a.Assign("ns/a", []netip.Addr{netip.MustParseAddr("10.0.0.1")}, allocator.Sharing{}); err != nil {
			t.Fatal(err)
		}
	}
	withKubeVIP := func(s Status, v string) Status { s.KubeVIP = v; return s }
	for _, tc := range []struct {
		name    string
		on      bool
		holds   bool
		service *watcherv1.Object
		current Status
		write   bool   // a write is planned
		want    string // its KubeVIP
	}{
		{name: "a new Service: granted and announced in one write", on: true, service: svc("a", 1), write: true, want: "10.0.0.0"},
		{name: "a held address ipam never wrote for kube-vip: written", on: true, holds: true, service: svc("a", 1),
			current: allocated("10.0.0.1", "one"), write: true, want: "10.0.0.1"},
		{name: "written already: nothing to do", on: true, holds: true, service: svc("a", 1),
			current: withKubeVIP(allocated("10.0.0.1", "one"), "10.0.0.1")},
		{name: "written for another address: rewritten", on: true, holds: true, service: svc("a", 1),
			current: withKubeVIP(allocated("10.0.0.1", "one"), "10.0.0.3"), write: true, want: "10.0.0.1"},
		{name: "another writer's annotation is a request, and stays theirs", on: true, holds: true,
			service: svc("a", 1, withAnnotation(allocator.AnnotationKubeVIPLoadBalancerIPs, "10.0.0.1")), current: allocated("10.0.0.1", "one")},
		{name: "off: ipam writes none", service: svc("a", 1), write: true, want: ""},
		{name: "off: what ipam wrote is removed", holds: true, service: svc("a", 1),
			current: withKubeVIP(allocated("10.0.0.1", "one"), "10.0.0.1"), write: true, want: ""},
		{name: "no longer ours: removed with the status", on: true, holds: true, service: svc("a", 1, withClass("other.example/lb")),
			current: withKubeVIP(allocated("10.0.0.1", "one"), "10.0.0.1"), write: true, want: ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := allocator.New()
			a.SetPools([]*allocator.Pool{pool(t, "one", "10.0.0.0/30")})
			var entries []ledger.Allocation
			if tc.holds {
				held(a)
				entries = append(entries, entry("a", "10.0.0.1", "one"))
			}
			p := Decide(a, Batch{Services: []*watcherv1.Object{tc.service}, Current: map[string]Status{"ns/a": tc.current},
				Ledger: ledger.IndexByService(entries), Class: objects.Class{Name: objects.DefaultLBClass}, Now: time.Unix(1000, 0),
				WriteKubeVIPAnnotation: tc.on})
			if got := len(p.Writes) > 0; got != tc.write {
				t.Fatalf("writes %+v, want a write: %t", p.Writes, tc.write)
			}
			if tc.write && p.Writes[0].Want.KubeVIP != tc.want {
				t.Errorf("kube-vip.io/loadbalancerIPs %q, want %q", p.Writes[0].Want.KubeVIP, tc.want)
			}
		})
	}
}
