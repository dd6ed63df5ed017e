package controller

import (
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
	keys, pools := d.take()
	slices.Sort(keys)
	if !slices.Equal(keys, []string{"prod/db", "prod/web"}) || !pools {
		t.Errorf("take = %v, pools %v; want both keys once and the pools", keys, pools)
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
	keys, pools := d.take()
	if len(keys) != 0 || pools || d.any() {
		t.Errorf("take = %v, pools %v, left %v: want nothing to decide, and the check taken", keys, pools, d.any())
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
	if _, pools := d.take(); !pools {
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
	if keys, _ := d.take(); len(keys) != 8*26 {
		t.Errorf("%d keys, want %d", len(keys), 8*26)
	}
}
