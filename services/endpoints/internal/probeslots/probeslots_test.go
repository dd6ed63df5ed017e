package probeslots

import (
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
)

// TestGrant runs scripts of steps against a Table. A step is one of
//
//	workloads NS N   SetWorkloads
//	wait NS N        N × Enqueue
//	giveup NS        Dequeue
//	done NS          Release
//	grant A B -      the next Grants, in order: namespace A, then B, then
//	                 none ("-")
func TestGrant(t *testing.T) {
	for _, tc := range []struct {
		name  string
		limit int
		steps []string
	}{
		{name: "a namespace alone uses every slot but one", limit: 3, steps: []string{
			"workloads a 5", "wait a 4", "grant a a -", "done a", "grant a -",
			// the slot kept goes to the first probe of a namespace.
			"workloads b 1", "wait b 1", "grant b -",
		}},
		{name: "one slot: a namespace alone uses it", limit: 1, steps: []string{
			"workloads a 5", "wait a 2", "grant a -", "done a", "grant a -",
		}},
		{name: "nothing waits, nothing granted", limit: 3, steps: []string{
			"workloads a 5", "grant -",
		}},
		{name: "a flood keeps a slot free for the quiet namespace", limit: 5, steps: []string{
			// share 2: the flood takes 3, leaving 1 for quiet and 1 for a
			// namespace not probing yet.
			"workloads flood 1000", "workloads quiet 1", "wait flood 10", "grant flood flood flood -",
			"wait quiet 1", "grant quiet -",
			// quiet's probe ends: the free slot is quiet's again, not the flood's.
			"done quiet", "grant -", "wait quiet 1", "grant quiet -",
			// a flood probe ends: the slot stays free for quiet.
			"done flood", "grant -", "done flood", "grant flood -",
		}},
		{name: "the flood started first: the quiet namespace's probe finds a slot", limit: 4, steps: []string{
			"workloads flood 1000", "wait flood 10", "grant flood flood flood -",
			"workloads quiet 1", "wait quiet 1", "grant quiet -",
			// every slot taken: the first to free is quiet's (nothing in
			// flight), not the flood's.
			"done quiet", "wait quiet 1", "wait flood 1", "grant quiet -",
		}},
		{name: "every slot held: a freed slot goes to the namespace with nothing in flight", limit: 2, steps: []string{
			"workloads a 1", "workloads b 1", "wait a 1", "wait b 1", "grant a b -",
			"wait a 3", "wait c 1", "done a", "grant c -",
		}},
		{name: "round-robin: every namespace is served", limit: 2, steps: []string{
			// three namespaces, two slots: share 1 each, no borrowing.
			"workloads a 1", "workloads b 1", "workloads c 1",
			"wait a 3", "wait b 3", "wait c 3",
			"grant a b -", "done a", "grant c -", "done b", "grant a -", "done c", "grant b -",
			"done a", "grant c -", "done b", "grant a -", "done c", "grant b -",
		}},
		{name: "more namespaces than slots: the bound holds, one each", limit: 2, steps: []string{
			"workloads a 9", "workloads b 9", "workloads c 9", "wait a 5", "wait b 5", "grant a b -", "done a", "grant a -",
		}},
		{name: "a namespace whose workloads are gone stops counting", limit: 4, steps: []string{
			"workloads a 10", "workloads b 1", "wait a 10", "grant a a -",
			"workloads b 0", "grant a -",
		}},
		{name: "a probe that gave up is not granted", limit: 1, steps: []string{
			"workloads a 1", "wait a 1", "giveup a", "grant -", "wait a 1", "grant a -",
		}},
		{name: "a namespace in flight counts until its probes end", limit: 4, steps: []string{
			"workloads a 1", "workloads b 1", "wait b 1", "grant b -", "workloads b 0",
			// b still holds a slot: it counts (share 2), and is kept a slot
			// beside the one for a namespace not probing yet.
			"wait a 4", "grant a -", "done b", "grant a a -",
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tb := New(tc.limit)
			for i, s := range tc.steps {
				f := strings.Fields(s)
				n := 1
				if len(f) == 3 && f[0] != "grant" {
					var err error
					if n, err = strconv.Atoi(f[2]); err != nil {
						t.Fatalf("step %d %q: %v", i, s, err)
					}
				}
				switch f[0] {
				case "workloads":
					tb.SetWorkloads(f[1], n)
				case "wait":
					for range n {
						tb.Enqueue(f[1])
					}
				case "giveup":
					tb.Dequeue(f[1])
				case "done":
					tb.Release(f[1])
				case "grant":
					for _, want := range f[1:] {
						got, ok := tb.Grant()
						if want == "-" {
							if ok {
								t.Fatalf("step %d %q: granted %s, want none (in flight %d of %d)", i, s, got, tb.InFlight(""), tc.limit)
							}
							continue
						}
						if !ok || got != want {
							t.Fatalf("step %d %q: granted %q (%v), want %s", i, s, got, ok, want)
						}
					}
				default:
					t.Fatalf("step %d: unknown %q", i, s)
				}
				if tb.InFlight("") > tc.limit {
					t.Fatalf("step %d %q: %d in flight, limit %d", i, s, tb.InFlight(""), tc.limit)
				}
			}
		})
	}
}

