// Package stream is the client of ipledger.watcher.v1.WatcherService that every
// ipledger consumer reads the cluster through. It keeps a read-only indexed
// store of the objects the watcher streams, reconnects with backoff across
// watcher replicas and resumes where it left off, and delivers add, update
// (with the old object) and delete events to handlers that can be registered
// and removed at any time; a new handler first receives the whole store as adds.
//
// A replica is interchangeable: when a stream starts with a fresh snapshot (a
// new epoch, or history the watcher no longer holds) everything known is marked
// stale, and after SYNCED what did not come back is deleted, with OnDelete, so
// no object deleted while the client was away survives in the store.
//
// A replica may also be behind the one the client left. The client never
// goes back: it drops any version of an object older than one it has handed
// out (or than the one it deleted), and it holds back the deletion of an
// object a replica lacks until that replica shows a version of the same kind
// at least as new, or until Config.LagGrace passes. docs/stream.md has the
// whole contract.
package stream

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/resolver"
	"google.golang.org/grpc/resolver/manual"
	"google.golang.org/grpc/status"

	"github.com/ipledger/ipledger/pkg/authz"
	"github.com/ipledger/ipledger/pkg/backoff"
	"github.com/ipledger/ipledger/pkg/install"
	"github.com/ipledger/ipledger/pkg/promreg"
	watcherv1 "github.com/ipledger/ipledger/proto/ipledger/watcher/v1"
	watcherv1grpc "github.com/ipledger/ipledger/proto/ipledger/watcher/v1/watcherv1grpc"
)

// Config says which watcher to dial and what to stream from it.
type Config struct {
	// Target is "dns:///host:port" (every replica, round robin),
	// "static:///a:1,b:2" (a fixed list, for tests) or "host:port".
	Target string
	Kinds  []watcherv1.Kind
	// OptionalKinds are watched too where the watcher serves them. A
	// watcher of an older release refuses a kind it does not know
	// (InvalidArgument on "kinds"); the client then watches Kinds alone on
	// that stream, and asks again for all on the next one, so a roll of the
	// watchers never holds a client back (docs/upgrading.md, rule 4).
	// Meanwhile the store holds no objects of the optional kinds.
	OptionalKinds []watcherv1.Kind
	Namespaces    []string
	LabelSelector string
	// TokenFile is a bearer token file (a projected ServiceAccount token), re-read
	// on rotation; "" sends no token.
	TokenFile string
	// Plaintext disables TLS.
	Plaintext bool
	// CAFile verifies the watcher's certificate; "" uses the system roots.
	CAFile string

	// IdleTimeout ends a stream that received nothing (not even a HEARTBEAT)
	// for this long, so a silently dead replica is left; 0 means 45s. Keep it
	// well above the watcher's --heartbeat-interval.
	IdleTimeout time.Duration
	// MinBackoff and MaxBackoff bound the delay between reconnects; 0 means
	// 100ms and 5s.
	MinBackoff, MaxBackoff time.Duration
	// LagGrace is how long the client keeps an object that a replica says
	// is gone when that replica has not yet shown anything of the object's
	// kind as new as the version the client holds (it may be behind), and
	// how long it remembers deleted objects so that a replica behind cannot
	// bring them back; 0 means 1m.
	LagGrace time.Duration
}

// Flags registers the connection flags; Kinds, Namespaces and LabelSelector are
// chosen by the program, not the operator.
func (c *Config) Flags(fs *flag.FlagSet) {
	fs.StringVar(&c.Target, "watcher-addr", c.Target, "gRPC target of the watcher: dns:///host:port, static:///a:1,b:2 or host:port")
	fs.StringVar(&c.TokenFile, "watcher-token-file", c.TokenFile, "bearer token file sent to the watcher (re-read when it changes); empty sends none")
	fs.BoolVar(&c.Plaintext, "watcher-plaintext", c.Plaintext, "dial the watcher without TLS")
	fs.StringVar(&c.CAFile, "watcher-ca-file", c.CAFile, "CA bundle that verifies the watcher's certificate; empty uses the system roots")
	fs.DurationVar(&c.LagGrace, "watcher-lag-grace", c.LagGrace,
		"how long an object a watcher replica lacks is kept while that replica may be behind (0 means 1m)")
}

