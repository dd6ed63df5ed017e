package controller

import (
	"maps"
	"slices"
	"sync"
	"testing"
)

func TestDirtySetCoalescesMarksIntoOneWake(t *testing.T) {
	d := newDirtySet()
	if d.any() {
		t.Fatal("a new set has work")
	}
	d.mark("prod/web", "prod/db")
	d.mark("prod/web")
	d.markPools()
	if !d.any() {
		t.Fatal("marked, but no work")
	}
	select {
	case <-d.wake:
	default:
		t.Fatal("marks did not wake the loop")
	}
	select {
	case <-d.wake:
		t.Fatal("four marks woke the loop twice")
	default:
	}
	got := d.take()
	if !maps.Equal(got.marks, marks{"prod/db": "", "prod/web": ""}) || !got.pools {
		t.Errorf("take = %v, pools %v; want both keys once and the pools", got.marks, got.pools)
	}
	if d.any() {
		t.Error("take left work behind")
	}
}

func TestDirtySetFinalizersAloneDecideNoService(t *testing.T) {
	d := newDirtySet()
	d.markPoolWrites()
	if !d.any() {
		t.Fatal("a finalizer check is work")
	}
	got := d.take()
	if len(got.marks) != 0 || got.pools || !got.poolWrites || d.any() {
		t.Errorf("take = %+v, left %v: want nothing to decide, and the check taken", got, d.any())
	}
}

// A pool event during a rebuild (after takePools, while the pools are
// read) leaves the flag set for the next pass.
func TestDirtySetPoolEventDuringARebuildIsKept(t *testing.T) {
	d := newDirtySet()
	d.markPools()
	if !d.takePools() {
		t.Fatal("takePools missed the mark")
	}
	d.markPools() // lands while the rebuild reads the pools
	if !d.take().pools {
		t.Error("the pool event that landed during the rebuild was lost")
	}
	if d.takePools() {
		t.Error("takePools after take: the flag was set twice")
	}
}

func TestDirtySetIsSafeForConcurrentMarks(t *testing.T) {
	d := newDirtySet()
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			for j := range 100 {
				d.mark(string(rune('a'+i)) + "/" + string(rune('a'+j%26)))
				d.markPools()
				d.markPoolWrites()
			}
		})
	}
	wg.Wait()
	if got := d.take(); len(got.marks) != 8*26 {
		t.Errorf("%d keys, want %d", len(got.marks), 8*26)
	}
}

// A Service marked only by updates keeps the newest update's version (its
// echo may be dropped); any other mark makes it a plain mark for good, in
// whichever order the marks come.
func TestMarksKeepAnUpdateOnlyWhileNothingElseMarked(t *testing.T) {
	for _, tc := range []struct {
		name string
		add  [][2]string // key, update version ("" for another cause)
		want marks
	}{
		{"one update", [][2]string{{"a", "5"}}, marks{"a": "5"}},
		{"a later update replaces an earlier", [][2]string{{"a", "5"}, {"a", "9"}}, marks{"a": "9"}},
		{"an add after an update", [][2]string{{"a", "5"}, {"a", ""}}, marks{"a": ""}},
		{"an update after a pool change", [][2]string{{"a", ""}, {"a", "9"}}, marks{"a": ""}},
		{"keys apart", [][2]string{{"a", "5"}, {"b", ""}}, marks{"a": "5", "b": ""}},
	} {
		m := marks{}
		for _, a := range tc.add {
			m.add(a[0], a[1])
		}
		if !maps.Equal(m, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, m, tc.want)
		}
	}
	d := newDirtySet()
	d.markUpdate("a", "5")
	d.remark(marks{"a": "", "b": "7"})
	if got := d.take().marks; !maps.Equal(got, marks{"a": "", "b": "7"}) {
		t.Errorf("remark: %v", got)
	}
}

// After a rebuild, Services without an address are decided first and
// those holding one verified after; a key the ledger and the stream both
// name is decided once.
func TestSplitHolders(t *testing.T) {
	held := map[string]bool{"a/old": true, "a/gone": true}
	none, holding := splitHolders([]string{"a/old", "a/new", "a/gone", "a/old", "a/new"}, func(k string) bool { return held[k] })
	if !slices.Equal(none, []string{"a/new"}) || !slices.Equal(holding, []string{"a/old", "a/gone"}) {
		t.Errorf("splitHolders = %v, %v; want [a/new], [a/old a/gone]", none, holding)
	}
}
