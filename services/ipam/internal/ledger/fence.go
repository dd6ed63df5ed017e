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

// handedOver reports whether the term that wrote the ledger last released it
// cleanly: the head names its epoch as released (released, 0 for none) and
// no shard carries a higher one. The next term may then rewrite the head
// alone: that term's writes have all been answered and it writes no more,
// and every earlier term was fenced out of the shards before it, so nobody
// else holds a resourceVersion the shards still have (docs/fencing.md).
func handedOver(layout Layout, released uint64) bool {
	return len(layout) > 0 && released > 0 && layout[0].Epoch == released && layout.Epoch() == released
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
// returned is the first that is not the term's. A shard in unchanged (one
// the term took over from a clean release and has not written, still at
// the resourceVersion it read) is the term's whatever epoch it carries.
func ownershipOf(layout Layout, epoch uint64, term string, unchanged map[string]bool) (ownership, Shard) {
	if len(layout) == 0 {
		return rewritten, Shard{Name: HeadName}
	}
	for _, s := range layout {
		if s.Epoch > epoch {
			return overtaken, s
		}
	}
	for _, s := range layout {
		if (s.Epoch != epoch || s.Term != term) && !unchanged[s.Name] {
			return rewritten, s
		}
	}
	return owned, Shard{}
}
