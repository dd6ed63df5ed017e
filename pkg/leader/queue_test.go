package leader

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/util/workqueue"

	"github.com/ipledger/ipledger/lab/testenv"
	"github.com/ipledger/ipledger/pkg/backoff"
)

func TestConfigValidate(t *testing.T) {
	base := func() Config {
		return Config{LeaseName: "l", LeaseNamespace: "ns", LeaseDuration: 15 * time.Second,
			RenewDeadline: 10 * time.Second, RetryPeriod: 2 * time.Second, StopTimeout: 30 * time.Second}
	}
	tests := []struct {
		name    string
		mutate  func(*Config)
		wantErr bool
	}{
		{"defaults", func(*Config) {}, false},
		{"short test durations", func(c *Config) {
			c.LeaseDuration, c.RenewDeadline, c.RetryPeriod = 3*time.Second, 2*time.Second, 250*time.Millisecond
		}, false},
		{"no lease name", func(c *Config) { c.LeaseName = "" }, true},
		{"no namespace", func(c *Config) { c.LeaseNamespace = "" }, true}, // Validate does not apply defaults
		{"renew deadline not below lease duration", func(c *Config) { c.RenewDeadline = c.LeaseDuration }, true},
		{"retry period too close to renew deadline", func(c *Config) { c.RetryPeriod = 9 * time.Second }, true},
		{"lease duration below a second", func(c *Config) { c.LeaseDuration = 500 * time.Millisecond }, true},
	}
	for _, tt := range tests {
		c := base()
		tt.mutate(&c)
		if err := c.Validate(); (err != nil) != tt.wantErr {
			t.Errorf("%s: Validate() = %v, wantErr %v", tt.name, err, tt.wantErr)
		}
	}
}

func TestFlags(t *testing.T) {
	c := Config{LeaseName: "ipledger-ipam"}
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	c.Flags(fs)
	if c.LeaseNamespace != "ipledger-system" {
		t.Errorf("default namespace %q", c.LeaseNamespace)
	}
	if err := fs.Parse([]string{"--leader-elect-retry-period=1s", "--stop-timeout=5s", "--leader-elect-identity=me", "--leader-elect-lease-namespace=ns"}); err != nil {
		t.Fatal(err)
	}
	want := Config{LeaseName: "ipledger-ipam", LeaseNamespace: "ns", Identity: "me",
		LeaseDuration: 15 * time.Second, RenewDeadline: 10 * time.Second, RetryPeriod: time.Second, StopTimeout: 5 * time.Second}
	if c != want {
		t.Fatalf("got %+v, want %+v", c, want)
	}
}

// runQueue runs q on a standalone term and returns the term's stop and
// end functions and a channel closed when Run returns.
func runQueue(q *Queue[int], workers int, sync func(context.Context, int) error) (term *Term, stop, end func(), done chan struct{}) {
	term, stop, end = NewTerm(context.Background(), "test", "test/0/x")
	done = make(chan struct{})
	go func() {
		defer close(done)
		q.Run(term, workers, sync)
	}()
	return term, stop, end, done
}

func TestQueueGracefulDrainProcessesEverythingQueued(t *testing.T) {
	reg := prometheus.NewRegistry()
	q := NewQueue[int]("drain", reg)
	gate := make(chan struct{})
	var processed atomic.Int32
	_, stop, end, done := runQueue(q, 2, func(ctx context.Context, item int) error {
		<-gate
		if ctx.Err() != nil {
			return ctx.Err()
		}
		processed.Add(1)
		return nil
	})
	for i := range 20 {
		q.Add(i)
	}
	stop() // shutdown while 20 items are queued or in flight
	testenv.Eventually(t, 5*time.Second, func() error {
		if !q.q.ShuttingDown() {
			return errors.New("queue not shutting down")
		}
		return nil
	})
	q.Add(100)
	close(gate)
	<-done
	end()
	if got := processed.Load(); got != 20 {
		t.Fatalf("graceful drain processed %d items, want all 20 (and not the one added after Stopping)", got)
	}
	if q.Len() != 0 {
		t.Fatalf("queue length after drain %d", q.Len())
	}
}

