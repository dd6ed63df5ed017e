// Package leader owns leadership: client-go leader election on a Lease, and
// the *term* it gives a leader. Each term gets a freshly built Worker (fresh
// queue, trackers and expectations), a context that every write of the term
// must use and that is cancelled the moment the term ends, and an orderly
// end:
//
//   - graceful (the process is shutting down): Stopping is closed, the
//     worker removes its handlers and drains its queue with a live context,
//     then the context is cancelled and only then is the Lease released, so
//     the next leader starts after the last write;
//   - lost lease: the context is cancelled first, so no write lands after
//     the loss, then Stopping is closed and the worker drops what is queued.
//
// A worker that does not stop within StopTimeout ends the process (exit
// code 1): a leader that cannot stop must not keep writing.
package leader

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"

	"github.com/ipledger/ipledger/pkg/install"
)

// Defaults of Config, as client-go's core components use.
const (
	DefaultLeaseDuration = 15 * time.Second
	DefaultRenewDeadline = 10 * time.Second
	DefaultRetryPeriod   = 2 * time.Second
	DefaultStopTimeout   = 30 * time.Second
)

// Config configures the election.
type Config struct {
	// LeaseName and LeaseNamespace name the coordination.k8s.io Lease
	// (LeaseNamespace defaults to install.DefaultNamespace).
	LeaseName, LeaseNamespace string
	// Identity names this candidate; it must be unique among candidates
	// (default: hostname plus a random suffix).
	Identity string
	// LeaseDuration, RenewDeadline and RetryPeriod are client-go's
	// (defaults 15s, 10s, 2s).
	LeaseDuration, RenewDeadline, RetryPeriod time.Duration
	// StopTimeout bounds how long a term may take to stop (default 30s);
	// overrunning it exits the process with code 1.
	StopTimeout time.Duration
	// Events, when set, is where terms write Events (typically
	// client.CoreV1()): every term gets its own recorder (Term.Recorder)
	// that writes with the term's context and is shut down when the term
	// ends. Not a flag.
	Events typedcorev1.EventsGetter
	// EventComponent is the source component of those Events. Not a flag.
	EventComponent string
}

// Flags registers the --leader-elect-* flags and --stop-timeout; preset
// fields become the flags' defaults.
func (c *Config) Flags(fs *flag.FlagSet) {
	c.Defaults()
	fs.StringVar(&c.LeaseName, "leader-elect-lease-name", c.LeaseName, "name of the Lease used for leader election")
	fs.StringVar(&c.LeaseNamespace, "leader-elect-namespace", c.LeaseNamespace, "namespace of the leader election Lease")
	fs.StringVar(&c.LeaseNamespace, "leader-elect-lease-namespace", c.LeaseNamespace, "alias of --leader-elect-namespace")
	fs.StringVar(&c.Identity, "leader-elect-identity", c.Identity, "unique identity of this candidate (default <hostname>_<random>)")
	fs.DurationVar(&c.LeaseDuration, "leader-elect-lease-duration", c.LeaseDuration, "how long a non-leader waits after the last observed renewal before taking over")
	fs.DurationVar(&c.RenewDeadline, "leader-elect-renew-deadline", c.RenewDeadline, "how long the leader retries renewing before it gives up its term")
	fs.DurationVar(&c.RetryPeriod, "leader-elect-retry-period", c.RetryPeriod, "how often candidates try to acquire or renew")
	fs.DurationVar(&c.StopTimeout, "stop-timeout", c.StopTimeout, "bound on stopping a term (drain); overrunning it exits the process")
}

// Defaults fills the fields left unset (not LeaseName nor Identity).
func (c *Config) Defaults() {
	if c.LeaseNamespace == "" {
		c.LeaseNamespace = install.DefaultNamespace
	}
	if c.LeaseDuration == 0 {
		c.LeaseDuration = DefaultLeaseDuration
	}
	if c.RenewDeadline == 0 {
		c.RenewDeadline = DefaultRenewDeadline
	}
	if c.RetryPeriod == 0 {
		c.RetryPeriod = DefaultRetryPeriod
	}
	if c.StopTimeout == 0 {
		c.StopTimeout = DefaultStopTimeout
	}
}

