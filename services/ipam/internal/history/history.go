// Package history keeps who held each address, and when: every change of
// holder the ledger commits (granted, shared, released, kept, returned,
// taken, expired, reserved, unreserved) becomes an Entry, and what no entry
// recorded (a crash between a ledger commit and its history write, a
// ledger restored from a backup) is found at the next term start by
// comparing the holders the history says with the ledger as read
// (Reconcile). The decisions — a change's entries (Diff), what retention
// keeps (Trim), a reader's page (Query) — are pure; store.go keeps the
// entries in ConfigMaps of their own, apart from the ledger (docs/history.md).
package history

import (
	"maps"
	"net/netip"
	"slices"
	"time"

	"github.com/ipledger/ipledger/services/ipam/internal/ledger"
)

// Action is what happened to an address.
type Action string

// The actions. Those that add a holder are Adds.
const (
	// Granted: a Service was given the address.
	Granted Action = "granted"
	// Shared: a Service was given an address another Service holds (a
	// sharing key).
	Shared Action = "shared"
	// Returned: the Service an address was kept for took it back.
	Returned Action = "returned"
	// Taken: a Service took an address kept for another (its pool had
	// nothing else free).
	Taken Action = "taken"
	// Released: a Service gave the address up (deleted, changed, no longer
	// ipam's).
	Released Action = "released"
	// Kept: a Service released the address and it is kept for it for its
	// pool's grace period.
	Kept Action = "kept"
	// Expired: the grace period of a kept address ended; it is free.
	Expired Action = "expired"
	// Reserved: an operator reserved the address (ReserveAddress).
	Reserved Action = "reserved"
	// Unreserved: an operator released a reservation (ReleaseReservation).
	Unreserved Action = "unreserved"
)

// adds reports whether a leaves the entry's holder holding the address.
func (a Action) adds() bool {
	switch a {
	case Granted, Shared, Returned, Taken, Kept, Reserved:
		return true
	}
	return false
}

// IPAM is the actor of ipam's own decisions.
const IPAM = "ipam"

// How an entry came to be written, when not with its change.
const (
	// HowRecovered: found at a term start, the change's own entry missing
	// (the term before stopped between its ledger commit and its history
	// write). At is the ledger's time of the change where it keeps one,
	// else the time it was found.
	HowRecovered = "recovered"
	// HowRestored: found at a term start after somebody else wrote the
	// ledger (a restore from backup, a repair).
	HowRestored = "restored"
)

// Entry is one change of who holds one address.
type Entry struct {
	At        time.Time  `json:"t"`
	IP        netip.Addr `json:"ip"`
	Pool      string     `json:"pool,omitempty"`
	Namespace string     `json:"ns,omitempty"`
	Name      string     `json:"name,omitempty"`
	UID       string     `json:"uid,omitempty"`
	Action    Action     `json:"act"`
	// By is who did it: IPAM, or the authenticated caller of the gRPC call.
	By string `json:"by"`
	// Note is a reservation's note.
	Note string `json:"note,omitempty"`
	// How is "" for an entry written with its change, else HowRecovered or
	// HowRestored.
	How string `json:"how,omitempty"`
}

// Holder is a Service holding an address, or the one a reservation is for.
type Holder struct {
	Pool      string
	Namespace string
	Name      string
	UID       string
}

func (h Holder) same(o Holder) bool {
	return h.Namespace == o.Namespace && h.Name == o.Name && h.UID == o.UID
}

// Reservation is an address held outside any Service: kept for a Service
// that released it, or reserved by an operator (for a Service, or none).
type Reservation struct {
	Kept bool
	For  Holder
	Note string
}

// Slot is who holds one address: the Services it is allocated to, and its
// reservation (the ledger keeps at most one per address).
type Slot struct {
	Allocs []Holder
	Res    *Reservation
}

func (s Slot) empty() bool { return len(s.Allocs) == 0 && s.Res == nil }

