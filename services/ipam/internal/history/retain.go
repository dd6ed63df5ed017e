package history

import (
	"net/netip"
	"time"
)

// Retention bounds the history: entries older than MaxAge, and all but the
// newest MaxPerAddress of an address, are dropped (0: no bound of that
// kind). Neither drops the entry that says who holds an address now (the
// last one that gave its holder the address): it is what the next term
// compares the ledger with (Reconcile), and what a reader asks first.
type Retention struct {
	MaxAge        time.Duration
	MaxPerAddress int
}

// DefaultRetention is ipam's default (docs/history.md, BENCHMARKS.md): 30
// days, and 10 entries per address (about five holders). An entry is
// ≈ 186 bytes stored, so whatever the churn the history stays under
// ≈ 1.9 KB per address of the pools: 19 MB at 10,000 addresses, 190 MB
// at 100,000.
var DefaultRetention = Retention{MaxAge: 30 * 24 * time.Hour, MaxPerAddress: 10}

// Trim returns the entries (in the order written) r keeps at now, and
// whether it dropped any. Replay of what it keeps is Replay of entries: an
// add it keeps is either the holder's last (kept whatever its age), or
// within the bounds, and then so is every later entry of its address.
func (r Retention) Trim(entries []Entry, now time.Time) ([]Entry, bool) {
	keep := r.keep(entries, now)
	out := make([]Entry, 0, len(entries))
	for i, e := range entries {
		if keep[i] {
			out = append(out, e)
		}
	}
	return out, len(out) != len(entries)
}

// keep says, by index, which of entries Trim keeps.
func (r Retention) keep(entries []Entry, now time.Time) []bool {
	needed := current(entries)
	perAddress := map[netip.Addr]int{}
	keep := make([]bool, len(entries))
	for i := len(entries) - 1; i >= 0; i-- {
		e := entries[i]
		perAddress[e.IP]++
		young := r.MaxAge <= 0 || now.Sub(e.At) <= r.MaxAge
		few := r.MaxPerAddress <= 0 || perAddress[e.IP] <= r.MaxPerAddress
		keep[i] = needed[i] || (young && few)
	}
	return keep
}

// current marks, by index, the entries that gave each present holder its
// address: the last add of each holder Replay ends with.
func current(entries []Entry) map[int]bool {
	type slot struct {
		allocs map[string]int // holder -> index of its add
		res    int            // index of the reservation's add, -1 none
	}
	slots := map[netip.Addr]*slot{}
	for i, e := range entries {
		s := slots[e.IP]
		if s == nil {
			s = &slot{allocs: map[string]int{}, res: -1}
			slots[e.IP] = s
		}
		key := e.Namespace + "/" + e.Name + "/" + e.UID
		switch e.Action {
		case Granted, Shared:
			s.allocs[key] = i
		case Returned, Taken:
			s.allocs[key], s.res = i, -1
		case Released:
			delete(s.allocs, key)
		case Kept:
			delete(s.allocs, key)
			s.res = i
		case Expired, Unreserved:
			s.res = -1
		case Reserved:
			s.res = i
		}
	}
	out := map[int]bool{}
	for _, s := range slots {
		for _, i := range s.allocs {
			out[i] = true
		}
		if s.res >= 0 {
			out[s.res] = true
		}
	}
	return out
}