// Validate reports a configuration client-go would refuse, naming the flag.
func (c *Config) Validate() error {
	switch {
	case c.LeaseName == "":
		return errors.New("leader election needs a Lease name (--leader-elect-lease-name)")
	case c.LeaseNamespace == "":
		return errors.New("leader election needs a namespace (--leader-elect-namespace)")
	case c.LeaseDuration < time.Second:
		return fmt.Errorf("--leader-elect-lease-duration %s: want at least 1s", c.LeaseDuration)
	case c.RenewDeadline >= c.LeaseDuration:
		return fmt.Errorf("--leader-elect-renew-deadline %s must be shorter than --leader-elect-lease-duration %s", c.RenewDeadline, c.LeaseDuration)
	case float64(c.RenewDeadline) <= leaderelection.JitterFactor*float64(c.RetryPeriod):
		return fmt.Errorf("--leader-elect-renew-deadline %s must exceed %.1f × --leader-elect-retry-period %s", c.RenewDeadline, leaderelection.JitterFactor, c.RetryPeriod)
	case c.RetryPeriod <= 0 || c.StopTimeout <= 0:
		return errors.New("--leader-elect-retry-period and --stop-timeout must be positive")
	}
	return nil
}

// DefaultIdentity is <hostname>_<random>, unique per process.
func DefaultIdentity() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "unknown"
	}
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return host + "_" + hex.EncodeToString(b)
}

// Term is one leadership term.
type Term struct {
	ctx      context.Context
	stopping chan struct{}
	// stoppingCtx is ctx's child cancelled when stopping is closed.
	stoppingCtx context.Context
	identity    string
	id          string
	recorder    record.EventRecorder
	// holder reads the Lease's holder from the API server; nil for a Term
	// not backed by a Lease.
	holder func(ctx context.Context) (string, error)
}

// NewTerm returns a Term not backed by a Lease: for tests of a Worker, and
// for running a Worker without election. stop closes Stopping; end cancels
// Context. Call them in the order the term ends: stop, wait for the worker,
// end (graceful) — or end, then stop (lost). Both are idempotent.
func NewTerm(parent context.Context, identity, id string) (term *Term, stop, end func()) {
	ctx, cancel := context.WithCancel(parent)
	stoppingCtx, cancelStopping := context.WithCancel(ctx)
	t := &Term{ctx: ctx, stopping: make(chan struct{}), stoppingCtx: stoppingCtx, identity: identity, id: id}
	var once sync.Once
	stop = func() {
		once.Do(func() {
			close(t.stopping)
			cancelStopping()
		})
	}
	return t, stop, cancel
}

// Context is cancelled the moment the term ends (lost lease, or after a
// graceful drain). Use it for every write of the term: a write with an
// ended term's context fails before it reaches the API server.
func (t *Term) Context() context.Context { return t.ctx }

// Stopping is closed when the term must stop accepting new work (shutdown
// or lost lease). When it is closed and Context is still live, the worker
// should drain; when Context is already done, the lease was lost and
// queued work must be dropped.
func (t *Term) Stopping() <-chan struct{} { return t.stopping }

// StoppingContext is cancelled as soon as the term stops accepting new work
// (Stopping is closed) or ends (Context is cancelled), whichever comes
// first. Use it for what must not hold up a drain — waiting for a sync,
// sleeping between retries, a loop that takes new work — and Context for
// the writes a graceful drain must still finish.
func (t *Term) StoppingContext() context.Context { return t.stoppingCtx }

// Identity is the candidate identity holding the term.
func (t *Term) Identity() string { return t.identity }

// ID is unique per term: "<identity>/<leaseTransitions>/<acquireTime RFC3339Nano>"
// (the acquire time as stored in the Lease, at microsecond precision).
func (t *Term) ID() string { return t.id }

// Holds asks the API server (a quorum read, never a cache) whether the Lease
// still names this term's candidate as its holder, and the term has not
// ended. A write that must never land after a newer term began — fencing a
// ledger — reads what it will compare-and-swap first and calls Holds after:
// a term that starts later can only have read after this answer, so its own
// compare-and-swap writes are based on what this one wrote. An error means
// the answer is unknown, not that the Lease is lost. A Term from NewTerm
// has no Lease: only its context is checked.
func (t *Term) Holds(ctx context.Context) (bool, error) {
	if t.ctx.Err() != nil {
		return false, nil
	}
	if t.holder == nil {
		return true, nil
	}
	h, err := t.holder(ctx)
	if err != nil {
		return false, err
	}
	return h == t.identity && t.ctx.Err() == nil, nil
}

// Worker is built fresh for every term (fresh queue, trackers, expectations).
type Worker interface {
	// Run registers handlers, works until term.Stopping() is closed, then
	// removes handlers, drains its queue (in-flight items finish with
	// term.Context(); queued items are dropped when the lease was lost) and
	// returns.
	Run(term *Term) error
}

// WorkerFunc adapts a function to Worker.
type WorkerFunc func(term *Term) error

// Run calls f.
func (f WorkerFunc) Run(term *Term) error { return f(term) }

