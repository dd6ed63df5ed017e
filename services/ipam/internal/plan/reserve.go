package plan

import (
	"errors"
	"net/netip"

	"github.com/ipledger/ipledger/services/ipam/internal/allocator"
	"github.com/ipledger/ipledger/services/ipam/internal/ledger"
	"github.com/ipledger/ipledger/services/ipam/internal/objects"
)

// ErrNotReserved is the answer to an unreservation of an IP without a
// reservation.
var ErrNotReserved = errors.New("the IP is not reserved")

// Held is what the allocator and the ledger hold for one IP, as the
// controller read them before a reservation or an unreservation.
type Held struct {
	Alloc    allocator.Reservation
	InAlloc  bool
	Ledger   ledger.Reservation
	InLedger bool
}

// Mutation is what a reservation or an unreservation asked over gRPC
// does. The controller applies it in this order: Take in the allocator
// (which refuses an IP in use: the answer is its error), then Change in
// the ledger (Take is rolled back if that fails), then Free in the
// allocator; with no Change, it answers Answer, or Err, at once.
type Mutation struct {
	Err    error
	Answer ledger.Reservation
	Take   *allocator.Reservation
	Change ledger.Change
	Free   netip.Addr
}

// Reserve decides a reservation of r.IP: nothing to write when the same
// reservation is held already (a retried call), else the allocator takes
// it, then the ledger records it.
func Reserve(r ledger.Reservation, held Held) Mutation {
	ar := objects.AllocatorReservation(r)
	if held.InAlloc && held.Alloc.Note == ar.Note && held.Alloc.ForService == ar.ForService && held.InLedger {
		return Mutation{Answer: held.Ledger}
	}
	return Mutation{Answer: r, Take: &ar, Change: ledger.Change{Reserve: []ledger.Reservation{r}}}
}

// Unreserve decides the release of ip's reservation: the ledger forgets
// it, then the allocator frees it; ErrNotReserved when the ledger has none.
func Unreserve(ip netip.Addr, held Held) Mutation {
	if !held.InLedger {
		return Mutation{Err: ErrNotReserved}
	}
	return Mutation{Answer: held.Ledger, Change: ledger.Change{Unreserve: []netip.Addr{ip}}, Free: ip}
}
