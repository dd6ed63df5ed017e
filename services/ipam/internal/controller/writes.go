package controller

import "github.com/ipledger/ipledger/services/ipam/internal/poolplan"

// ownWrites are what a term writes and what it knows of its own writes, so
// that the stream's echo of them is never taken for news.
type ownWrites struct {
	// writes are the Services' status writes under way (flight.go).
	writes *writesInFlight
	// expect is what this term wrote to each Service, until the stream
	// shows it (a lagging stream must never make us decide again).
	expect *expectations
	// poolStatuses are the IPPool statuses this term wrote (poolstatus.go).
	poolStatuses poolStatusBook
}

// newOwnWrites has nothing written yet, and writes Services' statuses with
// up to writers at once.
func newOwnWrites(writers int) ownWrites {
	return ownWrites{
		writes: newWritesInFlight(writers), expect: newExpectations(),
		poolStatuses: poolStatusBook{written: map[string]poolplan.Written{}},
	}
}

// forgetPoolStatuses forgets the IPPool statuses written before a rebuild:
// they describe the allocator it replaced, so every pool's status is
// written again.
func (o *ownWrites) forgetPoolStatuses() { clear(o.poolStatuses.written) }
