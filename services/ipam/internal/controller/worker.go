package controller

import (
	"log/slog"
	"time"

	"github.com/ipledger/ipledger/pkg/leader"
	"github.com/ipledger/ipledger/pkg/stream"
	"github.com/ipledger/ipledger/services/ipam/internal/allocator"
	"github.com/ipledger/ipledger/services/ipam/internal/history"
	"github.com/ipledger/ipledger/services/ipam/internal/ledger"
	"github.com/ipledger/ipledger/services/ipam/internal/objects"
	"github.com/ipledger/ipledger/services/ipam/internal/plan"
)

// worker is one term's state. Only the loop goroutine touches the allocator,
// the ledger writer and the expectations; handlers only mark keys dirty.
// What it does is in files named for each job: its life and loop
// (term.go), the stream's handlers (handler.go), opening and releasing the
// ledger (open.go), a pass (pass.go), the status writes under way
// (flight.go) and the IPPools' (poolstatus.go), the mutations (mutate.go).
type worker struct {
	c    *Controller
	term *leader.Term
	log  *slog.Logger

	ldg          *ledger.Ledger
	alloc        *allocator.Allocator
	invalidPools map[string]error
	conflicts    []plan.Conflict
	// lifecycle is the term's phase (term.go moves it); w.ldg is set only
	// while serving.
	lifecycle

	// queue is what the loop has to do: the dirty Services, their retries,
	// the timers, the mutations and the Services waiting (queue.go).
	queue
	// ownWrites are the term's writes: the Services' status writes under way
	// and landed, and the IPPools' statuses (writes.go).
	ownWrites

	// hist writes the history of the term's changes (history.Writer);
	// opened is the ledger the last open read, handed to it.
	hist   *history.Writer
	opened ledger.State
}

func newWorker(c *Controller, term *leader.Term) *worker {
	return &worker{
		c: c, term: term, log: c.log.With("term", term.ID()),
		queue:     newQueue(term.Stopping()),
		ownWrites: newOwnWrites(c.cfg.StatusWorkers),
	}
}

// phase is where a term is in its life. One function, enter, moves between
// phases, and one table, afterLedger, says which phase a ledger error leads
// to; the loop only does what the current phase calls for (term.go).
type phase int

const (
	// opening: the ledger is read and fenced, and the allocator rebuilt,
	// before anything is decided (the term's start).
	opening phase = iota
	// serving: dirty Services are decided in passes.
	serving
	// reopening: a ledger write failed, so the ledger as stored is read and
	// fenced again (under this same term) before anything more is decided.
	reopening
	// corrupt: the ledger cannot be read; nothing is allocated, every pool
	// says so, and it is read again now and then until it is repaired.
	corrupt
	// fenced: a newer term owns the ledger. Nothing more is written; the
	// term waits for its end.
	fenced
)

func (p phase) String() string {
	return [...]string{"opening", "serving", "reopening", "corrupt", "fenced"}[p]
}

// lifecycle is a term's phase and what its phases need.
type lifecycle struct {
	phase phase
	// retryAt is when the ledger is read again (opening, reopening, corrupt).
	retryAt time.Time
	// corrupt is the error of the corrupt ledger, while the phase is corrupt.
	corrupt *ledger.CorruptError
	// statusesOwed: a phase transition changed what every pool's status
	// says (the ledger turned unreadable); the loop's next step writes them.
	// A transition itself does no I/O.
	statusesOwed bool
}

func (w *worker) store() *stream.Store { return w.c.source.Store() }

// env finds, in the stream, what requests depend on besides the Services:
// a new one for each decision (objects.Memo).
func (w *worker) env() objects.Env {
	return objects.Env{Objects: objects.Memo(w.store()), GatewayServiceNamespaces: w.c.cfg.GatewayServiceNamespaces}
}
