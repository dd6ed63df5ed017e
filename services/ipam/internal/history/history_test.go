package history

import (
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/ipledger/ipledger/services/ipam/internal/ledger"
)

var (
	ip  = netip.MustParseAddr("10.1.2.3")
	t0  = time.Date(2026, 11, 1, 12, 0, 0, 0, time.UTC)
	svA = ledger.ServiceRef{Namespace: "a", Name: "web", UID: "u-a"}
	svB = ledger.ServiceRef{Namespace: "b", Name: "api", UID: "u-b"}
)

func alloc(s ledger.ServiceRef) ledger.Allocation {
	return ledger.Allocation{IP: ip, Pool: "lan", Service: s, AllocatedAt: t0}
}

func kept(s ledger.ServiceRef) ledger.Reservation {
	return ledger.Reservation{IP: ip, Note: ledger.KeptNote(""), ForService: &s, CreatedAt: t0}
}

// TestChanges: each ledger change, from the holders before it, gives the
// entries its action names.
func TestChanges(t *testing.T) {
	for _, tc := range []struct {
		name   string
		before ledger.State
		change ledger.Change
		want   []Action
		ns     []string
	}{
		{"granted", ledger.State{}, ledger.Change{Allocate: []ledger.Allocation{alloc(svA)}}, []Action{Granted}, []string{"a"}},
		{"shared", ledger.State{Allocations: []ledger.Allocation{alloc(svA)}}, ledger.Change{Allocate: []ledger.Allocation{alloc(svB)}}, []Action{Shared}, []string{"b"}},
		{"released", ledger.State{Allocations: []ledger.Allocation{alloc(svA)}}, ledger.Change{Release: []ledger.Allocation{alloc(svA)}}, []Action{Released}, []string{"a"}},
		{"kept", ledger.State{Allocations: []ledger.Allocation{alloc(svA)}},
			ledger.Change{Release: []ledger.Allocation{alloc(svA)}, Reserve: []ledger.Reservation{kept(svA)}}, []Action{Kept}, []string{"a"}},
		{"returned", ledger.State{Reservations: []ledger.Reservation{kept(svA)}},
			ledger.Change{Unreserve: []netip.Addr{ip}, Allocate: []ledger.Allocation{alloc(svA)}}, []Action{Returned}, []string{"a"}},
		{"taken by another", ledger.State{Reservations: []ledger.Reservation{kept(svA)}},
			ledger.Change{Unreserve: []netip.Addr{ip}, Allocate: []ledger.Allocation{alloc(svB)}}, []Action{Taken}, []string{"b"}},
		{"expired", ledger.State{Reservations: []ledger.Reservation{kept(svA)}}, ledger.Change{Unreserve: []netip.Addr{ip}}, []Action{Expired}, []string{"a"}},
		{"reserved", ledger.State{}, ledger.Change{Reserve: []ledger.Reservation{{IP: ip, Note: "router"}}}, []Action{Reserved}, []string{""}},
		{"unreserved", ledger.State{Reservations: []ledger.Reservation{{IP: ip, Note: "router"}}}, ledger.Change{Unreserve: []netip.Addr{ip}}, []Action{Unreserved}, []string{""}},
		{"re-created Service (another UID)", ledger.State{Allocations: []ledger.Allocation{alloc(svA)}},
			ledger.Change{Allocate: []ledger.Allocation{alloc(ledger.ServiceRef{Namespace: "a", Name: "web", UID: "u-a2"})}}, []Action{Released, Granted}, []string{"a", "a"}},
		{"no change of holder", ledger.State{Allocations: []ledger.Allocation{alloc(svA)}}, ledger.Change{Allocate: []ledger.Allocation{alloc(svA)}}, nil, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := FromState(tc.before)
			got := h.Changes(tc.change, t0, "someone")
			var acts []Action
			var ns []string
			for _, e := range got {
				acts = append(acts, e.Action)
				ns = append(ns, e.Namespace)
				if e.By != "someone" || !e.At.Equal(t0) || e.IP != ip {
					t.Errorf("entry %+v: want by someone at %s of %s", e, t0, ip)
				}
			}
			if !slices.Equal(acts, tc.want) || !slices.Equal(ns, tc.ns) {
				t.Fatalf("got %v in %q, want %v in %q", acts, ns, tc.want, tc.ns)
			}
			// What the entries say is what the ledger now holds.
			said := Replay(append(Reconcile(Holders{}, tc.before, t0, IPAM, HowRecovered), got...))
			if left := Reconcile(said, stateOf(h), t0, IPAM, HowRecovered); len(left) > 0 {
				t.Fatalf("replaying the entries leaves %+v unsaid", left)
			}
		})
	}
}