func (s Slot) has(h Holder) bool {
	return slices.ContainsFunc(s.Allocs, h.same)
}

// Holders are the slots of every address held.
type Holders map[netip.Addr]Slot

// FromState is who holds what in a ledger state.
func FromState(st ledger.State) Holders {
	out := Holders{}
	for _, a := range st.Allocations {
		s := out[a.IP]
		s.Allocs = append(s.Allocs, Holder{Pool: a.Pool, Namespace: a.Service.Namespace, Name: a.Service.Name, UID: a.Service.UID})
		out[a.IP] = s
	}
	for _, r := range st.Reservations {
		s := out[r.IP]
		s.Res = reservationOf(r)
		out[r.IP] = s
	}
	return out
}

func reservationOf(r ledger.Reservation) *Reservation {
	res := &Reservation{Note: r.Note}
	if r.ForService != nil {
		res.For = Holder{Namespace: r.ForService.Namespace, Name: r.ForService.Name, UID: r.ForService.UID}
	}
	if _, ok := r.Kept(); ok {
		res.Kept, res.Note = true, ""
	}
	return res
}

// Apply applies a committed change to h and returns the addresses it
// touched with their slots before it (for Diff).
func (h Holders) Apply(ch ledger.Change) map[netip.Addr]Slot {
	before := map[netip.Addr]Slot{}
	touch := func(ip netip.Addr) Slot {
		s := h[ip]
		if _, ok := before[ip]; !ok {
			before[ip] = Slot{Allocs: slices.Clone(s.Allocs), Res: s.Res}
		}
		return s
	}
	for _, a := range ch.Release {
		s := touch(a.IP)
		s.Allocs = slices.DeleteFunc(s.Allocs, func(x Holder) bool { return x.Namespace == a.Service.Namespace && x.Name == a.Service.Name })
		h.set(a.IP, s)
	}
	for _, ip := range ch.Unreserve {
		s := touch(ip)
		s.Res = nil
		h.set(ip, s)
	}
	for _, r := range ch.Reserve {
		s := touch(r.IP)
		s.Res = reservationOf(r)
		h.set(r.IP, s)
	}
	for _, a := range ch.Allocate {
		s := touch(a.IP)
		s.Allocs = slices.DeleteFunc(s.Allocs, func(x Holder) bool { return x.Namespace == a.Service.Namespace && x.Name == a.Service.Name })
		s.Allocs = append(s.Allocs, Holder{Pool: a.Pool, Namespace: a.Service.Namespace, Name: a.Service.Name, UID: a.Service.UID})
		h.set(a.IP, s)
	}
	return before
}

func (h Holders) set(ip netip.Addr, s Slot) {
	if s.empty() {
		delete(h, ip)
		return
	}
	h[ip] = s
}

// Diff is the entries of one address whose holders went from before to
// after, at, by by. A Service given the address its kept reservation was
// for Returned it, any other Taken it; a Service whose allocation became a
// kept reservation for it Kept it; a kept reservation gone with nobody
// taking it Expired.
func Diff(ip netip.Addr, before, after Slot, at time.Time, by string) []Entry {
	entry := func(h Holder, act Action) Entry {
		return Entry{At: at, IP: ip, Pool: h.Pool, Namespace: h.Namespace, Name: h.Name, UID: h.UID, Action: act, By: by}
	}
	var out []Entry
	resGone := before.Res != nil && (after.Res == nil || *after.Res != *before.Res)
	resNew := after.Res != nil && (before.Res == nil || *after.Res != *before.Res)
	keptTaken := false
	for _, h := range before.Allocs {
		if after.has(h) {
			continue
		}
		if resNew && after.Res.Kept && after.Res.For.same(h) {
			out = append(out, entry(h, Kept))
			resNew = false
			continue
		}
		out = append(out, entry(h, Released))
	}
	for _, h := range after.Allocs {
		if before.has(h) {
			continue
		}
		act := Granted
		switch {
		case resGone && before.Res.Kept && before.Res.For.Namespace == h.Namespace && before.Res.For.Name == h.Name:
			act, keptTaken = Returned, true
		case resGone && before.Res.Kept:
			act, keptTaken = Taken, true
		case len(after.Allocs) > 1:
			act = Shared
		}
		out = append(out, entry(h, act))
	}
	if resGone && !keptTaken {
		e := entry(before.Res.For, Unreserved)
		if before.Res.Kept {
			e.Action = Expired
		}
		e.Note = before.Res.Note
		out = append(out, e)
	}
	if resNew {
		e := entry(after.Res.For, Reserved)
		if after.Res.Kept {
			e.Action = Kept
		}
		e.Note = after.Res.Note
		out = append(out, e)
	}
	return out
}

