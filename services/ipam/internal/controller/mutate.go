package controller

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"time"

	"github.com/ipledger/ipledger/pkg/authz"

	"github.com/ipledger/ipledger/services/ipam/internal/allocator"
	"github.com/ipledger/ipledger/services/ipam/internal/ledger"
	"github.com/ipledger/ipledger/services/ipam/internal/objects"
)

// ErrNotLeader means this replica holds no term (or has not finished
// starting one): mutations go to the leader.
var ErrNotLeader = errors.New("this replica is not the leader")

// ErrNotReserved is returned by Unreserve for an IP without a reservation.
var ErrNotReserved = errors.New("the IP is not reserved")

// mutation is a change asked for over gRPC, applied by the term's loop so
// that it is decided against the same allocator and written under the term.
type mutation struct {
	reserve   *ledger.Reservation
	unreserve netip.Addr
	// by is the authenticated caller, for the history.
	by    string
	reply chan mutationResult
}

type mutationResult struct {
	res ledger.Reservation
	err error
}

func (c *Controller) active() *worker {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.current
}

func (c *Controller) setActive(w *worker) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.current = w
}

// Reserve holds an IP outside any Service, through the leader's term. It
// returns ErrNotLeader on a standby, and an *allocator.Error when the IP is
// held or reserved already.
func (c *Controller) Reserve(ctx context.Context, r ledger.Reservation) (ledger.Reservation, error) {
	return c.mutate(ctx, mutation{reserve: &r})
}

// Unreserve releases a reservation through the leader's term.
func (c *Controller) Unreserve(ctx context.Context, ip netip.Addr) (ledger.Reservation, error) {
	return c.mutate(ctx, mutation{unreserve: ip})
}

func (c *Controller) mutate(ctx context.Context, m mutation) (ledger.Reservation, error) {
	w := c.active()
	if w == nil {
		return ledger.Reservation{}, ErrNotLeader
	}
	m.reply = make(chan mutationResult, 1)
	m.by = callerOf(ctx)
	select {
	case w.mutations <- m:
	case <-w.term.Stopping():
		return ledger.Reservation{}, ErrNotLeader
	case <-ctx.Done():
		return ledger.Reservation{}, ctx.Err()
	}
	select {
	case r := <-m.reply:
		return r.res, r.err
	case <-ctx.Done():
		return ledger.Reservation{}, ctx.Err()
	}
}

// apply runs a mutation in the loop: allocator first (it refuses IPs in
// use), then the ledger; the allocator is rolled back if the ledger write
// fails.
func (w *worker) apply(ctx context.Context, m mutation) mutationResult {
	switch w.phase {
	case serving:
	case fenced:
		return mutationResult{err: ErrNotLeader}
	default:
		return mutationResult{err: errors.New("the ledger is being re-read after a failed write")}
	}
	if r := m.reserve; r != nil {
		ar := objects.AllocatorReservation(*r)
		if old, ok := w.alloc.Reservation(r.IP); ok && old.Note == ar.Note && old.ForService == ar.ForService {
			if lr, ok := w.ldg.Reservation(r.IP); ok {
				return mutationResult{res: lr}
			}
		}
		if err := w.alloc.Reserve(ar); err != nil {
			return mutationResult{err: err}
		}
		ch := ledger.Change{Reserve: []ledger.Reservation{*r}}
		if err := w.ldg.Commit(ctx, ch); err != nil {
			w.alloc.Unreserve(r.IP)
			w.afterCommitError(err)
			return mutationResult{err: fmt.Errorf("record the reservation in the ledger: %w", err)}
		}
		w.hist.Committed(ch, time.Now(), m.by)
		w.log.Info("Reserved an address", "ip", r.IP, "note", r.Note, "by", m.by)
		w.event(configMapRef(w.c.cfg.Namespace, ledger.HeadName), "Normal", "AddressReserved",
			fmt.Sprintf("%s reserved %s: %s", m.by, r.IP, r.Note))
		w.dirty.markPoolWrites() // its pool's counts changed
		return mutationResult{res: *r}
	}
	ip := m.unreserve
	found, ok := w.ldg.Reservation(ip)
	if !ok {
		return mutationResult{err: ErrNotReserved}
	}
	ch := ledger.Change{Unreserve: []netip.Addr{ip}}
	if err := w.ldg.Commit(ctx, ch); err != nil {
		w.afterCommitError(err)
		return mutationResult{err: fmt.Errorf("remove the reservation from the ledger: %w", err)}
	}
	w.hist.Committed(ch, time.Now(), m.by)
	w.alloc.Unreserve(ip)
	w.log.Info("Released a reservation", "ip", ip, "by", m.by)
	w.event(configMapRef(w.c.cfg.Namespace, ledger.HeadName), "Normal", "ReservationReleased",
		fmt.Sprintf("%s released the reservation of %s (%s)", m.by, ip, found.Note))
	// A Service waiting for this IP may take it now; its pool's counts
	// changed even when none waits.
	var keys []string
	for k := range w.pending {
		keys = append(keys, k)
	}
	w.mark(keys...)
	w.dirty.markPoolWrites()
	return mutationResult{res: found}
}

// callerOf names the authenticated caller of the gRPC call ctx serves
// (pkg/authz), for the history; "unauthenticated" when the server checks
// no credentials.
func callerOf(ctx context.Context) string {
	if u, ok := authz.UserFrom(ctx); ok && u.Username != "" {
		return u.Username
	}
	return "unauthenticated"
}

// historyDrainTimeout bounds how long a term that stops waits for its
// history to be written: what is left is recorded by the next term
// (history.Reconcile).
const historyDrainTimeout = 5 * time.Second

// drainHistory waits, before the ledger is released, until the term's
// history is written.
func (w *worker) drainHistory(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, historyDrainTimeout)
	defer cancel()
	w.hist.Begin()
	if err := w.hist.Drain(ctx); err != nil {
		w.log.Info("Stopped before the address history was written; the next term records what is missing", "err", err)
	}
}

func (w *worker) afterCommitError(err error) { w.enter(err, false) }

var _ = allocator.Error{}