// Handler receives the events of the store. An event's objects are shared
// by every handler: never mutate them. Calls are serialised with the stream:
// keep them short (enqueue a key).
type Handler interface {
	OnAdd(obj *watcherv1.Object)
	OnUpdate(oldObj, newObj *watcherv1.Object)
	OnDelete(obj *watcherv1.Object)
}

// InitialListHandler is a Handler that tells the objects AddHandler replays
// from the store apart from live additions, as client-go's isInInitialList
// does: a consumer that queues every object of a kind on the replay can skip
// the lookups a live change of another kind needs.
type InitialListHandler interface {
	Handler
	// OnInitialAdd receives each object AddHandler replays, instead of OnAdd.
	OnInitialAdd(obj *watcherv1.Object)
}

// HandlerFuncs adapts functions to Handler; nil functions are skipped.
// InitialAddFunc, when set, receives the replayed objects instead of AddFunc.
type HandlerFuncs struct {
	AddFunc        func(*watcherv1.Object)
	InitialAddFunc func(*watcherv1.Object)
	UpdateFunc     func(old, new *watcherv1.Object)
	DeleteFunc     func(*watcherv1.Object)
}

// OnInitialAdd calls InitialAddFunc if set, else AddFunc.
func (h HandlerFuncs) OnInitialAdd(obj *watcherv1.Object) {
	if h.InitialAddFunc != nil {
		h.InitialAddFunc(obj)
		return
	}
	h.OnAdd(obj)
}

// OnAdd calls AddFunc if set.
func (h HandlerFuncs) OnAdd(obj *watcherv1.Object) {
	if h.AddFunc != nil {
		h.AddFunc(obj)
	}
}

// OnUpdate calls UpdateFunc if set.
func (h HandlerFuncs) OnUpdate(oldObj, newObj *watcherv1.Object) {
	if h.UpdateFunc != nil {
		h.UpdateFunc(oldObj, newObj)
	}
}

// OnDelete calls DeleteFunc if set.
func (h HandlerFuncs) OnDelete(obj *watcherv1.Object) {
	if h.DeleteFunc != nil {
		h.DeleteFunc(obj)
	}
}

// Registration identifies a handler added with AddHandler; the zero value
// identifies none.
type Registration struct{ reg *registration }

type registration struct {
	h       Handler
	removed atomic.Bool
}

// Client streams from the watcher into a Store. One per process.
type Client struct {
	cfg   Config
	log   *slog.Logger
	m     *metrics
	store *Store
	conn  *grpc.ClientConn

	// dispatchMu serialises applying events (store + handlers) with the replay
	// of AddHandler, so a new handler sees every object exactly once.
	dispatchMu sync.Mutex
	handlersMu sync.Mutex
	handlers   atomic.Pointer[[]*registration]

	synced     chan struct{}
	syncedOnce sync.Once

	// Stream position and lag memory; only the Run goroutine touches these.
	epoch     string
	resumeRev uint64
	// withoutOptional: the last stream was refused for its optional kinds,
	// so the next one asks for Kinds alone; watched is what the last stream
	// asked for.
	withoutOptional bool
	watched         []watcherv1.Kind
	lag             *lagGuard
	now             func() time.Time
}

