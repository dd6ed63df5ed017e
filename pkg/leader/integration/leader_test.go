// Package integration tests pkg/leader against a real API server: elections,
// handovers, lost and stolen Leases, partitions. It is a separate package so
// that the pure tests of package leader (queue, config, gauge, the stop bound)
// run without starting a control plane.
package integration

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/retry"

	"github.com/ipledger/ipledger/lab/testenv"
	"github.com/ipledger/ipledger/pkg/leader"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// Short durations so handovers take well under a second.
func testConfig(ns, identity string) leader.Config {
	return leader.Config{
		LeaseName: "test-lease", LeaseNamespace: ns, Identity: identity,
		LeaseDuration: 3 * time.Second, RenewDeadline: 2 * time.Second, RetryPeriod: 250 * time.Millisecond,
		StopTimeout: 10 * time.Second,
	}
}

// runner is one candidate running in the test process.
type runner struct {
	cancel context.CancelFunc
	done   chan error
	reg    *prometheus.Registry
}

func startCandidate(t *testing.T, client kubernetes.Interface, cfg leader.Config, newWorker func(*leader.Term) (leader.Worker, error)) *runner {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	r := &runner{cancel: cancel, done: make(chan error, 1), reg: prometheus.NewRegistry()}
	log := slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelInfo}))
	go func() { r.done <- leader.Run(ctx, client, cfg, newWorker, log, r.reg) }()
	t.Cleanup(func() {
		cancel()
		if err := <-r.done; err != nil {
			t.Errorf("Run of %s: %v", cfg.Identity, err)
		}
	})
	return r
}

// stop ends the candidate's context and waits for Run to return.
func (r *runner) stop(t *testing.T) {
	t.Helper()
	r.cancel()
	if err := <-r.done; err != nil {
		t.Fatalf("Run: %v", err)
	}
	r.done <- nil // for the cleanup
}

