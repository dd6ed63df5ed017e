package plan

import (
	"fmt"
	"net/netip"
	"slices"
	"testing"

	watcherv1 "github.com/ipledger/ipledger/proto/ipledger/watcher/v1"
	"github.com/ipledger/ipledger/services/ipam/internal/allocator"
	"github.com/ipledger/ipledger/services/ipam/internal/ledger"
	"github.com/ipledger/ipledger/services/ipam/internal/objects"
)

// BenchmarkRebuild100k is a term's rebuild at 100,000 allocated Services:
// every one in the ledger and in its status, as a restart finds them (the
// half of a restart that runs beside the ledger's fence, BENCHMARKS.md).
func BenchmarkRebuild100k(b *testing.B) {
	const n = 100000
	p, err := allocator.ParsePool("bench", allocator.PoolSpec{Addresses: []string{"10.0.0.0/15"}, AutoAssign: true})
	if err != nil {
		b.Fatal(err)
	}
	services := make([]*watcherv1.Object, n)
	var st ledger.State
	ip := netip.MustParseAddr("10.0.0.0")
	for i := range services {
		name := fmt.Sprintf("svc-%06d", i)
		services[i] = svc(name, int64(i), withStatus(ip.String()))
		st.Allocations = append(st.Allocations, ledger.Allocation{IP: ip, Pool: "bench",
			Service: ledger.ServiceRef{Namespace: "ns", Name: name, UID: "uid-" + name}})
		ip = ip.Next()
	}
	for b.Loop() {
		r := Rebuild(Inputs{Ledger: st, Pools: []*allocator.Pool{p}, Services: slices.Values(services), ServiceCount: n, LBClass: objects.DefaultLBClass})
		if len(r.Conflicts) > 0 {
			b.Fatal(r.Conflicts[0])
		}
	}
}
