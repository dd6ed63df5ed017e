package poolplan

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	watcherv1 "github.com/ipledger/ipledger/proto/ipledger/watcher/v1"
	"github.com/ipledger/ipledger/services/ipam/internal/allocator"
	"github.com/ipledger/ipledger/services/ipam/internal/ledger"
	"github.com/ipledger/ipledger/services/ipam/internal/objects"
	"github.com/ipledger/ipledger/services/ipam/internal/plan"
)

func pool(name string, finalizers ...string) *watcherv1.Object {
	return &watcherv1.Object{Kind: watcherv1.Kind_KIND_IP_POOL,
		Meta: &watcherv1.ObjectMeta{Name: name, Uid: "uid-" + name, CreationTimestamp: int64(time.Second), Generation: 1,
			ResourceVersion: "7", Finalizers: finalizers},
		Body: &watcherv1.Object_IpPool{IpPool: &watcherv1.IPPool{Addresses: []string{"10.0.0.0/30"}, AutoAssign: true}}}
}

func terminating(o *watcherv1.Object) *watcherv1.Object {
	o.Meta.DeletionTimestamp = int64(time.Hour)
	return o
}

func allocatorFor(pools ...*watcherv1.Object) *allocator.Allocator {
	ps, _ := (&objects.PoolSet{}).Parse(pools)
	return plan.Rebuild(plan.Inputs{Ledger: ledger.State{}, Pools: ps, LBClass: objects.DefaultLBClass}).Alloc
}

// renderStatuses is a StatusPlan on lines: "write pool Ready=status/reason
// event=reason", "due +d", "forget pool".
func renderStatuses(p StatusPlan, now time.Time) string {
	var out []string
	for _, w := range p.Writes {
		r := w.Status.ready()
		line := fmt.Sprintf("write %s Ready=%s/%s", w.Pool.GetMeta().GetName(), r.Status, r.Reason)
		if w.Event != nil {
			line += " event=" + w.Event.Reason
		}
		out = append(out, line)
	}
	if !p.Due.IsZero() {
		out = append(out, fmt.Sprintf("due +%s", p.Due.Sub(now)))
	}
	for _, f := range p.Forget {
		out = append(out, "forget "+f)
	}
	return strings.Join(out, "\n")
}

// TestStatuses: which pools' statuses are written, which deferred and
// until when, which Event is told, which pools are forgotten.
func TestStatuses(t *testing.T) {
	t0 := time.Date(2026, 12, 7, 3, 0, 0, 0, time.UTC)
	p, q := pool("p", objects.PoolFinalizer), pool("q", objects.PoolFinalizer)
	q.GetIpPool().Addresses = []string{"10.0.1.0/30"}
	alloc := allocatorFor(p, q)
	served := func(o *watcherv1.Object) Status {
		return Statuses(StatusInputs{Pools: []*watcherv1.Object{o}, Alloc: alloc, Now: t0}).Writes[0].Status
	}
	countsOnly := served(p)
	countsOnly.IPv4 = &FamilyCounts{Total: 4, Used: 1, Available: 3, TotalExact: "4", AvailableExact: "3"}
	for _, tc := range []struct {
		name    string
		in      StatusInputs
		written map[string]Written
		want    string
	}{{
		name: "nothing written this term: every pool now, no Event while Ready",
		in:   StatusInputs{Pools: []*watcherv1.Object{p, q}, Alloc: alloc},
		want: "write p Ready=True/Serving\nwrite q Ready=True/Serving",
	}, {
		name:    "unchanged: nothing",
		in:      StatusInputs{Pools: []*watcherv1.Object{p}, Alloc: alloc},
		written: map[string]Written{"p": {Status: served(p), At: t0.Add(-time.Hour)}},
		want:    "",
	}, {
		name:    "only counts changed soon after a write: deferred until the interval ends",
		in:      StatusInputs{Pools: []*watcherv1.Object{p}, Alloc: alloc},
		written: map[string]Written{"p": {Status: countsOnly, At: t0.Add(-300 * time.Millisecond)}},
		want:    "due +700ms",
	}, {
		name: "two deferred: due at the earliest",
		in:   StatusInputs{Pools: []*watcherv1.Object{p, q}, Alloc: alloc},
		written: map[string]Written{"p": {Status: countsOnly, At: t0.Add(-100 * time.Millisecond)},
			"q": {Status: countsOnly, At: t0.Add(-600 * time.Millisecond)}},
		want: "due +400ms",
	}, {
		name:    "the ledger unreadable: Ready turns False, written at once with an Event",
		in:      StatusInputs{Pools: []*watcherv1.Object{p}, Corrupt: errors.New("shard 0 is corrupt")},
		written: map[string]Written{"p": {Status: served(p), At: t0}},
		want:    "write p Ready=False/LedgerUnreadable event=LedgerUnreadable",
	}, {
		name:    "a pool gone since its write is forgotten",
		in:      StatusInputs{Pools: []*watcherv1.Object{q}, Alloc: alloc},
		written: map[string]Written{"p": {Status: served(p), At: t0}, "q": {Status: served(q), At: t0}},
		want:    "forget p",
	}, {
		name: "a Terminating pool: Ready False with an Event on its first write too",
		in:   StatusInputs{Pools: []*watcherv1.Object{terminating(pool("p", objects.PoolFinalizer))}, Alloc: alloc, Holders: map[string]int{"p": 1}},
		want: "write p Ready=False/Terminating event=Terminating",
	}} {
		t.Run(tc.name, func(t *testing.T) {
			tc.in.Written, tc.in.Now = tc.written, t0
			if got := renderStatuses(Statuses(tc.in), t0); got != tc.want {
				t.Fatalf("Statuses =\n%s\nwant\n%s", got, tc.want)
			}
		})
	}
}