func (r *runner) isLeader(lease string) float64 {
	g, err := r.reg.Gather()
	if err != nil {
		return -1
	}
	for _, mf := range g {
		if mf.GetName() == "ipledger_leader_is_leader" {
			for _, m := range mf.GetMetric() {
				return m.GetGauge().GetValue()
			}
		}
	}
	return 0
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// termEvent records a worker starting or stopping.
type termEvent struct {
	identity, id string
	at           time.Time
	start        bool
}

// recorder builds workers that record their terms and check that at most
// one term is active at a time across candidates.
type recorder struct {
	mu      sync.Mutex
	events  []termEvent
	active  atomic.Int32
	overlap atomic.Bool
}

func (rec *recorder) newWorker(term *leader.Term) (leader.Worker, error) {
	return leader.WorkerFunc(func(term *leader.Term) error {
		if rec.active.Add(1) > 1 {
			rec.overlap.Store(true)
		}
		rec.add(termEvent{identity: term.Identity(), id: term.ID(), at: time.Now(), start: true})
		<-term.Stopping()
		rec.active.Add(-1)
		rec.add(termEvent{identity: term.Identity(), id: term.ID(), at: time.Now()})
		return nil
	}), nil
}

func (rec *recorder) add(e termEvent) {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	rec.events = append(rec.events, e)
}

// started returns the term starts so far.
func (rec *recorder) started() []termEvent {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	var out []termEvent
	for _, e := range rec.events {
		if e.start {
			out = append(out, e)
		}
	}
	return out
}

func holder(t *testing.T, client kubernetes.Interface, ns, name string) string {
	t.Helper()
	l, err := client.CoordinationV1().Leases(ns).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if l.Spec.HolderIdentity == nil {
		return ""
	}
	return *l.Spec.HolderIdentity
}

func TestTwoCandidatesOneLeadsAndGracefulHandover(t *testing.T) {
	env := testenv.Get(t)
	ns := env.Namespace(t, nil)
	rec := &recorder{}
	cands := map[string]*runner{
		"a": startCandidate(t, env.Client, testConfig(ns, "a"), rec.newWorker),
		"b": startCandidate(t, env.Client, testConfig(ns, "b"), rec.newWorker),
	}
	testenv.Eventually(t, 10*time.Second, func() error {
		if len(rec.started()) == 0 {
			return errors.New("no candidate leads")
		}
		return nil
	})
	first := rec.started()[0]
	other := "a"
	if first.identity == "a" {
		other = "b"
	}
	if got := holder(t, env.Client, ns, "test-lease"); got != first.identity {
		t.Fatalf("Lease holder %q, but %q runs a term", got, first.identity)
	}
	// The other candidate keeps trying (every RetryPeriod) without leading.
	testenv.Eventually(t, 5*time.Second, func() error {
		if cands[first.identity].isLeader("test-lease") != 1 || cands[other].isLeader("test-lease") != 0 {
			return errors.New("is_leader metrics do not show exactly one leader")
		}
		return nil
	})
	if n := len(rec.started()); n != 1 {
		t.Fatalf("%d terms started with both candidates up, want 1", n)
	}

	// Graceful shutdown of the leader: the other leads within about
	// RetryPeriod (not LeaseDuration) after the release.
	begin := time.Now()
	cands[first.identity].stop(t)
	released := time.Now()
	testenv.Eventually(t, 10*time.Second, func() error {
		if len(rec.started()) < 2 {
			return errors.New("the other candidate does not lead yet")
		}
		return nil
	})
	second := rec.started()[1]
	if second.identity != other {
		t.Fatalf("second term held by %q, want %q", second.identity, other)
	}
	handover := second.at.Sub(released)
	t.Logf("handover: leader stopped in %s, other leads %s after the release (RetryPeriod %s, LeaseDuration %s)",
		released.Sub(begin), handover, testConfig(ns, "").RetryPeriod, testConfig(ns, "").LeaseDuration)
	if limit := 2*testConfig(ns, "").RetryPeriod + 500*time.Millisecond; handover > limit {
		t.Errorf("handover took %s, want about RetryPeriod (< %s)", handover, limit)
	}
	if rec.overlap.Load() {
		t.Error("two terms were active at the same time")
	}
	if second.id == first.id {
		t.Errorf("two terms share ID %q", first.id)
	}
	if got := holder(t, env.Client, ns, "test-lease"); got != other {
		t.Errorf("Lease holder %q, want %q", got, other)
	}
	cands[other].stop(t)
	if got := holder(t, env.Client, ns, "test-lease"); got != "" {
		t.Errorf("after the last candidate stopped, the Lease is held by %q; want released", got)
	}
}

// writingWorker queues 20 items; each creates a ConfigMap with the term's
// context. Item `block` waits on gate (an in-flight write) after the items
// before it have been written.
type writingWorker struct {
	client   kubernetes.Interface
	ns       string
	block    int
	entered  chan struct{}
	gate     chan struct{}
	calls    atomic.Int32
	blockErr error
	term     *leader.Term
	done     chan error
}

func (w *writingWorker) Run(term *leader.Term) error {
	w.term = term
	q := leader.NewQueue[int]("test", nil)
	for i := range 20 {
		q.Add(i)
	}
	q.Run(term, 1, func(ctx context.Context, i int) error {
		w.calls.Add(1)
		if i == w.block {
			close(w.entered)
			<-w.gate
		}
		_, err := w.client.CoreV1().ConfigMaps(w.ns).Create(ctx, &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("item-%02d", i)},
		}, metav1.CreateOptions{})
		if i == w.block {
			w.blockErr = err
		}
		return err
	})
	return nil
}

func countConfigMaps(t *testing.T, client kubernetes.Interface, ns string) int {
	t.Helper()
	l, err := client.CoreV1().ConfigMaps(ns).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, cm := range l.Items {
		if strings.HasPrefix(cm.Name, "item-") {
			n++
		}
	}
	return n
}

