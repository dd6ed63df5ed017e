package controller

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"time"

	"github.com/ipledger/ipledger/pkg/authz"

	"github.com/ipledger/ipledger/services/ipam/internal/ledger"
	"github.com/ipledger/ipledger/services/ipam/internal/plan"
)

// ErrNotLeader means this replica holds no term (or has not finished
// starting one): mutations go to the leader.
var ErrNotLeader = errors.New("this replica is not the leader")

// ErrNotReserved is returned by Unreserve for an IP without a reservation.
var ErrNotReserved = plan.ErrNotReserved

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

// refusal is why the term takes no mutation in phase p (nil when it
// takes them: serving).
func refusal(p phase) error {
	switch p {
	case serving:
		return nil
	case fenced:
		return ErrNotLeader
	}
	return errors.New("the ledger is being re-read after a failed write")
}

// apply runs a mutation in the loop: it reads what the allocator and the
// ledger hold for the IP, plan.Reserve or plan.Unreserve decides, and it
// applies that: allocator first (it refuses IPs in use), then the ledger;
// the allocator is rolled back if the ledger write fails.
func (w *worker) apply(ctx context.Context, m mutation) mutationResult {
	if err := refusal(w.phase); err != nil {
		return mutationResult{err: err}
	}
	var mu plan.Mutation
	if r := m.reserve; r != nil {
		mu = plan.Reserve(*r, held(w.alloc, w.ldg, r.IP))
	} else {
		mu = plan.Unreserve(m.unreserve, held(w.alloc, w.ldg, m.unreserve))
	}
	if mu.Err != nil || mu.Change.Empty() {
		return mutationResult{res: mu.Answer, err: mu.Err}
	}
	if mu.Take != nil {
		if err := w.alloc.Reserve(*mu.Take); err != nil {
			return mutationResult{err: err}
		}
	}
	if err := w.ldg.Commit(ctx, mu.Change); err != nil {
		what := "remove the reservation from the ledger"
		if mu.Take != nil {
			w.alloc.Unreserve(mu.Take.IP)
			what = "record the reservation in the ledger"
		}
		w.afterCommitError(err)
		return mutationResult{err: fmt.Errorf("%s: %w", what, err)}
	}
	w.hist.Committed(mu.Change, time.Now(), m.by)
	if mu.Free.IsValid() {
		w.alloc.Unreserve(mu.Free)
	}
	w.tell(m, mu)
	return mutationResult{res: mu.Answer}
}

// tell logs and records the Event of an applied mutation, and marks what
// it changed: its pool's counts, and for a released reservation the
// Services waiting (one may take the IP now).
func (w *worker) tell(m mutation, mu plan.Mutation) {
	head := configMapRef(w.c.cfg.Namespace, ledger.HeadName)
	if r := m.reserve; r != nil {
		w.log.Info("Reserved an address", "ip", r.IP, "note", r.Note, "by", m.by)
		w.event(head, "Normal", "AddressReserved", fmt.Sprintf("%s reserved %s: %s", m.by, r.IP, r.Note))
		w.dirty.markPoolWrites()
		return
	}
	ip := m.unreserve
	w.log.Info("Released a reservation", "ip", ip, "by", m.by)
	w.event(head, "Normal", "ReservationReleased", fmt.Sprintf("%s released the reservation of %s (%s)", m.by, ip, mu.Answer.Note))
	keys := make([]string, 0, len(w.pending))
	for k := range w.pending {
		keys = append(keys, k)
	}
	w.mark(keys...)
	w.dirty.markPoolWrites()
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