// TestGrantInvariants drives a Table with random steps and checks after
// each: never more than the limit in flight, nothing granted that did not
// wait, and no namespace with nothing in flight left waiting beside a free
// slot (the quiet namespace's guarantee).
func TestGrantInvariants(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	names := []string{"a", "b", "c", "d", "e"}
	for run := range 200 {
		limit := 1 + r.IntN(12)
		tb := New(limit)
		waiting := map[string]int{}
		inflight := map[string]int{}
		for step := range 300 {
			ns := names[r.IntN(len(names))]
			switch r.IntN(5) {
			case 0:
				tb.SetWorkloads(ns, r.IntN(4))
			case 1, 2:
				tb.Enqueue(ns)
				waiting[ns]++
			case 3:
				if inflight[ns] > 0 {
					tb.Release(ns)
					inflight[ns]--
				}
			case 4:
				if waiting[ns] > 0 {
					tb.Dequeue(ns)
					waiting[ns]--
				}
			}
			for {
				got, ok := tb.Grant()
				if !ok {
					break
				}
				if waiting[got] == 0 {
					t.Fatalf("run %d step %d: granted %s, which has nothing waiting", run, step, got)
				}
				waiting[got]--
				inflight[got]++
			}
			total := 0
			for _, n := range inflight {
				total += n
			}
			if total > limit || total != tb.InFlight("") {
				t.Fatalf("run %d step %d: %d in flight (table %d), limit %d", run, step, total, tb.InFlight(""), limit)
			}
			if total < limit {
				for _, ns := range names {
					if waiting[ns] > 0 && inflight[ns] == 0 {
						t.Fatalf("run %d step %d: %s waits with nothing in flight beside %d free slots", run, step, ns, limit-total)
					}
				}
			}
		}
	}
}

// BenchmarkGrant is the cost of deciding one grant and its release with
// 1,000 namespaces of one probed workload each (the decision scans them)
// beside one flooding namespace, all slots contended.
func BenchmarkGrant(b *testing.B) {
	tb := New(100)
	names := make([]string, 1000)
	for i := range names {
		names[i] = "ns-" + strconv.Itoa(i)
		tb.SetWorkloads(names[i], 1)
	}
	tb.SetWorkloads("flood", 1000)
	for range 1000 {
		tb.Enqueue("flood")
	}
	for _, ns := range names {
		tb.Enqueue(ns)
	}
	var granted []string // in flight, oldest first
	for {
		ns, ok := tb.Grant()
		if !ok {
			break
		}
		granted = append(granted, ns)
	}
	b.ReportAllocs()
	for b.Loop() {
		ns := granted[0]
		granted = granted[1:]
		tb.Release(ns)
		tb.Enqueue(ns)
		got, ok := tb.Grant()
		if !ok {
			b.Fatal("nothing granted after a release")
		}
		granted = append(granted, got)
	}
}
