package parallel

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
)

// Every call runs once, and never more than the limit are under way (a
// limit that is not enforced can show as a higher peak).
func TestEachRunsEveryCallAndRespectsTheLimit(t *testing.T) {
	for _, tc := range []struct{ n, limit, wantPeak int }{
		{n: 0, limit: 3, wantPeak: 0},
		{n: 1, limit: 3, wantPeak: 1},
		{n: 10, limit: 3, wantPeak: 3},
		{n: 10, limit: 0, wantPeak: 1}, // a limit below one is one
		{n: 4, limit: 10, wantPeak: 4},
	} {
		t.Run(fmt.Sprintf("n%d-limit%d", tc.n, tc.limit), func(t *testing.T) {
			var now, peak atomic.Int32
			seen := make([]int, tc.n)
			Each(tc.n, tc.limit, func(i int) {
				if c := now.Add(1); c > peak.Load() {
					peak.Store(c)
				}
				seen[i]++
				now.Add(-1)
			})
			for i, c := range seen {
				if c != 1 {
					t.Errorf("call %d ran %d times", i, c)
				}
			}
			if int(peak.Load()) > max(tc.wantPeak, 0) {
				t.Errorf("%d calls under way at once, limit %d", peak.Load(), tc.wantPeak)
			}
		})
	}
}

func TestLimitIsSharedAcrossRuns(t *testing.T) {
	l := NewLimit(2)
	var now, peak atomic.Int32
	release := make(chan struct{})
	started := make(chan struct{}, 4)
	var runs sync.WaitGroup
	for range 2 {
		runs.Go(func() {
			l.Run(2, func(int) {
				if c := now.Add(1); c > peak.Load() {
					peak.Store(c)
				}
				started <- struct{}{}
				<-release
				now.Add(-1)
			})
		})
	}
	// Two calls start; the other two wait for a slot until one returns (a
	// broken limit shows here or in the peak, never a false failure).
	<-started
	<-started
	select {
	case <-started:
		t.Fatal("a third call started while the limit of two was taken")
	default:
	}
	close(release)
	runs.Wait()
	if peak.Load() != 2 {
		t.Errorf("peak %d, want 2", peak.Load())
	}
}

func TestEachErrIsTheFirstFailureByIndex(t *testing.T) {
	errA, errB := errors.New("a"), errors.New("b")
	var ran atomic.Int32
	err := EachErr(5, 2, func(i int) error {
		ran.Add(1)
		switch i {
		case 1:
			return errA
		case 3:
			return errB
		}
		return nil
	})
	if !errors.Is(err, errA) || ran.Load() != 5 {
		t.Errorf("err %v after %d calls, want a after 5", err, ran.Load())
	}
	if err := EachErr(3, 2, func(int) error { return nil }); err != nil {
		t.Errorf("err %v, want nil", err)
	}
}

func TestAheadYieldsEveryItemInOrder(t *testing.T) {
	for _, tc := range []struct{ n, chunk int }{{0, 4}, {1, 4}, {4, 4}, {5, 4}, {1000, 7}, {9, 0}} {
		t.Run(fmt.Sprintf("n%d-chunk%d", tc.n, tc.chunk), func(t *testing.T) {
			in := make([]int, tc.n)
			for i := range in {
				in[i] = i
			}
			var got []int
			for v := range Ahead(in, tc.chunk, func(x int) int { return x * 2 }) {
				got = append(got, v)
			}
			if len(got) != tc.n {
				t.Fatalf("yielded %d items, want %d", len(got), tc.n)
			}
			for i, v := range got {
				if v != 2*i {
					t.Fatalf("item %d is %d, want %d", i, v, 2*i)
				}
			}
		})
	}
}

func TestAheadStopsSoonAfterTheCallerDoes(t *testing.T) {
	const chunk = 10
	in := make([]int, 1000)
	var computed atomic.Int32
	seen := 0
	for range Ahead(in, chunk, func(x int) int { computed.Add(1); return x }) {
		if seen++; seen == 15 {
			break
		}
	}
	// Ahead has returned, so its goroutine has too: the count is final.
	// The caller stopped in the second chunk; at most two more were made.
	if c := computed.Load(); c < 15 || c > 4*chunk {
		t.Errorf("computed %d items for a caller that read 15, want 15 to %d", c, 4*chunk)
	}
}