// TestStatusPatchKeepsTransitionTimes: a condition the pool already shows
// with the same status keeps its time; a changed one takes now.
func TestStatusPatchKeepsTransitionTimes(t *testing.T) {
	t0 := time.Date(2026, 12, 7, 3, 0, 0, 0, time.UTC)
	o := pool("p")
	o.GetIpPool().Conditions = []*watcherv1.Condition{
		{Type: "Ready", Status: "True", LastTransitionTime: t0.Add(-time.Hour).UnixNano()},
		{Type: "Invalid", Status: "True", LastTransitionTime: t0.Add(-time.Hour).UnixNano()},
	}
	st := Status{Conditions: []Condition{{Type: "Ready", Status: "True"}, {Type: "Invalid", Status: "False"}}}
	got := string(patch(o, st, t0))
	want := `{"status":{"conditions":[{"lastTransitionTime":"2026-12-07T02:00:00Z","message":"","observedGeneration":0,"reason":"","status":"True","type":"Ready"},` +
		`{"lastTransitionTime":"2026-12-07T03:00:00Z","message":"","observedGeneration":0,"reason":"","status":"False","type":"Invalid"}]}}`
	if got != want {
		t.Fatalf("patch =\n%s\nwant\n%s", got, want)
	}
}

// TestFinalizers: every pool is protected; a Terminating pool is let go
// only once no Service holds its addresses, and only when that is known.
func TestFinalizers(t *testing.T) {
	const other = "example.com/other"
	for _, tc := range []struct {
		name    string
		pools   []*watcherv1.Object
		holders map[string]int
		want    []string // "pool releases=bool patch"
	}{{
		name:  "a new pool gets the finalizer after its others, on its version",
		pools: []*watcherv1.Object{pool("p", other)},
		want:  []string{`p releases=false {"metadata":{"finalizers":["example.com/other","` + objects.PoolFinalizer + `"],"resourceVersion":"7"}}`},
	}, {
		name:  "a protected pool: nothing",
		pools: []*watcherv1.Object{pool("p", objects.PoolFinalizer)},
	}, {
		name:    "Terminating, held: kept",
		pools:   []*watcherv1.Object{terminating(pool("p", objects.PoolFinalizer))},
		holders: map[string]int{"p": 2},
	}, {
		name:  "Terminating, holders unknown: kept",
		pools: []*watcherv1.Object{terminating(pool("p", objects.PoolFinalizer))},
	}, {
		name:    "Terminating, held by none: released, other finalizers kept",
		pools:   []*watcherv1.Object{terminating(pool("p", other, objects.PoolFinalizer))},
		holders: map[string]int{"q": 1},
		want:    []string{`p releases=true {"metadata":{"finalizers":["example.com/other"],"resourceVersion":"7"}}`},
	}, {
		name:    "Terminating, held by none, ours the only one: an empty list",
		pools:   []*watcherv1.Object{terminating(pool("p", objects.PoolFinalizer))},
		holders: map[string]int{},
		want:    []string{`p releases=true {"metadata":{"finalizers":[],"resourceVersion":"7"}}`},
	}, {
		name:  "Terminating without ours: nothing to add",
		pools: []*watcherv1.Object{terminating(pool("p", other))},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			var got []string
			for _, fp := range Finalizers(tc.pools, tc.holders) {
				got = append(got, fmt.Sprintf("%s releases=%t %s", fp.Pool, fp.Releases, fp.Patch))
			}
			if strings.Join(got, "\n") != strings.Join(tc.want, "\n") {
				t.Fatalf("Finalizers =\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(tc.want, "\n"))
			}
		})
	}
}
