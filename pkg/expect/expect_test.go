package expect

import (
	"maps"
	"testing"
	"time"
)

type clock struct{ t time.Time }

func (c *clock) now() time.Time { return c.t }

// written is what a test writes: a version, compared with the version a
// view shows, the way ipam compares resourceVersions.
type written struct{ rv int }

func TestCheck(t *testing.T) {
	const timeout = time.Minute
	for _, tc := range []struct {
		name    string
		timeout time.Duration
		write   bool
		after   time.Duration // from the write to the Check
		seen    Seen
		behind  bool // what Check returns
		kept    bool // whether the write is still remembered after it
		called  bool // whether seen was asked
	}{
		{name: "nothing written", timeout: timeout, after: 0, seen: Behind, behind: false, kept: false, called: false},
		{name: "behind, in time", timeout: timeout, write: true, after: timeout - time.Nanosecond, seen: Behind, behind: true, kept: true, called: true},
		{name: "behind, at the deadline", timeout: timeout, write: true, after: timeout, seen: Behind, behind: false, kept: false, called: true},
		{name: "behind, past the deadline", timeout: timeout, write: true, after: 2 * timeout, seen: Behind, behind: false, kept: false, called: true},
		{name: "shown, in time", timeout: timeout, write: true, after: 0, seen: Shown, behind: false, kept: true, called: true},
		{name: "shown, past the deadline", timeout: timeout, write: true, after: 2 * timeout, seen: Shown, behind: false, kept: true, called: true},
		{name: "done, in time", timeout: timeout, write: true, after: 0, seen: Done, behind: false, kept: false, called: true},
		{name: "done, past the deadline", timeout: timeout, write: true, after: 2 * timeout, seen: Done, behind: false, kept: false, called: true},
		{name: "no timeout: behind forever", timeout: -1, write: true, after: 1000 * time.Hour, seen: Behind, behind: true, kept: true, called: true},
		{name: "zero timeout: behind forever", timeout: 0, write: true, after: 1000 * time.Hour, seen: Behind, behind: true, kept: true, called: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := &clock{t: time.Unix(1000, 0)}
			s := New[string, written](tc.timeout, c.now)
			if tc.write {
				s.Wrote("k", written{rv: 7})
			}
			c.t = c.t.Add(tc.after)
			called := false
			v, behind := s.Check("k", func(w written) Seen {
				called = true
				if w.rv != 7 {
					t.Errorf("seen got %+v, want the write", w)
				}
				return tc.seen
			})
			if behind != tc.behind || called != tc.called {
				t.Fatalf("Check = %+v, %v (seen called: %v); want behind %v (called %v)", v, behind, called, tc.behind, tc.called)
			}
			if behind && v.rv != 7 {
				t.Fatalf("Check returned %+v, want the write", v)
			}
			if !behind && v != (written{}) {
				t.Fatalf("Check returned %+v when not behind, want the zero value", v)
			}
			if _, kept := s.Get("k"); kept != tc.kept || (s.Len() == 1) != tc.kept {
				t.Fatalf("after Check: remembered %v (Len %d), want %v", kept, s.Len(), tc.kept)
			}
		})
	}
}

// The way ipam uses it: its own write is the newest version it knows of
// until the stream shows that version or a newer one.
func TestNewestVersionWins(t *testing.T) {
	c := &clock{t: time.Unix(1000, 0)}
	s := New[string, written](time.Minute, c.now)
	current := func(streamed int) int {
		w, behind := s.Check("ns/web", func(w written) Seen {
			if streamed >= w.rv {
				return Done
			}
			return Behind
		})
		if behind {
			return w.rv
		}
		return streamed
	}
	s.Wrote("ns/web", written{rv: 105})
	if got := current(100); got != 105 {
		t.Fatalf("stream behind the write: %d, want 105", got)
	}
	if got := current(110); got != 110 {
		t.Fatalf("stream past the write: %d, want 110", got)
	}
	if s.Len() != 0 {
		t.Fatal("the write outlived the stream catching up")
	}
	// Rewritten: the newer write replaces the older one and its deadline.
	s.Wrote("ns/web", written{rv: 120})
	c.t = c.t.Add(50 * time.Second)
	s.Wrote("ns/web", written{rv: 130})
	c.t = c.t.Add(50 * time.Second)
	if got := current(125); got != 130 {
		t.Fatalf("after a rewrite: %d, want 130 (the second write's deadline)", got)
	}
}

func TestExpiredGetForget(t *testing.T) {
	c := &clock{t: time.Unix(1000, 0)}
	s := New[string, int](time.Minute, c.now)
	s.Wrote("a", 1)
	if s.Expired("a") || s.Expired("none") {
		t.Fatal("expired before the deadline, or without a write")
	}
	c.t = c.t.Add(time.Minute)
	if !s.Expired("a") {
		t.Fatal("not expired at the deadline")
	}
	if v, ok := s.Get("a"); !ok || v != 1 {
		t.Fatalf("Get of an expired write = %d, %v; want it until forgotten", v, ok)
	}
	s.Forget("a")
	if _, ok := s.Get("a"); ok || s.Len() != 0 {
		t.Fatal("remembered after Forget")
	}
	s.Forget("a") // forgetting nothing is fine

	real := New[string, int](time.Minute, nil) // the clock is time.Now
	real.Wrote("b", 2)
	if _, behind := real.Check("b", func(int) Seen { return Behind }); !behind {
		t.Fatal("a write just made expired on the real clock")
	}
}

func TestAllAllowsCheckAndForget(t *testing.T) {
	c := &clock{t: time.Unix(1000, 0)}
	s := New[int, int](time.Minute, c.now)
	for i := range 10 {
		s.Wrote(i, i*i)
	}
	got := maps.Collect(s.All())
	if len(got) != 10 || got[3] != 9 {
		t.Fatalf("All = %v", got)
	}
	for k := range s.All() {
		switch {
		case k%2 == 0:
			s.Forget(k)
		default:
			s.Check(k, func(v int) Seen {
				if v > 10 {
					return Done
				}
				return Behind
			})
		}
	}
	if got := maps.Collect(s.All()); len(got) != 2 || got[1] != 1 || got[3] != 9 {
		t.Fatalf("after forgetting evens and checking odds: %v, want 1 and 3", got)
	}
	n := 0
	for range s.All() {
		n++
		break
	}
	if n != 1 {
		t.Fatal("All did not stop when asked")
	}
}