// steal makes the Lease name another holder, as a partitioned-away leader
// would find it.
func steal(t *testing.T, client kubernetes.Interface, ns, name, thief string, seconds int32) {
	t.Helper()
	ctx := context.Background()
	// The holder renews meanwhile: read again and retry on a conflict.
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		l, err := client.CoordinationV1().Leases(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		now := metav1.NewMicroTime(time.Now())
		l.Spec.HolderIdentity = &thief
		l.Spec.LeaseDurationSeconds = &seconds
		l.Spec.AcquireTime, l.Spec.RenewTime = &now, &now
		_, err = client.CoordinationV1().Leases(ns).Update(ctx, l, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestLostLeaseStopsWrites(t *testing.T) {
	env := testenv.Get(t)
	ns := env.Namespace(t, nil)
	var workers []*writingWorker
	var mu sync.Mutex
	newWorker := func(term *leader.Term) (leader.Worker, error) {
		w := &writingWorker{client: env.Client, ns: ns, block: 3, entered: make(chan struct{}), gate: make(chan struct{})}
		mu.Lock()
		workers = append(workers, w)
		mu.Unlock()
		return w, nil
	}
	r := startCandidate(t, env.Client, testConfig(ns, "leader"), newWorker)
	var w *writingWorker
	testenv.Eventually(t, 10*time.Second, func() error {
		mu.Lock()
		defer mu.Unlock()
		if len(workers) == 0 {
			return errors.New("not leading")
		}
		w = workers[0]
		return nil
	})
	<-w.entered // items 0..2 are written; item 3 is in flight; 16 are queued

	stolen := time.Now()
	steal(t, env.Client, ns, "test-lease", "thief", 30)
	testenv.Eventually(t, 5*time.Second, func() error {
		if w.term.Context().Err() == nil {
			return errors.New("term context still live")
		}
		return nil
	})
	t.Logf("term context cancelled %s after the Lease was taken (RetryPeriod %s, RenewDeadline %s)",
		time.Since(stolen), testConfig(ns, "").RetryPeriod, testConfig(ns, "").RenewDeadline)
	select {
	case <-w.term.Stopping():
	case <-time.After(5 * time.Second):
		t.Fatal("Stopping not closed after the lease was lost")
	}
	close(w.gate) // the in-flight write now runs with the ended term's context
	testenv.Eventually(t, 5*time.Second, func() error {
		if transitions(r.reg, "lost") != 1 {
			return errors.New("term not stopped yet")
		}
		return nil
	})
	if !errors.Is(w.blockErr, context.Canceled) {
		t.Errorf("the in-flight write with the ended term's context: %v, want context.Canceled", w.blockErr)
	}
	if got := w.calls.Load(); got != 4 {
		t.Errorf("sync called %d times, want 4 (3 written, 1 in flight; 16 queued items dropped)", got)
	}
	if got := countConfigMaps(t, env.Client, ns); got != 3 {
		t.Errorf("%d ConfigMaps at the API server, want 3: no write may land after the term ended", got)
	}
	_, err := env.Client.CoreV1().ConfigMaps(ns).Create(w.term.Context(), &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "item-late"}}, metav1.CreateOptions{})
	if err == nil {
		t.Error("a write with an ended term's context succeeded")
	}
	if got := r.isLeader("test-lease"); got != 0 {
		t.Errorf("is_leader = %v after losing the lease", got)
	}
	if got := holder(t, env.Client, ns, "test-lease"); got != "thief" {
		t.Errorf("Lease holder %q, want thief (a lost leader must not release someone else's lease)", got)
	}
}

// transitions is the count of term transitions of kind event.
func transitions(reg *prometheus.Registry, event string) float64 {
	v := 0.0
	mfs, _ := reg.Gather()
	for _, mf := range mfs {
		if mf.GetName() != "ipledger_leader_term_transitions_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "event" && l.GetValue() == event {
					v = m.GetCounter().GetValue()
				}
			}
		}
	}
	return v
}

// trackingWorker keeps per-term state; a worker reused across terms, or
// state shared between terms, shows up as a non-empty tracker at start.
type trackingWorker struct {
	tracker map[string]bool
	queue   *leader.Queue[string]
	carried bool
}