// stateOf is h as a ledger state (allocations and reservations).
func stateOf(h Holders) ledger.State {
	var st ledger.State
	for ip, s := range h {
		for _, a := range s.Allocs {
			st.Allocations = append(st.Allocations, ledger.Allocation{IP: ip, Pool: a.Pool, Service: ledger.ServiceRef{Namespace: a.Namespace, Name: a.Name, UID: a.UID}})
		}
		if r := s.Res; r != nil {
			lr := ledger.Reservation{IP: ip, Note: r.Note}
			if r.For != (Holder{}) {
				lr.ForService = &ledger.ServiceRef{Namespace: r.For.Namespace, Name: r.For.Name, UID: r.For.UID}
			}
			if r.Kept {
				lr.Note = ledger.KeptNote("")
			}
			st.Reservations = append(st.Reservations, lr)
		}
	}
	return st
}

// TestReconcile: a change no entry recorded is found, dated by the ledger
// where it keeps the time, and marked how it was found.
func TestReconcile(t *testing.T) {
	later := t0.Add(time.Hour)
	said := Replay([]Entry{{At: t0, IP: ip, Namespace: "a", Name: "web", UID: "u-a", Action: Granted, By: IPAM}})
	st := ledger.State{Allocations: []ledger.Allocation{{IP: ip, Pool: "lan", Service: svB, AllocatedAt: t0.Add(time.Minute)}}}
	for how, grantedAt := range map[string]time.Time{HowRecovered: t0.Add(time.Minute), HowRestored: later} {
		got := Reconcile(said, st, later, IPAM, how)
		want := []Entry{
			{At: later, IP: ip, Namespace: "a", Name: "web", UID: "u-a", Action: Released, By: IPAM, How: how},
			{At: grantedAt, IP: ip, Pool: "lan", Namespace: "b", Name: "api", UID: "u-b", Action: Granted, By: IPAM, How: how},
		}
		if !slices.Equal(got, want) {
			t.Fatalf("%s: got %+v\nwant %+v", how, got, want)
		}
	}
	if left := Reconcile(FromState(st), st, later, IPAM, HowRecovered); len(left) != 0 {
		t.Fatalf("a history that says what the ledger holds: got %+v, want nothing", left)
	}
}

// TestTrim: retention drops the oldest entries by age and by count per
// address, never the one that says who holds an address now.
func TestTrim(t *testing.T) {
	other := netip.MustParseAddr("10.1.2.4")
	e := func(min int, addr netip.Addr, act Action, ns string) Entry {
		return Entry{At: t0.Add(time.Duration(min) * time.Minute), IP: addr, Namespace: ns, Name: "s", Action: act, By: IPAM}
	}
	history := []Entry{
		e(0, other, Granted, "x"), // held since: kept whatever its age
		e(1, ip, Granted, "a"),
		e(2, ip, Released, "a"),
		e(3, ip, Granted, "b"),
		e(4, ip, Released, "b"),
		e(5, ip, Granted, "c"), // held now
		e(6, ip, Reserved, ""), // held now, and newest
	}
	now := t0.Add(10 * time.Minute)
	for _, tc := range []struct {
		name string
		r    Retention
		want []int // indexes of history kept
	}{
		{"unbounded", Retention{}, []int{0, 1, 2, 3, 4, 5, 6}},
		{"by age", Retention{MaxAge: 7 * time.Minute}, []int{0, 3, 4, 5, 6}},
		{"by count per address", Retention{MaxPerAddress: 3}, []int{0, 4, 5, 6}},
		{"count below the current holders", Retention{MaxPerAddress: 1}, []int{0, 5, 6}},
		{"both", Retention{MaxAge: 5 * time.Minute, MaxPerAddress: 4}, []int{0, 5, 6}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, dropped := tc.r.Trim(history, now)
			var want []Entry
			for _, i := range tc.want {
				want = append(want, history[i])
			}
			if !slices.Equal(got, want) || dropped != (len(want) != len(history)) {
				t.Fatalf("got %+v (dropped %v)\nwant %+v", got, dropped, want)
			}
			if left := Reconcile(Replay(got), stateOf(Replay(history)), now, IPAM, HowRecovered); len(left) > 0 {
				t.Fatalf("what is kept says another holder than the whole: %+v", left)
			}
		})
	}
}