// New validates cfg and builds a Client; it does not connect until Run.
func New(cfg Config, log *slog.Logger, reg prometheus.Registerer) (*Client, error) {
	if cfg.Target == "" {
		return nil, errors.New("stream: no watcher target: set --watcher-addr (e.g. dns:///ipledger-watcher." + install.DefaultNamespace + ":9090)")
	}
	if len(cfg.Kinds) == 0 {
		return nil, errors.New("stream: no kinds to watch")
	}
	if cfg.IdleTimeout <= 0 {
		cfg.IdleTimeout = 45 * time.Second
	}
	if cfg.MinBackoff <= 0 {
		cfg.MinBackoff = 100 * time.Millisecond
	}
	if cfg.MaxBackoff <= 0 {
		cfg.MaxBackoff = 5 * time.Second
	}
	if cfg.LagGrace <= 0 {
		cfg.LagGrace = time.Minute
	}
	if log == nil {
		log = slog.Default()
	}
	m, err := newMetrics(reg)
	if err != nil {
		return nil, err
	}
	c := &Client{cfg: cfg, log: log.With("component", "stream"), m: m, store: newStore(), synced: make(chan struct{}),
		lag: newLagGuard(cfg.LagGrace), now: time.Now}
	c.handlers.Store(&[]*registration{})

	opts, err := authz.DialOptions(cfg.TokenFile, cfg.CAFile, cfg.Plaintext)
	if err != nil {
		return nil, fmt.Errorf("stream: %w", err)
	}
	opts = append(opts, grpc.WithDefaultServiceConfig(`{"loadBalancingConfig":[{"round_robin":{}}]}`))
	target := cfg.Target
	if addrs, ok := strings.CutPrefix(target, "static:///"); ok {
		r := manual.NewBuilderWithScheme("static")
		var state resolver.State
		for _, a := range strings.Split(addrs, ",") {
			if a = strings.TrimSpace(a); a != "" {
				state.Endpoints = append(state.Endpoints, resolver.Endpoint{Addresses: []resolver.Address{{Addr: a}}})
			}
		}
		if len(state.Endpoints) == 0 {
			return nil, fmt.Errorf("stream: target %q lists no address", target)
		}
		r.InitialState(state)
		opts = append(opts, grpc.WithResolvers(r))
	}
	c.conn, err = grpc.NewClient(target, opts...)
	if err != nil {
		return nil, fmt.Errorf("stream: dial %s: %w", target, err)
	}
	return c, nil
}

// Store returns the read-only store.
func (c *Client) Store() *Store { return c.store }