func TestNewTermStartsFresh(t *testing.T) {
	env := testenv.Get(t)
	ns := env.Namespace(t, nil)
	var mu sync.Mutex
	var terms []*leader.Term
	var built []*trackingWorker
	reg := prometheus.NewRegistry()
	newWorker := func(term *leader.Term) (leader.Worker, error) {
		w := &trackingWorker{tracker: map[string]bool{}, queue: leader.NewQueue[string]("fresh", reg)}
		mu.Lock()
		built = append(built, w)
		mu.Unlock()
		return leader.WorkerFunc(func(term *leader.Term) error {
			if len(w.tracker) != 0 || w.queue.Len() != 0 {
				w.carried = true
			}
			w.tracker[term.ID()] = true
			w.queue.Add("left-over-" + term.ID())
			mu.Lock()
			terms = append(terms, term)
			mu.Unlock()
			w.queue.Run(term, 1, func(ctx context.Context, item string) error {
				select { // in flight until the term stops
				case <-ctx.Done():
				case <-term.Stopping():
				}
				return nil
			})
			return nil
		}), nil
	}
	startCandidate(t, env.Client, testConfig(ns, "leader"), newWorker)
	testenv.Eventually(t, 10*time.Second, func() error {
		mu.Lock()
		defer mu.Unlock()
		if len(terms) != 1 {
			return errors.New("no term yet")
		}
		return nil
	})
	// Take the lease for one second: the leader loses its term, then wins a
	// new one once the thief's lease expires.
	steal(t, env.Client, ns, "test-lease", "thief", 1)
	testenv.Eventually(t, 15*time.Second, func() error {
		mu.Lock()
		defer mu.Unlock()
		if len(terms) < 2 {
			return errors.New("no second term yet")
		}
		return nil
	})
	mu.Lock()
	defer mu.Unlock()
	if terms[0].Context().Err() == nil {
		t.Error("the first term's context is still live during the second term")
	}
	if terms[0].ID() == terms[1].ID() {
		t.Errorf("both terms have ID %q", terms[0].ID())
	}
	if !strings.HasPrefix(terms[1].ID(), "leader/") {
		t.Errorf("term ID %q does not start with the identity", terms[1].ID())
	}
	if len(built) < 2 || built[0] == built[1] {
		t.Fatal("the second term did not get a freshly built worker")
	}
	for i, w := range built {
		if w.carried {
			t.Errorf("term %d started with state from an earlier term", i)
		}
	}
}

func TestGracefulShutdownDrainsBeforeRelease(t *testing.T) {
	env := testenv.Get(t)
	ns := env.Namespace(t, nil)
	gate := make(chan struct{})
	entered := make(chan struct{})
	first := startCandidate(t, env.Client, testConfig(ns, "first"), func(term *leader.Term) (leader.Worker, error) {
		return leader.WorkerFunc(func(term *leader.Term) error {
			q := leader.NewQueue[int]("drain", nil)
			for i := range 20 {
				q.Add(i)
			}
			q.Run(term, 2, func(ctx context.Context, i int) error {
				if i == 0 {
					close(entered)
				}
				<-gate // nothing is written until shutdown has begun
				_, err := env.Client.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{
					ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("item-%02d", i)},
				}, metav1.CreateOptions{})
				return err
			})
			return nil
		}), nil
	})
	<-entered
	seenBySecond := make(chan int, 1)
	startCandidate(t, env.Client, testConfig(ns, "second"), func(term *leader.Term) (leader.Worker, error) {
		return leader.WorkerFunc(func(term *leader.Term) error {
			seenBySecond <- countConfigMaps(t, env.Client, ns)
			<-term.Stopping()
			return nil
		}), nil
	})
	first.cancel()
	// The term is draining with a live context: release the writes.
	close(gate)
	if err := <-first.done; err != nil {
		t.Fatal(err)
	}
	first.done <- nil
	if got := countConfigMaps(t, env.Client, ns); got != 20 {
		t.Errorf("%d of 20 queued items written by the graceful drain", got)
	}
	select {
	case got := <-seenBySecond:
		if got != 20 {
			t.Errorf("the next leader started when %d of 20 writes had landed; want all (release after the drain)", got)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the second candidate did not lead after the first released")
	}
}

// partitionable is a client whose requests fail while cut is set, as if
// the process were frozen or cut off from the API server.
func partitionable(t *testing.T, env *testenv.Env, cut *atomic.Bool) kubernetes.Interface {
	t.Helper()
	cfg := rest.CopyConfig(env.Config)
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return testenv.RoundTripFunc(func(r *http.Request) (*http.Response, error) {
			if cut.Load() {
				return nil, errors.New("partitioned")
			}
			return rt.RoundTrip(r)
		})
	})
	c, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestPartitionedLeaderStopsBeforeTheNextLeads plays a leader that can no