// exit ends the process when a term overruns its stop bound; tests replace it.
var exit = os.Exit

// Source is what a component must have before it campaigns: the
// watcher stream, whose first SYNCED puts the whole world in its store.
type Source interface {
	WaitForSync(ctx context.Context) error
}

// RunWhenSynced is every component's order of start: wait for src's first
// SYNCED, call synced (the component starts serving reads), then campaign
// (Run). A leader acting on a partial snapshot would give back what it has
// not seen yet — ipam an address, endpoints an endpoint, eipd an Elastic
// IP — so none campaigns before. It returns nil when ctx ends first.
func RunWhenSynced(ctx context.Context, src Source, synced func(), client kubernetes.Interface, cfg Config,
	newWorker func(term *Term) (Worker, error), log *slog.Logger, reg prometheus.Registerer) error {
	if err := src.WaitForSync(ctx); err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	if synced != nil {
		synced()
	}
	if log != nil {
		log.Info("Watcher stream synced; campaigning for the Lease", "lease", cfg.LeaseNamespace+"/"+cfg.LeaseName)
	}
	return Run(ctx, client, cfg, newWorker, log, reg)
}

// Run campaigns for the Lease until ctx ends, running a fresh Worker for
// every term it wins. When ctx ends during a term, the term stops
// gracefully and the Lease is released. It returns nil after ctx ends, or
// the error of newWorker or of a Worker (after the term's orderly end).
func Run(ctx context.Context, client kubernetes.Interface, cfg Config, newWorker func(term *Term) (Worker, error),
	log *slog.Logger, reg prometheus.Registerer) error {
	cfg.Defaults()
	if cfg.Identity == "" {
		cfg.Identity = DefaultIdentity()
	}
	if err := cfg.Validate(); err != nil {
		return err
	}
	if log == nil {
		log = slog.Default()
	}
	log = log.With("lease", cfg.LeaseNamespace+"/"+cfg.LeaseName, "identity", cfg.Identity)
	c := &candidate{cfg: cfg, client: client, newWorker: newWorker, log: log, metrics: newMetrics(reg, cfg.LeaseName)}
	c.metrics.isLeader.Set(0)
	for ctx.Err() == nil {
		if err := c.campaign(ctx); err != nil {
			return err
		}
	}
	return nil
}

type candidate struct {
	cfg       Config
	client    kubernetes.Interface
	newWorker func(*Term) (Worker, error)
	log       *slog.Logger
	metrics   *metrics
}

// campaign runs one LeaderElector until it ends: ctx ended (after a
// graceful term, if one was running) or a term was lost.
func (c *candidate) campaign(ctx context.Context) error {
	// The elector's context is not ctx: cancelling it releases the Lease,
	// which must wait until the term has drained.
	runCtx, cancelRun := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelRun()
	runCtx = klog.NewContext(runCtx, logr.FromSlogHandler(c.log.Handler()))

	lock := &observingLock{
		Interface: &resourcelock.LeaseLock{
			LeaseMeta:  metav1.ObjectMeta{Name: c.cfg.LeaseName, Namespace: c.cfg.LeaseNamespace},
			Client:     c.client.CoordinationV1(),
			LockConfig: resourcelock.ResourceLockConfig{Identity: c.cfg.Identity},
		},
	}
	var (
		termDone = make(chan struct{})
		termErr  error
		started  = time.Now()
		shutdown = make(chan struct{})
	)
	le, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock:            lock,
		LeaseDuration:   c.cfg.LeaseDuration,
		RenewDeadline:   c.cfg.RenewDeadline,
		RetryPeriod:     c.cfg.RetryPeriod,
		ReleaseOnCancel: true,
		Name:            c.cfg.LeaseName,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(leCtx context.Context) {
				defer close(termDone)
				c.metrics.acquireSeconds.Observe(time.Since(started).Seconds())
				termErr = c.lead(leCtx, lock, shutdown)
				// Whatever ended the term, end the election run: the Lease
				// is released if still held, and a lost term campaigns anew.
				cancelRun()
			},
			OnStoppedLeading: func() {},
			OnNewLeader: func(identity string) {
				c.log.Info("Observed a new leader", "leader", identity)
			},
		},
	})
	if err != nil {
		return fmt.Errorf("leader election: %w", err)
	}
	electionDone := make(chan struct{})
	go func() {
		defer close(electionDone)
		le.Run(runCtx)
	}()

	select {
	case <-ctx.Done():
		close(shutdown)
		if !lock.led() {
			// Not leading: stop campaigning. (Should the Lease be won in
			// this very instant, the term starts on a cancelled context and
			// ends before any write.)
			cancelRun()
		}
	case <-termDone:
	case <-electionDone:
	}
	if lock.led() {
		// A term ran: wait until it has stopped (gracefully on shutdown).
		// OnStartedLeading runs in its own goroutine, so it may outlive
		// the elector after a lost lease.
		<-termDone
	}
	// Release (ReleaseOnCancel) only now: after the last write of the term.
	cancelRun()
	<-electionDone
	if lock.led() {
		<-termDone
	}
	return termErr
}

