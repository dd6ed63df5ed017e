package poolstate

import (
	"fmt"
	"math/big"
	"net/netip"
	"testing"
	"time"

	watcherv1 "github.com/ipledger/ipledger/proto/ipledger/watcher/v1"
	"github.com/ipledger/ipledger/services/ipam/internal/ledger"
	"github.com/ipledger/ipledger/services/ipam/internal/objects"
	"github.com/ipledger/ipledger/services/ipam/internal/plan"
)

// BenchmarkOf10000 is the pool part of each pass of the leader (and of each
// ListPools rebuild): the states of 10 pools whose addresses 10,000
// Services hold and 1,000 are kept for deleted ones, and each family's
// available (total - used), as the status writer computes it.
func BenchmarkOf10000(b *testing.B) {
	ps := &objects.PoolSet{KeepReleased: time.Hour}
	var objs []*watcherv1.Object
	for i := range 10 {
		objs = append(objs, pool(fmt.Sprintf("p%d", i), int64(i+1), fmt.Sprintf("10.%d.0.0/20", i)))
	}
	pools, _ := ps.Parse(objs)
	var st ledger.State
	for i := range 11000 {
		ip := netip.AddrFrom4([4]byte{10, byte(i % 10), byte(i / 10 / 256), byte(i / 10 % 256)})
		if i < 10000 {
			st.Allocations = append(st.Allocations, held(ip.String(), fmt.Sprintf("p%d", i%10), fmt.Sprintf("s%d", i)))
			continue
		}
		st.Reservations = append(st.Reservations, ledger.Reservation{IP: ip, Note: ledger.KeptNote(""), CreatedAt: time.Unix(1_700_000_000, 0),
			ForService: &ledger.ServiceRef{Namespace: "web", Name: fmt.Sprintf("s%d", i), UID: fmt.Sprintf("uid-s%d", i)}})
	}
	a := plan.Rebuild(plan.Inputs{Ledger: st, Pools: pools, LBClass: objects.DefaultLBClass}).Alloc
	in := Inputs{Alloc: a}
	var available big.Int
	for b.Loop() {
		for _, s := range Of(in, objs) {
			available.Sub(s.IPv4.Total, s.IPv4.Used)
			available.Sub(s.IPv6.Total, s.IPv6.Used)
		}
	}
	if s := Of(in, objs)[0]; s.IPv4.Used.Int64() != 1100 {
		b.Fatalf("p0 uses %s, want 1100", s.IPv4.Used)
	}
}
