package plan

import (
	"errors"
	"net/netip"
	"reflect"
	"testing"
	"time"

	"github.com/ipledger/ipledger/services/ipam/internal/allocator"
	"github.com/ipledger/ipledger/services/ipam/internal/ledger"
)

// TestReserveAndUnreserve: what a reservation or an unreservation writes,
// and in which order the controller applies it (Mutation).
func TestReserveAndUnreserve(t *testing.T) {
	ip := netip.MustParseAddr("10.0.0.9")
	r := ledger.Reservation{IP: ip, Note: "router"}
	ar := allocator.Reservation{IP: ip, Note: "router"}
	stored := ledger.Reservation{IP: ip, Note: "router", CreatedAt: time.Unix(100, 0)}
	for _, tc := range []struct {
		name string
		m    Mutation
		want Mutation
	}{
		{"reserve a free IP: take it, then record it", Reserve(r, Held{}),
			Mutation{Answer: r, Take: &ar, Change: ledger.Change{Reserve: []ledger.Reservation{r}}}},
		{"reserved the same way already: answer the ledger's, write nothing",
			Reserve(r, Held{Alloc: ar, InAlloc: true, Ledger: stored, InLedger: true}), Mutation{Answer: stored}},
		{"another note: the allocator decides (it refuses a reserved IP)",
			Reserve(r, Held{Alloc: allocator.Reservation{IP: ip, Note: "other"}, InAlloc: true, Ledger: stored, InLedger: true}),
			Mutation{Answer: r, Take: &ar, Change: ledger.Change{Reserve: []ledger.Reservation{r}}}},
		{"in the allocator, not in the ledger: take and record",
			Reserve(r, Held{Alloc: ar, InAlloc: true}), Mutation{Answer: r, Take: &ar, Change: ledger.Change{Reserve: []ledger.Reservation{r}}}},
		{"unreserve: forget in the ledger, then free", Unreserve(ip, Held{Ledger: stored, InLedger: true}),
			Mutation{Answer: stored, Change: ledger.Change{Unreserve: []netip.Addr{ip}}, Free: ip}},
		{"unreserve what the ledger does not hold", Unreserve(ip, Held{Alloc: ar, InAlloc: true}), Mutation{Err: ErrNotReserved}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if !errors.Is(tc.m.Err, tc.want.Err) || !reflect.DeepEqual(tc.m, tc.want) {
				t.Fatalf("got %+v, want %+v", tc.m, tc.want)
			}
		})
	}
}