// holder reads the Lease's holder identity from the API server ("" when the
// Lease does not exist or names nobody).
func (c *candidate) holder(ctx context.Context) (string, error) {
	l, err := c.client.CoordinationV1().Leases(c.cfg.LeaseNamespace).Get(ctx, c.cfg.LeaseName, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("read Lease %s/%s: %w", c.cfg.LeaseNamespace, c.cfg.LeaseName, err)
	}
	if l.Spec.HolderIdentity == nil {
		return "", nil
	}
	return *l.Spec.HolderIdentity, nil
}

// lead runs one term on the elector's leCtx, which client-go cancels when
// renewing fails; shutdown is closed when the process is stopping.
func (c *candidate) lead(leCtx context.Context, lock *observingLock, shutdown <-chan struct{}) error {
	rec := lock.acquired()
	id := fmt.Sprintf("%s/%d/%s", c.cfg.Identity, rec.LeaderTransitions,
		rec.AcquireTime.UTC().Truncate(time.Microsecond).Format(time.RFC3339Nano))
	term, stop, end := NewTerm(leCtx, c.cfg.Identity, id)
	defer end()
	term.holder = c.holder
	if c.cfg.Events != nil {
		var stopEvents func()
		term.recorder, stopEvents = newTermRecorder(term.Context(), c.cfg.Events, c.cfg.EventComponent)
		// Deferred after end: runs once the term's context is cancelled.
		defer stopEvents()
	}
	log := c.log.With("term", id)
	// Seeing another holder in the Lease ends the term at once, without
	// waiting for client-go's renew deadline; so does any release.
	endTerm := func(reason string) {
		if term.Context().Err() == nil {
			log.Warn("Ending the term", "reason", reason)
		}
		end()
	}
	lock.setEndTerm(endTerm)
	defer lock.setEndTerm(nil)
	go c.watchRenewals(term.Context(), lock, endTerm)
	select {
	case <-shutdown:
		log.Info("Won the lease while shutting down; releasing it without starting a worker")
		return nil
	default:
	}

	c.metrics.isLeader.Set(1)
	c.metrics.transition("started")
	log.Info("Started leading")

	worker, err := c.newWorker(term)
	if err != nil {
		end()
		stop()
		c.metrics.isLeader.Set(0)
		c.metrics.transition("failed")
		return fmt.Errorf("build the worker of term %s: %w", id, err)
	}
	workerDone := make(chan error, 1)
	go func() { workerDone <- worker.Run(term) }()

	var (
		reason    string
		workerErr error
		returned  bool
	)
	select {
	case <-term.Context().Done():
		// Lost: the context is already cancelled, so nothing more is
		// written; now tell the worker to stop and drop its queue.
		reason = "lost"
		c.metrics.isLeader.Set(0)
		log.Warn("Lost the lease; stopping the term")
	case <-shutdown:
		reason = "released"
		log.Info("Shutting down; draining the term before releasing the lease")
	case workerErr = <-workerDone:
		reason, returned = "worker-returned", true
		end()
		if workerErr == nil {
			workerErr = fmt.Errorf("worker of term %s returned before its term ended", id)
		}
		log.Error("Worker returned before its term ended; giving up the lease", "err", workerErr)
	}
	stop()
	begin := time.Now()
	if !returned {
		select {
		case workerErr = <-workerDone:
		case <-time.After(c.cfg.StopTimeout):
			log.Error("Term did not stop in time; exiting", "stopTimeout", c.cfg.StopTimeout.String())
			exit(1)
			workerErr = <-workerDone // only reached when exit is replaced in tests
		}
	}
	// The drain is over: from here no write of this term may succeed.
	end()
	c.metrics.isLeader.Set(0)
	c.metrics.stopSeconds.Observe(time.Since(begin).Seconds())
	c.metrics.transition(reason)
	log.Info("Stopped leading", "reason", reason, "stopDuration", time.Since(begin).String())
	switch {
	case workerErr == nil || reason == "worker-returned":
		return workerErr
	case reason == "lost":
		// Errors of a term that was taken away (typically its cancelled
		// context) do not stop the candidate: it campaigns again.
		log.Warn("Worker of the lost term returned an error", "err", workerErr)
		return nil
	case errors.Is(workerErr, context.Canceled):
		return nil
	default:
		return fmt.Errorf("worker of term %s: %w", id, workerErr)
	}
}