// WaitForSync blocks until the first SYNCED has been applied or ctx ends.
func (c *Client) WaitForSync(ctx context.Context) error {
	select {
	case <-c.synced:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// HasSynced reports whether the first SYNCED has been applied.
func (c *Client) HasSynced() bool {
	select {
	case <-c.synced:
		return true
	default:
		return false
	}
}

// AddHandler replays every cached object to h as OnAdd (OnInitialAdd when h
// is an InitialListHandler), then delivers live events. Do not call it from
// inside a handler callback (it waits for the callback's event to finish).
func (c *Client) AddHandler(h Handler) Registration {
	c.dispatchMu.Lock()
	defer c.dispatchMu.Unlock()
	replay := h.OnAdd
	if ih, ok := h.(InitialListHandler); ok {
		replay = ih.OnInitialAdd
	}
	// Decoded as replayed (a few hundred ahead): a replay of 10,000
	// Services that decoded them all first held ≈20 MB for its length.
	for o := range c.store.all() {
		replay(o)
	}
	return c.register(h)
}

// Follow registers h for the events from now on and replays nothing: for a
// caller that reads the whole store itself once Follow returns (ipam's term
// start rebuilds from every object), to whom AddHandler's replay would be a
// decode of every object for nothing. An event applied while Follow
// registers is either in the store the caller reads next or delivered to h.
func (c *Client) Follow(h Handler) Registration {
	c.dispatchMu.Lock()
	defer c.dispatchMu.Unlock()
	return c.register(h)
}

// register adds h to the handlers events are delivered to; the caller
// holds dispatchMu.
func (c *Client) register(h Handler) Registration {
	r := &registration{h: h}
	c.handlersMu.Lock()
	old := *c.handlers.Load()
	next := append(append(make([]*registration, 0, len(old)+1), old...), r)
	c.handlers.Store(&next)
	c.handlersMu.Unlock()
	c.m.handlers.Set(float64(len(next)))
	return Registration{reg: r}
}

// RemoveHandler stops delivering events to the handler; idempotent, and safe to
// call from inside a callback. Once it returns no new callback starts.
func (c *Client) RemoveHandler(r Registration) {
	if r.reg == nil {
		return
	}
	r.reg.removed.Store(true)
	c.handlersMu.Lock()
	defer c.handlersMu.Unlock()
	old := *c.handlers.Load()
	next := make([]*registration, 0, len(old))
	for _, x := range old {
		if x != r.reg {
			next = append(next, x)
		}
	}
	c.handlers.Store(&next)
	c.m.handlers.Set(float64(len(next)))
}

// Run connects, takes the snapshot, applies deltas and reconnects with backoff
// (resuming where it left off) until ctx ends; then it closes the connection
// and returns nil. Call it once.
func (c *Client) Run(ctx context.Context) error {
	defer c.conn.Close()
	retry := backoff.Policy{First: c.cfg.MinBackoff, Max: c.cfg.MaxBackoff}.Start()
	for {
		optional := !c.withoutOptional && len(c.cfg.OptionalKinds) > 0
		reachedSync, err := c.watchOnce(ctx)
		if ctx.Err() != nil {
			return nil
		}
		c.withoutOptional = optional && kindsRefused(err)
		if c.withoutOptional {
			c.log.Info("The watcher does not serve the optional kinds (an older release); watching without them until one that does answers",
				"optionalKinds", fmt.Sprint(c.cfg.OptionalKinds), "reason", status.Convert(err).Message())
			continue
		}
		if reachedSync {
			retry.Reset()
		}
		// Equal jitter, never above MaxBackoff, so that many clients of a
		// restarted watcher spread out (the stream's variant of the policy).
		delay := retry.NextJittered()
		code := status.Code(err)
		c.m.disconnects.WithLabelValues(code.String()).Inc()
		switch refused := code == codes.Unauthenticated || code == codes.PermissionDenied; {
		case refused && reachedSync:
			// The watcher re-authorizes open streams: the token this stream
			// opened with expired (normal: the file holds a rotated one), or
			// the grant is gone, which the reconnect will say.
			c.log.Warn("Watcher ended the stream: it no longer accepts the credentials it was opened with; reconnecting with the current token",
				"code", code.String(), "reason", status.Convert(err).Message())
		case refused:
			// A refused token (expired, deleted ServiceAccount, no ipledger
			// audience) or a missing grant: nothing arrives until an operator
			// fixes it, so say so loudly on every refusal.
			c.log.Error("Watcher refused this client's credentials; retrying, but nothing is delivered until its token or RBAC is fixed",
				"code", code.String(), "reason", status.Convert(err).Message(), "retryIn", delay)
		default:
			c.log.Info("Watch stream ended; reconnecting", "code", code.String(), "err", err, "retryIn", delay)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(delay):
		}
	}
}

// watchOnce runs one stream until it fails; it reports whether it reached SYNCED.
func (c *Client) watchOnce(ctx context.Context) (bool, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// The store holds every object's state before a delta: handlers get
	// that one, so the watcher need not send it again.
	kinds := c.cfg.Kinds
	if !c.withoutOptional {
		kinds = append(slices.Clone(kinds), c.cfg.OptionalKinds...)
	}
	if !slices.Equal(kinds, c.watched) {
		// Another set of kinds: a resume would bring deltas of these kinds
		// only, over a store that holds the others'. Start from a snapshot.
		c.epoch, c.resumeRev, c.watched = "", 0, kinds
	}
	req := &watcherv1.WatchRequest{Kinds: kinds, Namespaces: c.cfg.Namespaces, LabelSelector: c.cfg.LabelSelector,
		OmitOldObject: true}
	if c.epoch != "" {
		req.Resume = &watcherv1.ResumePoint{Epoch: c.epoch, Revision: c.resumeRev}
	}
	stream, err := watcherv1grpc.NewWatcherServiceClient(c.conn).Watch(ctx, req, grpc.ForceCodecV2(wireCodec{}))
	if err != nil {
		return false, err
	}
	// A watchdog ends a stream that stays silent past IdleTimeout.
	alive := make(chan struct{}, 1)
	go func() {
		t := time.NewTimer(c.cfg.IdleTimeout)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-alive:
				if !t.Stop() {
					<-t.C
				}
				t.Reset(c.cfg.IdleTimeout)
			case <-t.C:
				c.log.Warn("Watch stream idle; leaving the replica", "idleTimeout", c.cfg.IdleTimeout)
				cancel()
				return
			}
		}
	}()
	var st session
	for {
		var r received // a new one each time: the store and handlers keep its object
		err := stream.RecvMsg(&r)
		if err != nil {
			if errors.Is(err, io.EOF) {
				err = status.Error(codes.Unavailable, "watcher ended the stream")
			}
			return st.synced, err
		}
		select {
		case alive <- struct{}{}:
		default:
		}
		if err := c.handle(&st, &r.resp, r.object); err != nil {
			return st.synced, err
		}
	}
}

