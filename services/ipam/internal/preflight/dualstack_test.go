package preflight

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	watcherv1 "github.com/ipledger/ipledger/proto/ipledger/watcher/v1"
	"github.com/ipledger/ipledger/services/ipam/internal/ledger"
	"github.com/ipledger/ipledger/services/ipam/internal/objects"
	"github.com/ipledger/ipledger/services/ipam/internal/preview"
)

// TestCheckDualStackRules: what preflight says of 0.3.0's dual-stack rules
// over a 0.2.x state. A Service that the old rule gave both families of an
// unpinned pool over its namespace's pinned IPv4-only pool keeps them (no
// change); one of ipFamilies [IPv6, IPv4] showing its IPv4 first is written
// again with the same addresses (a rewrite, not a change); a PreferDualStack
// Service naming an IPv6-only pool, pending under 0.2.x, would get its IPv6
// (AddressAdded). Nothing moves: exit 0.
func TestCheckDualStackRules(t *testing.T) {
	pool := func(name string, created int64, alloc *watcherv1.IPPoolAllocation, addrs ...string) *watcherv1.Object {
		return &watcherv1.Object{Kind: watcherv1.Kind_KIND_IP_POOL,
			Meta: &watcherv1.ObjectMeta{Name: name, Uid: "uid-" + name, CreationTimestamp: created * int64(time.Second), Generation: 1, Finalizers: []string{objects.PoolFinalizer}},
			Body: &watcherv1.Object_IpPool{IpPool: &watcherv1.IPPool{Addresses: addrs, AutoAssign: true, Allocation: alloc}}}
	}
	prefer := func(o *watcherv1.Object) *watcherv1.Object {
		o.GetService().IpFamilyPolicy = "PreferDualStack"
		return o
	}
	pending := prefer(svc("pending", 3, []string{"IPv4", "IPv6"}, "", ""))
	pending.Meta.Annotations = map[string]string{"ipledger.io/address-pool": "six"}
	in := preview.Inputs{
		Pools: []*watcherv1.Object{
			pool("p", 1, nil, "10.0.0.0/28", "fd00::/124"),
			pool("pin", 1, &watcherv1.IPPoolAllocation{Namespaces: []string{"web"}}, "10.0.1.0/28"),
			pool("six", 1, nil, "fd00:6::/124"),
		},
		Services: []*watcherv1.Object{
			prefer(svc("old", 1, []string{"IPv4", "IPv6"}, "Allocated", "Allocated 10.0.0.1, fd00::1 from pool p", "10.0.0.1", "fd00::1")),
			svc("v6first", 2, []string{"IPv6", "IPv4"}, "Allocated", "Allocated fd00::2, 10.0.0.2 from pool p", "10.0.0.2", "fd00::2"),
			pending,
		},
		Ledger: ledger.State{Allocations: []ledger.Allocation{
			entry("old", "10.0.0.1"), entry("old", "fd00::1"), entry("v6first", "10.0.0.2"), entry("v6first", "fd00::2"),
		}},
		PoolSet: &objects.PoolSet{}, Class: objects.Class{Name: objects.DefaultLBClass}, Now: now,
	}
	slices.SortFunc(in.Ledger.Allocations, ledger.CompareAllocations)
	r := Check(in)
	var got []string
	for _, c := range r.Changes {
		got = append(got, fmt.Sprintf("%s %s moves=%v %s>%s", c.Name, c.Change, c.Moves, strings.Join(c.IPsBefore, ","), strings.Join(c.IPsAfter, ",")))
	}
	if want := []string{"pending AddressAdded moves=false >fd00:6::1"}; !slices.Equal(got, want) {
		t.Errorf("changes:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if r.Rewrites != 1 {
		t.Errorf("rewrites %d, want 1 (v6first, its ingress reordered)", r.Rewrites)
	}
	if exitCode(r, false) != ExitOK {
		t.Errorf("exit code %d, want %d", exitCode(r, false), ExitOK)
	}
}
