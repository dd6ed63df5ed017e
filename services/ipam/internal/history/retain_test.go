package history

import (
	"math/rand/v2"
	"net/netip"
	"slices"
	"testing"
	"time"
)

// keepForward is retention as first written (by index, forward: the last
// add of each present holder, then the bounds newest first over all
// entries at once): the reference the writer's trimmer, which sees the
// entries newest run first and one run at a time, must agree with.
func keepForward(r Retention, entries []Entry, now time.Time) []bool {
	type slot struct {
		allocs map[string]int
		res    int
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
	needed := map[int]bool{}
	for _, s := range slots {
		for _, i := range s.allocs {
			needed[i] = true
		}
		if s.res >= 0 {
			needed[s.res] = true
		}
	}
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

// TestTrimmerRunsAgreeWithWholeHistory: the writer trims newest run first,
// a segment at a time (holding one decoded); whatever the cut into runs,
// it keeps exactly what retention over the whole history keeps, and what
// it keeps replays to the same holders. Random histories of few addresses
// and holders (every action, in any order), random bounds and cuts.
func TestTrimmerRunsAgreeWithWholeHistory(t *testing.T) {
	rng := rand.New(rand.NewPCG(49, 2))
	ips := []netip.Addr{netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("10.0.0.2"), netip.MustParseAddr("10.0.0.3")}
	actions := []Action{Granted, Shared, Returned, Taken, Released, Kept, Expired, Reserved, Unreserved}
	names := []string{"a", "b", "c"}
	now := t0.Add(1000 * time.Minute)
	for n := range 2000 {
		entries := make([]Entry, rng.IntN(40))
		for i := range entries {
			name := names[rng.IntN(len(names))]
			entries[i] = Entry{At: t0.Add(time.Duration(i*20+rng.IntN(30)) * time.Minute), IP: ips[rng.IntN(len(ips))],
				Namespace: "ns", Name: name, UID: "u-" + name, Action: actions[rng.IntN(len(actions))], By: IPAM}
		}
		r := Retention{MaxAge: time.Duration(rng.IntN(900)) * time.Minute, MaxPerAddress: rng.IntN(6)}
		want := keepForward(r, entries, now)
		// Cut into runs; hand them newest first.
		var cuts []int
		for i := 1; i < len(entries); i++ {
			if rng.IntN(4) == 0 {
				cuts = append(cuts, i)
			}
		}
		bounds := append(append([]int{0}, cuts...), len(entries))
		tr := r.trimmer(now)
		got := make([]bool, len(entries))
		for j := len(bounds) - 1; j > 0; j-- {
			copy(got[bounds[j-1]:bounds[j]], tr.run(entries[bounds[j-1]:bounds[j]]))
		}
		if !slices.Equal(got, want) {
			t.Fatalf("history %d (runs cut at %v, %+v): trimmer keeps %v, the whole-history rule %v\n%+v", n, cuts, r, got, want, entries)
		}
		kept := pick(entries, got)
		if a, b := Replay(kept), Replay(entries); !holdersEqual(a, b) {
			t.Fatalf("history %d: what is kept replays to %+v, everything to %+v", n, a, b)
		}
	}
}

func holdersEqual(a, b Holders) bool {
	if len(a) != len(b) {
		return false
	}
	for ip, s := range a {
		o, ok := b[ip]
		if !ok || !slices.Equal(s.Allocs, o.Allocs) || (s.Res == nil) != (o.Res == nil) || (s.Res != nil && *s.Res != *o.Res) {
			return false
		}
	}
	return true
}