// session is the state of one stream.
type session struct {
	started  bool
	snapshot bool                   // a fresh snapshot is in progress
	stale    map[objectRef]struct{} // known before the snapshot, not yet seen in it
	synced   bool
}

// handle applies one event of the stream; wire is the encoding its object
// arrived in (nil: the store encodes it).
func (c *Client) handle(st *session, resp *watcherv1.WatchResponse, wire []byte) error {
	c.m.received.WithLabelValues(resp.GetObject().GetKind().String(), eventLabel(resp.GetType())).Inc()
	if !st.started {
		st.started = true
		if !(resp.GetType() == watcherv1.EventType_EVENT_TYPE_SYNCED && resp.GetResumed()) {
			st.snapshot = true
			st.stale = c.store.keys()
			// Until this snapshot reaches SYNCED the store mixes two histories:
			// if the stream breaks, the next one must start from a snapshot too.
			c.epoch, c.resumeRev = "", 0
			c.lag.newReplica()
		}
	}
	now := c.now()
	switch resp.GetType() {
	case watcherv1.EventType_EVENT_TYPE_UPSERT:
		o := resp.GetObject()
		if o.GetMeta().GetName() == "" {
			return fmt.Errorf("UPSERT without an object name at revision %d", resp.GetRevision())
		}
		ref := objectRef{o.GetKind(), Key(o)}
		if st.snapshot {
			delete(st.stale, ref)
		}
		c.applyUpsert(ref, o, wire, now)
	case watcherv1.EventType_EVENT_TYPE_DELETE:
		if !st.synced {
			return errors.New("DELETE before SYNCED")
		}
		o := resp.GetObject()
		c.applyDelete(objectRef{o.GetKind(), Key(o)}, o, now)
	case watcherv1.EventType_EVENT_TYPE_SYNCED:
		if resp.GetResumed() && resp.GetEpoch() != c.epoch {
			return fmt.Errorf("resumed SYNCED from epoch %q, asked for %q", resp.GetEpoch(), c.epoch)
		}
		if st.snapshot {
			for ref := range st.stale {
				c.applyAbsence(ref, now)
			}
			st.stale, st.snapshot = nil, false
		}
		st.synced = true
		c.epoch = resp.GetEpoch()
		c.m.syncs.WithLabelValues(fmt.Sprint(resp.GetResumed())).Inc()
		c.syncedOnce.Do(func() { close(c.synced); c.m.synced.Set(1) })
	case watcherv1.EventType_EVENT_TYPE_HEARTBEAT:
	default:
		return fmt.Errorf("unknown event type %v", resp.GetType())
	}
	if st.synced {
		c.resumeRev = resp.GetResumeRevision()
	}
	c.expire(now)
	return nil
}

// applyUpsert stores o (encoded as wire, nil when unknown) unless the client
// has already seen a newer version of it, or deleted a version at least as
// new.
func (c *Client) applyUpsert(ref objectRef, o *watcherv1.Object, wire []byte, now time.Time) {
	c.lag.observe(ref.kind, o.GetMeta().GetResourceVersion())
	c.lag.release(ref) // the replica has it: nothing to hold back
	held, _ := c.store.get(ref.kind, ref.key)
	if judgeUpsert(held, c.lag.tomb(ref), o) == drop {
		c.m.staleDropped.Inc()
	} else {
		c.lag.forgetTomb(ref)
		c.upsert(o, wire, held)
	}
	c.deleteConfirmed(ref.kind, now)
}

