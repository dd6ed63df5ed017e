package preflight

import (
	"slices"
	"strings"
	"testing"
	"time"

	watcherv1 "github.com/ipledger/ipledger/proto/ipledger/watcher/v1"
	"github.com/ipledger/ipledger/services/ipam/internal/ledger"
	"github.com/ipledger/ipledger/services/ipam/internal/objects"
	"github.com/ipledger/ipledger/services/ipam/internal/preview"
)

// TestCheckSeesCiliumAnnotations: ipam 0.3.0 reads Cilium LB-IPAM's
// annotations, so preflight lists, before an upgrade, a Service whose stale
// lbipam.cilium.io/ips asks for another address than it holds (it would
// move) and one whose sharing-key spellings disagree (it keeps its address,
// InvalidRequest).
func TestCheckSeesCiliumAnnotations(t *testing.T) {
	v4 := []string{"IPv4"}
	stale := svc("stale", 1, v4, "Allocated", "Allocated 10.0.0.1 from pool p", "10.0.0.1")
	stale.Meta.Annotations["lbipam.cilium.io/ips"] = "10.0.0.7"
	disagree := svc("disagree", 2, v4, "Allocated", "Allocated 10.0.0.2 from pool p", "10.0.0.2")
	disagree.Meta.Annotations["ipledger.io/allow-shared-ip"] = "a"
	disagree.Meta.Annotations["io.cilium/lb-ipam-sharing-key"] = "b"
	in := preview.Inputs{
		Pools: []*watcherv1.Object{{Kind: watcherv1.Kind_KIND_IP_POOL,
			Meta: &watcherv1.ObjectMeta{Name: "p", Uid: "uid-p", CreationTimestamp: int64(time.Second), Generation: 1, Finalizers: []string{objects.PoolFinalizer}},
			Body: &watcherv1.Object_IpPool{IpPool: &watcherv1.IPPool{Addresses: []string{"10.0.0.0/28"}, AutoAssign: true}}}},
		Services: []*watcherv1.Object{stale, disagree},
		Ledger:   ledger.State{Allocations: []ledger.Allocation{entry("stale", "10.0.0.1"), entry("disagree", "10.0.0.2")}},
		PoolSet:  &objects.PoolSet{}, Class: objects.Class{Name: objects.DefaultLBClass}, Now: now,
	}
	slices.SortFunc(in.Ledger.Allocations, ledger.CompareAllocations)
	r := Check(in)
	byName := map[string]Change{}
	for _, c := range r.Changes {
		byName[c.Name] = c
		t.Logf("%s %s moves=%v %v>%v: %s", c.Name, c.Change, c.Moves, c.IPsBefore, c.IPsAfter, c.Why)
	}
	if c, ok := byName["stale"]; !ok || !c.Moves || !slices.Equal(c.IPsAfter, []string{"10.0.0.7"}) {
		t.Errorf("stale: %+v, want it listed moving to 10.0.0.7 (its lbipam.cilium.io/ips)", c)
	}
	if c, ok := byName["disagree"]; !ok || c.Moves || !strings.Contains(c.Why+c.ReasonAfter, "InvalidRequest") {
		t.Errorf("disagree: %+v, want it listed keeping 10.0.0.2 with InvalidRequest", c)
	}
}