// longer reach the API server (the in-process form of a killed leader): the
// other candidate leads within LeaseDuration + RetryPeriod, and the cut-off
// leader's term has ended before that (RenewDeadline < LeaseDuration).
func TestPartitionedLeaderStopsBeforeTheNextLeads(t *testing.T) {
	env := testenv.Get(t)
	ns := env.Namespace(t, nil)
	var cut atomic.Bool
	type ended struct {
		identity string
		at       time.Time
	}
	starts := make(chan termEvent, 4)
	ends := make(chan ended, 4)
	newWorker := func(term *leader.Term) (leader.Worker, error) {
		return leader.WorkerFunc(func(term *leader.Term) error {
			starts <- termEvent{identity: term.Identity(), id: term.ID(), at: time.Now(), start: true}
			<-term.Stopping()
			if term.Context().Err() != nil { // lost, not shut down
				ends <- ended{term.Identity(), time.Now()}
			}
			return nil
		}), nil
	}
	startCandidate(t, partitionable(t, env, &cut), testConfig(ns, "cut-off"), newWorker)
	first := <-starts
	if first.identity != "cut-off" {
		t.Fatalf("first leader %q", first.identity)
	}
	startCandidate(t, env.Client, testConfig(ns, "standby"), newWorker)
	cutAt := time.Now()
	cut.Store(true)
	var second termEvent
	select {
	case second = <-starts:
	case <-time.After(15 * time.Second):
		t.Fatal("the standby never led")
	}
	end := <-ends
	cfg := testConfig(ns, "")
	t.Logf("partitioned leader's term ended %s after the cut; standby led %s after the cut (LeaseDuration %s, RetryPeriod %s)",
		end.at.Sub(cutAt), second.at.Sub(cutAt), cfg.LeaseDuration, cfg.RetryPeriod)
	if end.identity != "cut-off" || !end.at.Before(second.at) {
		t.Errorf("the cut-off leader's term ended at %s, not before the standby's began at %s", end.at, second.at)
	}
	if took := second.at.Sub(cutAt); took > cfg.LeaseDuration+cfg.RetryPeriod+time.Second {
		t.Errorf("standby led %s after the cut, want within LeaseDuration + RetryPeriod", took)
	}
	cut.Store(false)
}

func TestWorkerErrors(t *testing.T) {
	env := testenv.Get(t)
	boom := errors.New("boom")
	tests := []struct {
		name      string
		newWorker func(*leader.Term) (leader.Worker, error)
	}{
		{"newWorker fails", func(*leader.Term) (leader.Worker, error) { return nil, boom }},
		{"worker returns before its term ends", func(*leader.Term) (leader.Worker, error) {
			return leader.WorkerFunc(func(*leader.Term) error { return boom }), nil
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ns := env.Namespace(t, nil)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			err := leader.Run(ctx, env.Client, testConfig(ns, "x"), tt.newWorker, slog.New(slog.DiscardHandler), nil)
			if !errors.Is(err, boom) {
				t.Fatalf("Run = %v, want the worker's error", err)
			}
			if got := holder(t, env.Client, ns, "test-lease"); got != "" {
				t.Errorf("Lease still held by %q after the term failed; want released", got)
			}
		})
	}
}

