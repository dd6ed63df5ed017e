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
	return r.trimmer(now).run(entries)
}

// trimmer decides retention newest first, one run of entries at a time:
// the caller hands it the newest run (the head's entries), then each older
// one (the sealed segments, newest to oldest), and gets for each which of
// its entries are kept. It holds no entry, only a count per address and
// the (address, holder) pairs and addresses it has seen: the writer never
// holds more than one segment decoded to trim.
func (r Retention) trimmer(now time.Time) *trimmer {
	return &trimmer{r: r, now: now, perAddress: map[netip.Addr]int{}, seenAlloc: map[holderAt]bool{}, seenRes: map[netip.Addr]bool{}}
}

type trimmer struct {
	r          Retention
	now        time.Time
	perAddress map[netip.Addr]int
	// seenAlloc: an entry of this holder's allocation of this address
	// (an add, Released or Kept) was seen, newer than the rest.
	seenAlloc map[holderAt]bool
	// seenRes: an entry of this address's reservation (Kept, Reserved,
	// Returned, Taken, Expired, Unreserved) was seen.
	seenRes map[netip.Addr]bool
}

type holderAt struct {
	ip            netip.Addr
	ns, name, uid string
}

// run says, by index, which of entries (older than every run before) are
// kept. An entry is needed — kept whatever its age and count — when it
// gave a present holder its address: the newest entry of that holder's
// allocation of the address is an add (Granted, Shared, Returned, Taken),
// or the newest entry of the address's reservation is Kept or Reserved
// (what Replay ends with).
func (t *trimmer) run(entries []Entry) []bool {
	keep := make([]bool, len(entries))
	for i := len(entries) - 1; i >= 0; i-- {
		e := entries[i]
		needed := false
		switch e.Action {
		case Granted, Shared, Returned, Taken, Released, Kept:
			k := holderAt{ip: e.IP, ns: e.Namespace, name: e.Name, uid: e.UID}
			if !t.seenAlloc[k] {
				t.seenAlloc[k] = true
				needed = e.Action != Released && e.Action != Kept
			}
		}
		switch e.Action {
		case Kept, Reserved, Returned, Taken, Expired, Unreserved:
			if !t.seenRes[e.IP] {
				t.seenRes[e.IP] = true
				needed = needed || e.Action == Kept || e.Action == Reserved
			}
		}
		t.perAddress[e.IP]++
		young := t.r.MaxAge <= 0 || t.now.Sub(e.At) <= t.r.MaxAge
		few := t.r.MaxPerAddress <= 0 || t.perAddress[e.IP] <= t.r.MaxPerAddress
		keep[i] = needed || (young && few)
	}
	return keep
}
