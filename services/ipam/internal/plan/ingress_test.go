package plan

import (
	"net/netip"
	"reflect"
	"testing"
	"time"

	watcherv1 "github.com/ipledger/ipledger/proto/ipledger/watcher/v1"
	"github.com/ipledger/ipledger/services/ipam/internal/allocator"
	"github.com/ipledger/ipledger/services/ipam/internal/ledger"
	"github.com/ipledger/ipledger/services/ipam/internal/objects"
)

// TestIngressFollowsIPFamilies: status.loadBalancer.ingress lists the
// Service's first family first, as spec.clusterIPs does; a Service whose
// status lists them the other way (ipam before 0.3.0 put IPv4 first) is
// rewritten in that order, keeping both addresses, without an Event.
func TestIngressFollowsIPFamilies(t *testing.T) {
	dual := func(o *watcherv1.Object) {
		o.GetService().IpFamilyPolicy = "RequireDualStack"
		o.GetService().IpFamilies = []string{"IPv6", "IPv4"}
	}
	for _, tc := range []struct {
		name    string
		held    []string
		current map[string]Status
		ledger  []ledger.Allocation
		want    summary
	}{{
		name: "a new Service of ipFamilies [IPv6, IPv4] shows its IPv6 first",
		want: summary{
			Allocate:  []string{"ns/a=10.0.0.0@one", "ns/a=2001:db8::1@one"},
			Writes:    []string{`ns/a: [2001:db8::1 10.0.0.0] pool="one" True/Allocated event=Normal/Allocated`},
			Settled:   []string{"ns/a"},
			Allocated: 1,
		},
	}, {
		name:    "a status in the old order is rewritten in the Service's, without an Event",
		held:    []string{"10.0.0.0", "2001:db8::1"},
		current: map[string]Status{"ns/a": {Ingress: []string{"10.0.0.0", "2001:db8::1"}, Pool: "one", Cond: &Condition{Status: "True", Reason: "Allocated", Message: "Allocated 2001:db8::1, 10.0.0.0 from pool one"}}},
		ledger:  []ledger.Allocation{entry("a", "10.0.0.0", "one"), entry("a", "2001:db8::1", "one")},
		want: summary{
			Writes:  []string{`ns/a: [2001:db8::1 10.0.0.0] pool="one" True/Allocated`},
			Settled: []string{"ns/a"},
		},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := allocator.ParsePool("one", allocator.PoolSpec{Addresses: []string{"10.0.0.0/30", "2001:db8::/126"}, AutoAssign: true, CreatedAt: time.Unix(1, 0)})
			if err != nil {
				t.Fatal(err)
			}
			a := allocator.New()
			a.SetPools([]*allocator.Pool{p})
			if len(tc.held) > 0 {
				var ips []netip.Addr
				for _, s := range tc.held {
					ips = append(ips, netip.MustParseAddr(s))
				}
				if err := a.Assign("ns/a", ips, allocator.Sharing{}); err != nil {
					t.Fatal(err)
				}
			}
			got := summarize(Decide(a, Batch{
				Services: []*watcherv1.Object{svc("a", 1, dual)}, Current: tc.current, Ledger: ledger.IndexByService(tc.ledger),
				Class: objects.Class{Name: objects.DefaultLBClass}, Now: time.Unix(1000, 0),
			}))
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("plan:\n got %+v\nwant %+v", got, tc.want)
			}
		})
	}
}