// applyDelete deletes what a DELETE names, unless the replica only knew an
// older version than the client holds: then the deletion is held back.
func (c *Client) applyDelete(ref objectRef, last *watcherv1.Object, now time.Time) {
	c.lag.observe(ref.kind, last.GetMeta().GetResourceVersion())
	held, _ := c.store.get(ref.kind, ref.key)
	switch judgeDelete(held, last) {
	case apply:
		c.lag.release(ref)
		c.lag.tombstone(ref, newerVersion(held.GetMeta().GetResourceVersion(), last.GetMeta().GetResourceVersion()), now)
		c.delete(ref.kind, ref.key)
	case holdBack:
		c.holdBack(ref, held, now)
	}
	c.deleteConfirmed(ref.kind, now)
}

// applyAbsence handles a held object a fresh snapshot did not contain.
func (c *Client) applyAbsence(ref objectRef, now time.Time) {
	held, ok := c.store.get(ref.kind, ref.key)
	if !ok {
		return
	}
	switch judgeAbsence(held.GetMeta().GetResourceVersion(), c.lag.progress[ref.kind]) {
	case apply:
		c.lag.release(ref)
		c.lag.tombstone(ref, held.GetMeta().GetResourceVersion(), now)
		c.delete(ref.kind, ref.key)
		c.m.syntheticDeletes.Inc()
	case holdBack:
		c.holdBack(ref, held, now)
	}
}

func (c *Client) holdBack(ref objectRef, held *watcherv1.Object, now time.Time) {
	if c.lag.held[ref] == nil {
		c.m.heldBack.Inc()
		c.log.Info("Replica lacks an object newer than anything of its kind it has shown; keeping the object",
			"kind", ref.kind.String(), "key", ref.key, "resourceVersion", held.GetMeta().GetResourceVersion(),
			"replicaProgress", c.lag.progress[ref.kind], "lagGrace", c.cfg.LagGrace)
	}
	c.lag.holdBack(ref, held.GetMeta().GetResourceVersion(), now)
}

// deleteConfirmed deletes the held-back objects of kind that the replica is
// now past: it had heard of them and no longer has them.
func (c *Client) deleteConfirmed(kind watcherv1.Kind, now time.Time) {
	for _, ref := range c.lag.confirmed(kind) {
		if held, ok := c.store.get(ref.kind, ref.key); ok {
			c.lag.tombstone(ref, held.GetMeta().GetResourceVersion(), now)
			c.delete(ref.kind, ref.key)
			c.m.syntheticDeletes.Inc()
		}
	}
}

// expire applies the deletions held back past LagGrace (the replica is
// believed, with no tombstone: if it was wrong, its catching up brings the
// object back) and forgets old tombstones.
func (c *Client) expire(now time.Time) {
	for _, ref := range c.lag.expired(now) {
		c.log.Warn("Replica still lacks an object after the lag grace; deleting it",
			"kind", ref.kind.String(), "key", ref.key, "lagGrace", c.cfg.LagGrace)
		c.delete(ref.kind, ref.key)
		c.m.syntheticDeletes.Inc()
		c.m.heldBackExpired.Inc()
	}
	c.lag.expireTombs(now)
	// expire ends every handled response: the one place the gauge is set.
	c.m.heldBackNow.Set(float64(c.lag.heldBackCount()))
}

// upsert stores o, encoded as wire (nil: the store encodes it); held is what
// the store holds under its key (only the Run goroutine writes the store, so
// the caller's lookup is still current).
func (c *Client) upsert(o *watcherv1.Object, wire []byte, held *watcherv1.Object) {
	c.dispatchMu.Lock()
	defer c.dispatchMu.Unlock()
	if !c.store.putEncoded(o, wire, held) {
		// A snapshot after a reconnect repeats what is known: not an update.
		return
	}
	c.m.objects.WithLabelValues(o.GetKind().String()).Set(float64(c.store.Len(o.GetKind())))
	if held == nil {
		c.dispatch(func(h Handler) { h.OnAdd(o) })
	} else {
		c.dispatch(func(h Handler) { h.OnUpdate(held, o) })
	}
}