// Holds answers from the Lease as stored, not from the elector's last
// observation: a term whose Lease names another holder no longer holds it,
// even before its elector notices.
func TestHoldsAsksTheLease(t *testing.T) {
	env := testenv.Get(t)
	ns := env.Namespace(t, nil)
	ctx := context.Background()
	terms := make(chan *leader.Term, 1)
	startCandidate(t, env.Client, testConfig(ns, "a"), func(*leader.Term) (leader.Worker, error) {
		return leader.WorkerFunc(func(term *leader.Term) error {
			terms <- term
			<-term.Stopping()
			return nil
		}), nil
	})
	term := <-terms
	if held, err := term.Holds(ctx); !held || err != nil {
		t.Fatalf("Holds() = %v, %v while leading; want true", held, err)
	}
	// The candidate renews the Lease meanwhile: retry the takeover on a
	// conflict, as any writer of a shared object must.
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		lease, err := env.Client.CoordinationV1().Leases(ns).Get(ctx, "test-lease", metav1.GetOptions{})
		if err != nil {
			return err
		}
		other := "b"
		lease.Spec.HolderIdentity = &other
		_, err = env.Client.CoordinationV1().Leases(ns).Update(ctx, lease, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if held, err := term.Holds(ctx); held || err != nil {
		t.Fatalf("Holds() = %v, %v after the Lease named another holder; want false", held, err)
	}

	free, _, end := leader.NewTerm(ctx, "c", "c/0/t")
	if held, _ := free.Holds(ctx); !held {
		t.Fatal("a Term without a Lease does not hold itself")
	}
	end()
	if held, _ := free.Holds(ctx); held {
		t.Fatal("an ended Term still holds")
	}
}

// gate is a stream source whose first SYNCED arrives when the test says.
type gate chan struct{}

func (g gate) WaitForSync(ctx context.Context) error {
	select {
	case <-g:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// A candidate does not campaign before its stream has synced: its client
// sends no Lease request until the first SYNCED (checked at every request,
// while another candidate wins the Lease and leads meanwhile), synced is
// called before its first term, and a context that ends first is no error.
func TestRunWhenSyncedCampaignsOnlyAfterTheFirstSynced(t *testing.T) {
	env := testenv.Get(t)
	ns := env.Namespace(t, nil)
	var isSynced, early atomic.Bool
	cfgA := rest.CopyConfig(env.Config)
	cfgA.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return testenv.RoundTripFunc(func(r *http.Request) (*http.Response, error) {
			if strings.Contains(r.URL.Path, "/leases") && !isSynced.Load() {
				early.Store(true)
			}
			return rt.RoundTrip(r)
		})
	})
	clientA, err := kubernetes.NewForConfig(cfgA)
	if err != nil {
		t.Fatal(err)
	}
	started := make(chan string, 2)
	newWorker := func(term *leader.Term) (leader.Worker, error) {
		return leader.WorkerFunc(func(term *leader.Term) error {
			started <- term.Identity()
			<-term.Stopping()
			return nil
		}), nil
	}
	synced := gate(make(chan struct{}))
	var servedBeforeTerm atomic.Bool
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- leader.RunWhenSynced(ctx, synced, func() { servedBeforeTerm.Store(len(started) == 0); isSynced.Store(true) },
			clientA, testConfig(ns, "a"), newWorker, slog.New(slog.DiscardHandler), nil)
	}()
	// b, synced, wins the Lease and leads while a waits for its stream.
	rb := startCandidate(t, env.Client, testConfig(ns, "b"), newWorker)
	if id := <-started; id != "b" {
		t.Fatalf("term of %q started while a's stream had not synced", id)
	}
	if early.Load() {
		t.Fatal("a sent a Lease request before its stream synced")
	}
	// a's stream syncs and b steps down: a takes the Lease.
	close(synced)
	rb.stop(t)
	if id := <-started; id != "a" {
		t.Fatalf("term of %q, want a", id)
	}
	if early.Load() || !servedBeforeTerm.Load() {
		t.Errorf("a's Lease request before its SYNCED: %v; synced called before a's term: %v", early.Load(), servedBeforeTerm.Load())
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("RunWhenSynced: %v", err)
	}

	ended, cancelEnded := context.WithCancel(context.Background())
	cancelEnded()
	if err := leader.RunWhenSynced(ended, gate(make(chan struct{})), func() { t.Error("synced called without a SYNCED") },
		clientA, testConfig(ns, "c"), newWorker, slog.New(slog.DiscardHandler), nil); err != nil {
		t.Errorf("RunWhenSynced with an ended context: %v", err)
	}
}

// hangable makes clients whose requests hang while cut —
// sent nowhere until the cut heals or the request's context ends — as
// requests do on a real partition (a node's link down, a frozen network):
// TCP holds them and delivers them once the link is back.
type hangable struct {
	mu     sync.Mutex
	healed chan struct{} // nil: not cut
	// sinceHeal counts the requests sent after the last heal that got an
	// answer.
	sinceHeal int
}

// askedSinceHeal says whether a request sent after the heal was answered.
func (h *hangable) askedSinceHeal() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.sinceHeal > 0
}

func (h *hangable) cut() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.healed = make(chan struct{})
}

func (h *hangable) heal() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.healed != nil {
		close(h.healed)
		h.healed = nil
	}
	h.sinceHeal = 0
}

func (h *hangable) client(t *testing.T, env *testenv.Env) kubernetes.Interface {
	t.Helper()
	cfg := rest.CopyConfig(env.Config)
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return testenv.RoundTripFunc(func(r *http.Request) (*http.Response, error) {
			h.mu.Lock()
			healed := h.healed
			h.mu.Unlock()
			if healed != nil {
				select {
				case <-healed:
				case <-r.Context().Done():
					return nil, r.Context().Err()
				}
			}
			resp, err := rt.RoundTrip(r)
			if err == nil && healed == nil {
				h.mu.Lock()
				h.sinceHeal++
				h.mu.Unlock()
			}
			return resp, err
		})
	})
	c, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestHungLeaderNeitherOverlapsNorReleasesTheNext: a leader whose requests
