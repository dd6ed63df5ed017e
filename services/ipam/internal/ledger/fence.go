package ledger

import (
	"fmt"
	"math"
)

// Epoch is the highest fencing epoch of the layout's shards: that of the last
// term that fenced the ledger (0 for no ledger, or one written before epochs
// existed).
func (l Layout) Epoch() uint64 {
	var e uint64
	for _, s := range l {
		e = max(e, s.Epoch)
	}
	return e
}

// FenceEpoch is the epoch a term writes when it opens the ledger: one more
// than any shard carries, so that it is higher than every earlier term's
// whatever happened to the Lease. A term that opens the ledger again (after
// a failed write) and finds its own epoch still the highest, on the head,
// keeps it: the epoch counts terms, not retries.
func FenceEpoch(layout Layout, term string) (uint64, error) {
	e := layout.Epoch()
	if len(layout) > 0 && e > 0 && layout[0].Epoch == e && layout[0].Term == term {
		return e, nil
	}
	if e == math.MaxUint64 {
		return 0, fmt.Errorf("epoch %d cannot grow", e)
	}
	return e + 1, nil
}

// ownership is what a term finds when it reads the ledger again after a
// write of its own failed.
type ownership int

const (
	// owned: every listed shard carries the term's epoch and term; the
	// failed write may be decided again and retried.
	owned ownership = iota
	// overtaken: a shard carries a higher epoch, so a later term fenced
	// the ledger (or a backup from a longer history was restored).
	overtaken
	// rewritten: a shard carries a lower epoch, or the same epoch under
	// another term, or the ledger is gone: it was changed outside the
	// fencing protocol (restored, edited or deleted by hand).
	rewritten
)

// ownershipOf classifies the layout for a term holding epoch; the shard
// returned is the first that is not the term's.
func ownershipOf(layout Layout, epoch uint64, term string) (ownership, Shard) {
	if len(layout) == 0 {
		return rewritten, Shard{Name: HeadName}
	}
	for _, s := range layout {
		if s.Epoch > epoch {
			return overtaken, s
		}
	}
	for _, s := range layout {
		if s.Epoch != epoch || s.Term != term {
			return rewritten, s
		}
	}
	return owned, Shard{}
}