// TestQuery: filters, pages across entries of one time, and a reader that
// sees only some namespaces never gets another's entry.
func TestQuery(t *testing.T) {
	var entries []Entry
	for i, ns := range []string{"a", "b", "a", "a", "b", ""} {
		at := t0.Add(time.Duration(i/2) * time.Minute) // pairs share a time
		entries = append(entries, Entry{At: at, IP: ip, Namespace: ns, Name: "s", Action: Granted, Pool: "lan"})
	}
	collect := func(f Filter, size int) []Entry {
		var out []Entry
		var c Cursor
		for {
			page, next, more := Query(entries, f, c, size)
			out = append(out, page...)
			if !more {
				return out
			}
			c = next
		}
	}
	if got := collect(Filter{}, 1); !slices.Equal(got, entries) {
		t.Fatalf("pages of 1: got %+v, want every entry", got)
	}
	onlyA := collect(Filter{Visible: func(ns string) bool { return ns == "a" }}, 2)
	if len(onlyA) != 3 || slices.ContainsFunc(onlyA, func(e Entry) bool { return e.Namespace != "a" }) {
		t.Fatalf("reader of a: got %+v, want the 3 entries of a only", onlyA)
	}
	if got := collect(Filter{Since: t0.Add(time.Minute), Namespace: "b"}, 5); len(got) != 1 || got[0] != entries[4] {
		t.Fatalf("since and namespace: got %+v, want entry 4", got)
	}
}

// TestSplit: a backlog is sealed in runs under the limit, in order, and
// the head keeps what is left (nothing, once it is past the head's limit).
func TestSplit(t *testing.T) {
	var entries []Entry
	for i := range 100 {
		entries = append(entries, Entry{At: t0.Add(time.Duration(i) * time.Second), IP: ip, Namespace: "a", Name: "s", Action: Granted, By: IPAM})
	}
	one := len(encodeEntries(entries[:1]))
	for _, tc := range []struct {
		name  string
		limit int
		runs  []int // entries per run, the head's last
	}{
		{"all in the head", 1000 * one, []int{100}},
		{"sealed in runs of 30", 30 * one, []int{30, 30, 30, 10}},
		{"the last run more than half full is sealed too", 35 * one, []int{35, 35, 30, 0}},
		{"half full stays in the head", 40 * one, []int{40, 40, 20}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := split(entries, tc.limit, tc.limit/2)
			var runs []int
			var all []Entry
			for _, r := range got {
				runs = append(runs, len(r))
				all = append(all, r...)
			}
			if !slices.Equal(runs, tc.runs) || !slices.Equal(all, entries) {
				t.Fatalf("runs %v, want %v (in order: %v)", runs, tc.runs, slices.Equal(all, entries))
			}
		})
	}
}

func TestNextWrite(t *testing.T) {
	for _, tc := range []struct {
		name      string
		last, now time.Time
		urgent    bool
		want      time.Duration
	}{
		{"the first write is not held", time.Time{}, t0, false, 0},
		{"a write a moment ago holds the next for the rest of the second", t0, t0.Add(300 * time.Millisecond), false, 700 * time.Millisecond},
		{"a second or more after the last, at once", t0, t0.Add(1500 * time.Millisecond), false, -500 * time.Millisecond},
		{"urgent, at once", t0, t0.Add(time.Millisecond), true, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := nextWrite(tc.last, tc.now, time.Second, tc.urgent); got != tc.want {
				t.Fatalf("nextWrite = %s, want %s", got, tc.want)
			}
		})
	}
}
