package history

import (
	"net/netip"
	"slices"
	"time"
)

// Filter selects entries; every field set must match.
type Filter struct {
	IP        netip.Addr
	Namespace string
	Name      string
	UID       string
	Pool      string
	Since     time.Time
	// Visible reports whether the reader may see the entries of a
	// namespace ("" for a reservation for no Service); nil sees all.
	Visible func(namespace string) bool
}

func (f Filter) match(e Entry) bool {
	switch {
	case f.IP.IsValid() && e.IP != f.IP,
		f.Namespace != "" && e.Namespace != f.Namespace,
		f.Name != "" && e.Name != f.Name,
		f.UID != "" && e.UID != f.UID,
		f.Pool != "" && e.Pool != f.Pool,
		!f.Since.IsZero() && e.At.Before(f.Since):
		return false
	}
	return f.Visible == nil || f.Visible(e.Namespace)
}

// Cursor is where a page ended: the time of its last entry, and how many
// entries of that very time it returned (entries of one time keep the
// order written).
type Cursor struct {
	At   time.Time
	Seen int
}

// Query returns the entries matching f, oldest first (entries of one time
// in the order written), after cursor, at most size, and the cursor after
// them (ok false when there are no more).
func Query(entries []Entry, f Filter, after Cursor, size int) (page []Entry, next Cursor, more bool) {
	sorted := slices.Clone(entries)
	slices.SortStableFunc(sorted, func(a, b Entry) int { return a.At.Compare(b.At) })
	start, _ := slices.BinarySearchFunc(sorted, after.At, func(e Entry, t time.Time) int { return e.At.Compare(t) })
	// at counts the matching entries of the current time so far, those of
	// earlier pages included.
	var cur time.Time
	at := 0
	for _, e := range sorted[start:] {
		if !f.match(e) {
			continue
		}
		if !e.At.Equal(cur) {
			cur, at = e.At, 0
		}
		at++
		if e.At.Equal(after.At) && at <= after.Seen {
			continue
		}
		if len(page) == size {
			return page, next, true
		}
		page = append(page, e)
		next = Cursor{At: e.At, Seen: at}
	}
	return page, next, false
}