// delete removes kind/key; handlers receive the state they last saw.
func (c *Client) delete(kind watcherv1.Kind, key string) {
	c.dispatchMu.Lock()
	defer c.dispatchMu.Unlock()
	old := c.store.remove(kind, key)
	c.m.objects.WithLabelValues(kind.String()).Set(float64(c.store.Len(kind)))
	if old == nil {
		return
	}
	c.dispatch(func(h Handler) { h.OnDelete(old) })
}

func (c *Client) dispatch(call func(Handler)) {
	for _, r := range *c.handlers.Load() {
		if !r.removed.Load() {
			call(r.h)
		}
	}
}

func eventLabel(t watcherv1.EventType) string {
	return strings.TrimPrefix(t.String(), "EVENT_TYPE_")
}

type metrics struct {
	received         *prometheus.CounterVec
	disconnects      *prometheus.CounterVec
	syncs            *prometheus.CounterVec
	syntheticDeletes prometheus.Counter
	staleDropped     prometheus.Counter
	heldBack         prometheus.Counter
	heldBackExpired  prometheus.Counter
	heldBackNow      prometheus.Gauge
	objects          *prometheus.GaugeVec
	synced           prometheus.Gauge
	handlers         prometheus.Gauge
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		received: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "ipledger_stream_events_received_total",
			Help: "Events received from the watcher, by kind and type."}, []string{"kind", "type"}),
		disconnects: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "ipledger_stream_disconnects_total",
			Help: "Watch streams that ended, by gRPC code."}, []string{"code"}),
		syncs: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "ipledger_stream_syncs_total",
			Help: "SYNCED events applied, by whether the stream resumed instead of taking a snapshot."}, []string{"resumed"}),
		syntheticDeletes: prometheus.NewCounter(prometheus.CounterOpts{Name: "ipledger_stream_synthetic_deletes_total",
			Help: "Objects deleted because a fresh snapshot did not contain them."}),
		staleDropped: prometheus.NewCounter(prometheus.CounterOpts{Name: "ipledger_stream_stale_upserts_dropped_total",
			Help: "UPSERTs dropped because the client had already seen a newer version of the object, or deleted one as new (a replica behind)."}),
		heldBack: prometheus.NewCounter(prometheus.CounterOpts{Name: "ipledger_stream_deletes_held_back_total",
			Help: "Objects a replica lacked before showing it was past them, kept instead of deleted."}),
		heldBackExpired: prometheus.NewCounter(prometheus.CounterOpts{Name: "ipledger_stream_deletes_held_back_expired_total",
			Help: "Held-back deletions applied because the lag grace passed without the replica showing it was past them."}),
		heldBackNow: prometheus.NewGauge(prometheus.GaugeOpts{Name: "ipledger_stream_deletes_held_back",
			Help: "Deletions held back now."}),
		objects: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "ipledger_stream_objects",
			Help: "Objects in the client store, by kind."}, []string{"kind"}),
		synced: prometheus.NewGauge(prometheus.GaugeOpts{Name: "ipledger_stream_synced",
			Help: "1 once the first SYNCED has been applied."}),
		handlers: prometheus.NewGauge(prometheus.GaugeOpts{Name: "ipledger_stream_handlers",
			Help: "Handlers registered."}),
	}
	if err := promreg.Register(reg, m.received, m.disconnects, m.syncs, m.syntheticDeletes,
		m.staleDropped, m.heldBack, m.heldBackExpired, m.heldBackNow, m.objects, m.synced, m.handlers); err != nil {
		return nil, err
	}
	return m, nil
}

// kindsRefused reports whether a watcher refused a stream for its kinds: the
// InvalidArgument every release's watcher answers with for a kind it does
// not serve ("kinds: 9 is not a kind the watcher serves; …").
func kindsRefused(err error) bool {
	st := status.Convert(err)
	return st.Code() == codes.InvalidArgument && strings.HasPrefix(st.Message(), "kinds:")
}
