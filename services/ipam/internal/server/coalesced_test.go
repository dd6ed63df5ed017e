package server

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// waitForWaiters polls until n callers wait for c's build.
func waitForWaiters[T any](t *testing.T, c *coalesced[T], n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		c.mu.Lock()
		got := c.waiting
		c.mu.Unlock()
		if got == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d callers wait for the build, want %d", got, n)
		}
		time.Sleep(time.Millisecond) // polling for a condition, with a deadline
	}
}

// Callers that arrive while a build runs wait for it; those that saw a newer
// version than it started from get one more build, from the newest version,
// shared by all of them — never two builds at once.
func TestCoalescedBuildsOneAtATimeFromTheNewest(t *testing.T) {
	var c coalesced[uint64]
	var version atomic.Uint64
	version.Store(1)
	var inFlight, builds atomic.Int32
	started, release := make(chan struct{}), make(chan struct{})
	build := func() (uint64, uint64, error) {
		if inFlight.Add(1) != 1 {
			t.Error("two builds ran at once")
		}
		defer inFlight.Add(-1)
		v := version.Load()
		if builds.Add(1) == 1 {
			close(started)
			<-release
		}
		return v * 10, v, nil
	}
	ctx := context.Background()
	first := make(chan uint64)
	go func() {
		v, err := c.get(ctx, 1, build)
		if err != nil {
			t.Error(err)
		}
		first <- v
	}()
	<-started
	version.Store(2)
	version.Store(3) // two changes while the first build runs

	var wg sync.WaitGroup
	got := make([]uint64, 20)
	for i := range got {
		wg.Go(func() {
			v, err := c.get(ctx, 3, build)
			if err != nil {
				t.Error(err)
			}
			got[i] = v
		})
	}
	waitForWaiters(t, &c, len(got))
	close(release)
	if v := <-first; v != 10 {
		t.Errorf("the first caller got %d, want the value of version 1 (10)", v)
	}
	wg.Wait()
	for i, v := range got {
		if v != 30 {
			t.Errorf("caller %d got %d, want the value of version 3 (30)", i, v)
		}
	}
	if n := builds.Load(); n != 2 {
		t.Errorf("%d builds, want 2 (version 1, then version 3 for all 20 callers)", n)
	}
	// Nothing changed: no build.
	if v, err := c.get(ctx, 3, build); v != 30 || err != nil || builds.Load() != 2 {
		t.Errorf("with no change: %d, %v after %d builds", v, err, builds.Load())
	}
}

// A caller waiting for a build gives up when its context ends; the build
// goes on for the others.
func TestCoalescedWaiterHonoursContext(t *testing.T) {
	var c coalesced[int]
	started, release := make(chan struct{}), make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		c.get(context.Background(), 1, func() (int, uint64, error) { close(started); <-release; return 1, 1, nil })
	}()
	<-started
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error)
	go func() {
		_, err := c.get(ctx, 1, func() (int, uint64, error) { t.Error("a second build started"); return 0, 0, nil })
		errc <- err
	}()
	waitForWaiters(t, &c, 1)
	cancel()
	if err := <-errc; status.Code(err) != codes.Canceled {
		t.Errorf("waiter's error = %v, want Canceled", err)
	}
	close(release)
	<-done
	if v, err := c.get(context.Background(), 1, nil); v != 1 || err != nil {
		t.Errorf("after the build: %d, %v", v, err)
	}
}