// watchRenewals ends the term once RenewDeadline has passed since the
// last renewal this candidate sent (the RenewTime of its last successful
// write of the Lease), whatever client-go is doing then. client-go gives
// up a term only when its renew loop fails, and then ends the term's
// context only after its release of the Lease returns, which reads the
// Lease first: on a partition that read hangs up to RenewDeadline more, and
// the term would run on past the moment a standby may lead (LeaseDuration
// after it last saw the Lease renewed; TestHungLeaderNeitherOverlapsNorReleasesTheNext).
// Ending it here keeps RenewDeadline < LeaseDuration a real bound: the
// term has ended LeaseDuration − RenewDeadline before another replica can
// lead.
func (c *candidate) watchRenewals(ctx context.Context, lock *observingLock, endTerm func(string)) {
	for {
		wait := time.Until(lock.renewed().Add(c.cfg.RenewDeadline))
		if wait <= 0 {
			endTerm(fmt.Sprintf("the Lease was not renewed for %s (--leader-elect-renew-deadline)", c.cfg.RenewDeadline))
			return
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}

// observingLock wraps the Lease lock to learn the record of our
// acquisition (for the term ID) and of our last renewal (watchRenewals),
// to end the term at once when the Lease names another holder, to end the
// term before the Lease is released, and to release only a Lease that
// names us.
type observingLock struct {
	resourcelock.Interface

	mu        sync.Mutex
	record    resourcelock.LeaderElectionRecord
	hasRecord bool
	renewedAt time.Time
	// seen is the holder the Lease named at the last Get.
	seen    string
	endTerm func(reason string)
}

// Get returns the Lease's record. Before this campaign has acquired the
// Lease, a record naming our own identity (left by an earlier term of this
// process that could not release it) is shown as unheld, so the new term
// is a new acquisition with its own transitions count and acquire time.
func (l *observingLock) Get(ctx context.Context) (*resourcelock.LeaderElectionRecord, []byte, error) {
	rec, raw, err := l.Interface.Get(ctx)
	if err != nil || rec == nil {
		return rec, raw, err
	}
	l.mu.Lock()
	held, end := l.hasRecord, l.endTerm
	l.seen = rec.HolderIdentity
	l.mu.Unlock()
	if rec.HolderIdentity == l.Identity() && !held {
		unheld := *rec
		unheld.HolderIdentity = ""
		return &unheld, raw, nil
	}
	if rec.HolderIdentity != l.Identity() && end != nil {
		end("the Lease names holder " + strconv.Quote(rec.HolderIdentity))
	}
	return rec, raw, err
}

func (l *observingLock) Create(ctx context.Context, rec resourcelock.LeaderElectionRecord) error {
	err := l.Interface.Create(ctx, rec)
	l.observe(rec, err)
	return err
}

// Update renews, acquires or (with an empty holder) releases the Lease. A
// release first ends the term: no write of the term may follow the release.
// A release is written only when the Lease, as read just before, names us:
// client-go's release reads the Lease but decides whether it leads from the
// record it saw before, so a leader cut off while another replica took the
// Lease over would release the new leader's Lease once its read got
// through (client-go v0.37.2 tryRelease).
func (l *observingLock) Update(ctx context.Context, rec resourcelock.LeaderElectionRecord) error {
	if rec.HolderIdentity == "" {
		l.mu.Lock()
		end, seen := l.endTerm, l.seen
		l.mu.Unlock()
		if end != nil {
			end("releasing the Lease")
		}
		if seen != l.Identity() {
			// Not ours to release: leave it to its holder.
			return nil
		}
	}
	err := l.Interface.Update(ctx, rec)
	l.observe(rec, err)
	return err
}

func (l *observingLock) observe(rec resourcelock.LeaderElectionRecord, err error) {
	if err != nil || rec.HolderIdentity != l.Identity() {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.record, l.hasRecord = rec, true
	l.renewedAt = rec.RenewTime.Time
}

// renewed is the RenewTime of our last successful write of the Lease.
func (l *observingLock) renewed() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.renewedAt
}

// acquired is the record of the acquisition that started the term.
func (l *observingLock) acquired() resourcelock.LeaderElectionRecord {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.record
}

// led reports whether this campaign acquired the Lease (so a term runs).
func (l *observingLock) led() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.hasRecord
}

func (l *observingLock) setEndTerm(f func(reason string)) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.endTerm = f
}