// Changes is the entries of a committed change: Apply to h, then Diff of
// each address it touched, in address order.
func (h Holders) Changes(ch ledger.Change, at time.Time, by string) []Entry {
	before := h.Apply(ch)
	var out []Entry
	for _, ip := range slices.SortedFunc(maps.Keys(before), netip.Addr.Compare) {
		out = append(out, Diff(ip, before[ip], h[ip], at, by)...)
	}
	return out
}

// Replay is who holds what after entries, in the order written: what the
// history says. Retention keeps it (Trim).
func Replay(entries []Entry) Holders {
	h := Holders{}
	for _, e := range entries {
		replay(h, e)
	}
	return h
}

func replay(h Holders, e Entry) {
	s := h[e.IP]
	s.Allocs = slices.Clone(s.Allocs)
	hd := Holder{Pool: e.Pool, Namespace: e.Namespace, Name: e.Name, UID: e.UID}
	switch e.Action {
	case Granted, Shared:
		s.Allocs = append(slices.DeleteFunc(s.Allocs, hd.same), hd)
	case Returned, Taken:
		s.Allocs, s.Res = append(slices.DeleteFunc(s.Allocs, hd.same), hd), nil
	case Released:
		s.Allocs = slices.DeleteFunc(s.Allocs, hd.same)
	case Kept:
		s.Allocs = slices.DeleteFunc(s.Allocs, hd.same)
		s.Res = &Reservation{Kept: true, For: Holder{Namespace: e.Namespace, Name: e.Name, UID: e.UID}}
	case Expired, Unreserved:
		s.Res = nil
	case Reserved:
		s.Res = &Reservation{For: Holder{Namespace: e.Namespace, Name: e.Name, UID: e.UID}, Note: e.Note}
	}
	h.set(e.IP, s)
}

// Reconcile is the entries that bring what the history says (said) to what
// the ledger holds (st), at, how (HowRecovered or HowRestored), by by: the
// changes no entry recorded. A recovered grant is dated by the ledger's
// allocation time and a kept address by its release, where the ledger
// keeps them; a restored change is dated when it was found (the restore's
// entries are copies of older ones: their times are not the restore's).
func Reconcile(said Holders, st ledger.State, at time.Time, by, how string) []Entry {
	now := FromState(st)
	when := map[netip.Addr]time.Time{}
	for _, a := range st.Allocations {
		when[a.IP] = a.AllocatedAt
	}
	for _, r := range st.Reservations {
		when[r.IP] = r.CreatedAt
	}
	ips := make(Holders, len(said)+len(now)) // the keys of both; Diff reads the values from said and now
	maps.Copy(ips, said)
	maps.Copy(ips, now)
	var out []Entry
	for _, ip := range slices.SortedFunc(maps.Keys(ips), netip.Addr.Compare) {
		for _, e := range Diff(ip, said[ip], now[ip], at, by) {
			if t := when[ip]; how == HowRecovered && e.Action.adds() && !t.IsZero() && t.Before(at) {
				e.At = t
			}
			e.How = how
			out = append(out, e)
		}
	}
	return out
}