func TestQueueLostTermDropsQueued(t *testing.T) {
	q := NewQueue[int]("lost", prometheus.NewRegistry())
	entered := make(chan struct{})
	gate := make(chan struct{})
	var calls atomic.Int32
	var inflightErr error
	_, stop, end, done := runQueue(q, 1, func(ctx context.Context, item int) error {
		calls.Add(1)
		if item == 0 {
			close(entered)
			<-gate
			inflightErr = ctx.Err()
		}
		return nil
	})
	for i := range 20 {
		q.Add(i)
	}
	<-entered
	end() // lost: the context ends first
	stop()
	close(gate)
	<-done
	if got := calls.Load(); got != 1 {
		t.Fatalf("sync called %d times, want 1 (the in-flight item only)", got)
	}
	if !errors.Is(inflightErr, context.Canceled) {
		t.Fatalf("in-flight item's context: %v, want canceled", inflightErr)
	}
}

func TestQueueRetriesErrors(t *testing.T) {
	q := NewQueue[string]("retry", prometheus.NewRegistry())
	var mu sync.Mutex
	attempts := map[string]int{}
	term, stop, end := NewTerm(context.Background(), "test", "id")
	done := make(chan struct{})
	go func() {
		defer close(done)
		q.Run(term, 1, func(ctx context.Context, item string) error {
			mu.Lock()
			defer mu.Unlock()
			attempts[item]++
			if attempts[item] < 3 {
				return errors.New("transient")
			}
			return nil
		})
	}()
	q.Add("a")
	testenv.Eventually(t, 5*time.Second, func() error {
		mu.Lock()
		defer mu.Unlock()
		if attempts["a"] != 3 {
			return errors.New("not yet retried twice")
		}
		return nil
	})
	stop()
	<-done
	end()
}

// A queue given a rate limiter uses it: an hour's backoff capped by backoff.Capped
// at 10 ms retries at once.
func TestQueueWithRateLimiterCappedByMaxDelay(t *testing.T) {
	slow := workqueue.NewTypedItemExponentialFailureRateLimiter[string](time.Hour, time.Hour)
	if d := backoff.Capped(slow, 10*time.Millisecond).When("x"); d != 10*time.Millisecond {
		t.Fatalf("Capped(1h, 10ms).When = %s, want 10ms", d)
	}
	q := NewQueue("capped", prometheus.NewRegistry(), WithRateLimiter(backoff.Capped(slow, 10*time.Millisecond)))
	var attempts atomic.Int32
	term, stop, end := NewTerm(context.Background(), "test", "id")
	done := make(chan struct{})
	go func() {
		defer close(done)
		q.Run(term, 1, func(ctx context.Context, item string) error {
			if attempts.Add(1) < 3 {
				return errors.New("transient")
			}
			return nil
		})
	}()
	q.Add("a")
	testenv.Eventually(t, 5*time.Second, func() error {
		if n := attempts.Load(); n != 3 {
			return fmt.Errorf("%d attempts", n)
		}
		return nil
	})
	stop()
	<-done
	end()
}

func TestQueueMetricsSurviveTerms(t *testing.T) {
	reg := prometheus.NewRegistry()
	for term := range 3 {
		q := NewQueue[int]("ipam", reg) // the same name every term
		_, stop, end, done := runQueue(q, 1, func(context.Context, int) error { return nil })
		for i := range 5 {
			q.Add(i + 10*term)
		}
		stop()
		<-done
		end()
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			switch {
			case m.GetCounter() != nil:
				got[mf.GetName()] = m.GetCounter().GetValue()
			case m.GetGauge() != nil:
				got[mf.GetName()] = m.GetGauge().GetValue()
			}
		}
	}
	if got["ipledger_workqueue_adds_total"] != 15 || got["ipledger_workqueue_depth"] != 0 {
		t.Fatalf("metrics across 3 terms: %v; want adds 15, depth 0", got)
	}
}