// hang (a partition, not a refused connection) ends its term within
// RenewDeadline of its last renewal, before the standby can lead; and when
// the partition heals after the standby leads, the old leader's release of
// the Lease — which client-go sends with the Lease it reads then — does
// not release the standby's Lease: the standby keeps leading, with no new
// term. (Before, the hung release read kept the old term running until it
// returned, up to RenewDeadline after the failed renewal — past the moment
// the standby led — and, answered after the heal, released the standby's
// Lease; the restored leader took it back at once: test/cluster's
// TestControlPlaneAcrossNodeFailure saw the Lease go back to the node that
// came back, each time.)
func TestHungLeaderNeitherOverlapsNorReleasesTheNext(t *testing.T) {
	env := testenv.Get(t)
	ns := env.Namespace(t, nil)
	cfg := func(identity string) leader.Config {
		c := testConfig(ns, identity)
		// A release read that hangs for up to 2.5 s after the failed
		// renewal, so the heal below lands inside it.
		c.RenewDeadline = 2500 * time.Millisecond
		return c
	}
	rec := &recorder{}
	var h hangable
	startCandidate(t, h.client(t, env), cfg("cut-off"), rec.newWorker)
	testenv.Eventually(t, 10*time.Second, func() error {
		if s := rec.started(); len(s) != 1 || s[0].identity != "cut-off" {
			return fmt.Errorf("terms started: %v", s)
		}
		return nil
	})
	startCandidate(t, env.Client, cfg("standby"), rec.newWorker)
	h.cut()
	cutAt := time.Now()
	testenv.Eventually(t, 15*time.Second, func() error {
		if s := rec.started(); len(s) != 2 {
			return fmt.Errorf("terms started: %d", len(s))
		}
		return nil
	})
	h.heal()
	standbyAt := rec.started()[1].at
	if s := rec.started()[1]; s.identity != "standby" {
		t.Fatalf("second term %s of %s, want the standby's", s.id, s.identity)
	}
	// Until the healed leader's release (if it sends one) has landed: its
	// hung read returned and it asked the API server again since (a release,
	// or its next campaign), and the standby renewed the Lease after that —
	// a released or retaken Lease shows in the holder checked below.
	var asked time.Time
	testenv.Eventually(t, 15*time.Second, func() error {
		if !h.askedSinceHeal() {
			return fmt.Errorf("the healed leader has not asked the API server since the heal")
		}
		if asked.IsZero() {
			asked = time.Now()
		}
		l, err := env.Client.CoordinationV1().Leases(ns).Get(context.Background(), "test-lease", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if l.Spec.RenewTime == nil || !l.Spec.RenewTime.After(asked) {
			return fmt.Errorf("the Lease was not renewed since the healed leader asked (renewed %v)", l.Spec.RenewTime)
		}
		return nil
	})
	rec.mu.Lock()
	events := append([]termEvent(nil), rec.events...)
	rec.mu.Unlock()
	var cutOffEnd time.Time
	for _, e := range events {
		if !e.start && e.identity == "cut-off" && cutOffEnd.IsZero() {
			cutOffEnd = e.at
		}
	}
	t.Logf("cut-off leader's term ended %s after the cut, the standby led %s after it", cutOffEnd.Sub(cutAt), standbyAt.Sub(cutAt))
	if cutOffEnd.IsZero() || !cutOffEnd.Before(standbyAt) {
		t.Errorf("the cut-off leader's term ended at %v, not before the standby's began %s after the cut: two terms ran at once", cutOffEnd, standbyAt.Sub(cutAt))
	}
	if rec.overlap.Load() {
		t.Error("two terms were active at once")
	}
	if got := holder(t, env.Client, ns, "test-lease"); got != "standby" {
		t.Errorf("after the heal the Lease names %q, want the standby, which led", got)
	}
	for _, e := range events {
		if !e.start && e.identity == "standby" {
			t.Errorf("the standby's term %s ended %s after the heal: the healed leader released the standby's Lease", e.id, e.at.Sub(standbyAt))
		}
	}
	if s := rec.started(); len(s) != 2 {
		t.Errorf("%d terms started, want 2 (the cut-off leader's, the standby's): %v", len(s), s)
	}
}
