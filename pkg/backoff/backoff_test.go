package backoff

import (
	"testing"
	"time"

	"k8s.io/client-go/util/workqueue"
)

func TestDelay(t *testing.T) {
	for _, c := range []struct {
		name     string
		p        Policy
		failures int
		want     time.Duration
	}{
		{"no failure, no wait", Policy{time.Second, time.Minute}, 0, 0},
		{"first", Policy{time.Second, time.Minute}, 1, time.Second},
		{"doubled", Policy{time.Second, time.Minute}, 2, 2 * time.Second},
		{"below the cap", Policy{time.Second, time.Minute}, 6, 32 * time.Second},
		{"capped", Policy{time.Second, time.Minute}, 7, time.Minute},
		{"capped for ever", Policy{time.Second, time.Minute}, 1 << 20, time.Minute},
		{"a cap that is no power of two of First", Policy{100 * time.Millisecond, 5 * time.Second}, 7, 5 * time.Second},
		{"First above Max", Policy{time.Minute, time.Second}, 1, time.Minute},
	} {
		if got := c.p.Delay(c.failures); got != c.want {
			t.Errorf("%s: %+v.Delay(%d) = %s, want %s", c.name, c.p, c.failures, got, c.want)
		}
	}
}

// Next steps like Delay, and Reset starts over.
func TestNextAndReset(t *testing.T) {
	p := Policy{100 * time.Millisecond, time.Second}
	b := p.Start()
	want := []time.Duration{100 * time.Millisecond, 200 * time.Millisecond, 400 * time.Millisecond, 800 * time.Millisecond, time.Second, time.Second}
	for i, w := range want {
		if got := b.Next(); got != w {
			t.Fatalf("Next #%d = %s, want %s", i+1, got, w)
		}
		if d := p.Delay(i + 1); d != w {
			t.Fatalf("Delay(%d) = %s, want %s", i+1, d, w)
		}
	}
	b.Reset()
	if got := b.Next(); got != 100*time.Millisecond {
		t.Fatalf("Next after Reset = %s, want 100ms", got)
	}
}

// Equal jitter stays in [d/2, d] and never above Max.
func TestNextJittered(t *testing.T) {
	p := Policy{100 * time.Millisecond, 5 * time.Second}
	b := p.Start()
	for i := 1; i <= 200; i++ {
		d := p.Delay(i)
		got := b.NextJittered()
		if got < d/2 || got > d || got > p.Max {
			t.Fatalf("NextJittered #%d = %s, want within [%s, %s]", i, got, d/2, d)
		}
	}
}

func TestQueue(t *testing.T) {
	ref := workqueue.DefaultTypedControllerRateLimiter[string]()
	for _, c := range []struct {
		name string
		max  time.Duration
		want []time.Duration
	}{
		{"client-go's controller limiter", 0, []time.Duration{5 * time.Millisecond, 10 * time.Millisecond, 20 * time.Millisecond, 40 * time.Millisecond}},
		{"capped", 15 * time.Millisecond, []time.Duration{5 * time.Millisecond, 10 * time.Millisecond, 15 * time.Millisecond, 15 * time.Millisecond}},
	} {
		q := Queue[string](c.max)
		for i, w := range c.want {
			if got := q.When("x"); got != w {
				t.Errorf("%s: When #%d = %s, want %s", c.name, i+1, got, w)
			}
			if c.max == 0 {
				if r := ref.When("x"); r != w {
					t.Errorf("%s: client-go's When #%d = %s, want %s", c.name, i+1, r, w)
				}
			}
		}
		if n := q.NumRequeues("x"); n != len(c.want) {
			t.Errorf("%s: NumRequeues = %d, want %d", c.name, n, len(c.want))
		}
		q.Forget("x")
		if got := q.When("x"); got != 5*time.Millisecond {
			t.Errorf("%s: When after Forget = %s, want 5ms", c.name, got)
		}
	}
}
