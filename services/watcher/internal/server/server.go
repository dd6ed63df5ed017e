// Package server implements ipledger.watcher.v1.WatcherService/Watch on top of
// the versioned store: validation of the request, the snapshot or resumed
// start, the delta loop with heartbeats, and closing with RESOURCE_EXHAUSTED a
// subscriber whose queue overflowed or that stopped reading, in its snapshot
// as in its deltas.
package server

import (
	"context"
	"errors"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/ipledger/ipledger/pkg/promreg"
	watcherv1 "github.com/ipledger/ipledger/proto/ipledger/watcher/v1"
	watcherv1grpc "github.com/ipledger/ipledger/proto/ipledger/watcher/v1/watcherv1grpc"
	"github.com/ipledger/ipledger/services/watcher/internal/store"
)

// Config tunes the streams.
type Config struct {
	// HeartbeatInterval is how long a stream may stay silent before a HEARTBEAT.
	HeartbeatInterval time.Duration
	// QueueSize is how many distinct objects may wait for one subscriber before
	// its stream is closed with RESOURCE_EXHAUSTED.
	QueueSize int
	// StallTimeout is how long a subscriber may accept nothing while the
	// watcher has something to send it (its snapshot, a delta, a heartbeat)
	// before its stream is closed with RESOURCE_EXHAUSTED.
	StallTimeout time.Duration
}

// DefaultStallTimeout is the default Config.StallTimeout: far longer than a
// healthy subscriber ever takes to accept a message (its handlers only
// enqueue), short enough that a stuck one does not hold its snapshot for long.
const DefaultStallTimeout = time.Minute

// Server serves WatcherService from a store.
type Server struct {
	watcherv1grpc.UnimplementedWatcherServiceServer

	cfg     Config
	store   *store.Store
	synced  func() bool
	log     *slog.Logger
	m       *Metrics
	streams atomic.Uint64

	stopping     chan struct{}
	shutdownOnce sync.Once
}

// New returns a server; synced reports whether the informers have synced
// (before that a snapshot would be incomplete, so Watch is refused).
func New(cfg Config, st *store.Store, synced func() bool, log *slog.Logger, m *Metrics) *Server {
	if cfg.HeartbeatInterval <= 0 {
		cfg.HeartbeatInterval = 10 * time.Second
	}
	if cfg.QueueSize <= 0 {
		cfg.QueueSize = 10000
	}
	if cfg.StallTimeout <= 0 {
		cfg.StallTimeout = DefaultStallTimeout
	}
	if m == nil {
		m, _ = NewMetrics(nil) // registers nothing: cannot fail
	}
	return &Server{cfg: cfg, store: st, synced: synced, log: log, m: m, stopping: make(chan struct{})}
}

// Shutdown ends every open stream with UNAVAILABLE and refuses new ones, so
// that subscribers move to another replica at once.
func (s *Server) Shutdown() { s.shutdownOnce.Do(func() { close(s.stopping) }) }

// ParseRequest validates a WatchRequest into a store filter.
func ParseRequest(req *watcherv1.WatchRequest) (store.Filter, error) {
	f := store.Filter{Kinds: map[watcherv1.Kind]bool{}}
	if len(req.GetKinds()) == 0 {
		return f, status.Error(codes.InvalidArgument, "kinds: name at least one kind to watch, e.g. KIND_SERVICE")
	}
	for _, k := range req.GetKinds() {
		if _, known := watcherv1.Kind_name[int32(k)]; !known || k == watcherv1.Kind_KIND_UNSPECIFIED {
			return f, status.Errorf(codes.InvalidArgument, "kinds: %v is not a kind the watcher serves; use one of KIND_SERVICE … KIND_METALLB_SERVICE_BGP_STATUS", k)
		}
		f.Kinds[k] = true
	}
	if len(req.GetNamespaces()) > 0 {
		f.Namespaces = map[string]bool{}
		for _, ns := range req.GetNamespaces() {
			if ns == "" {
				return f, status.Error(codes.InvalidArgument, "namespaces: empty namespace name; leave the list empty to watch all namespaces")
			}
			f.Namespaces[ns] = true
		}
	}
	if s := req.GetLabelSelector(); s != "" {
		sel, err := labels.Parse(s)
		if err != nil {
			return f, status.Errorf(codes.InvalidArgument, "label_selector %q: %v", s, err)
		}
		f.Selector = sel
	}
	return f, nil
}

// Watch implements WatcherService.Watch.
func (s *Server) Watch(req *watcherv1.WatchRequest, stream grpc.ServerStreamingServer[watcherv1.WatchResponse]) error {
	filter, err := ParseRequest(req)
	if err != nil {
		return err
	}
	select {
	case <-s.stopping:
		return status.Error(codes.Unavailable, "watcher is shutting down; retry (another replica will serve)")
	default:
	}
	if s.synced != nil && !s.synced() {
		return status.Error(codes.Unavailable, "watcher informers have not synced yet; retry (another replica may be ready)")
	}
	id := strconv.FormatUint(s.streams.Add(1), 10)
	log := s.log.With("stream", id)
	if p, ok := peer.FromContext(stream.Context()); ok {
		log = log.With("peer", p.Addr.String())
	}

	start := time.Now()
	sub := s.store.Subscribe(filter, req.GetResume(), s.cfg.QueueSize)
	defer s.store.Unsubscribe(sub.Sub)
	s.m.subscribers.Inc()
	defer s.m.subscribers.Dec()
	depth := s.m.queueDepth.WithLabelValues(id)
	defer s.m.queueDepth.DeleteLabelValues(id)
	log.Debug("Subscriber connected", "resumed", sub.Resumed, "snapshotOf", sub.Snapshot.Candidates(), "revision", sub.Revision)

	ctx, cancel := context.WithCancel(stream.Context())
	defer cancel()
	// Sending runs on its own goroutine so that a subscriber that stopped
	// reading (Send blocked on flow control) can still be closed when its
	// queue overflows or it stalls: returning from the handler ends the stream.
	out := &timedStream{ServerStreamingServer: stream}
	sendErr := make(chan error, 1)
	go func() { sendErr <- s.send(ctx, out, sub, req.GetOmitOldObject(), depth, start) }()
	// The queue depth and stalls are sampled here: the sender cannot report
	// them while it is blocked on a subscriber that stopped reading.
	sample := time.NewTicker(min(time.Second, s.cfg.StallTimeout/4))
	defer sample.Stop()
	for {
		select {
		case err := <-sendErr:
			if ctx.Err() != nil {
				return nil
			}
			return err
		case <-sample.C:
			depth.Set(float64(sub.Sub.Len()))
			if stalled := out.blockedFor(); stalled > s.cfg.StallTimeout {
				s.m.stalls.Inc()
				log.Warn("Closing a subscriber that stopped reading", "stalledFor", stalled.Round(time.Millisecond).String(),
					"synced", out.synced.Load(), "stallTimeout", s.cfg.StallTimeout.String())
				return status.Errorf(codes.ResourceExhausted, "subscriber read nothing for %s while events waited for it; reconnect to resync",
					stalled.Round(time.Second))
			}
		case <-sub.Sub.Overflowed():
			s.m.overflows.Inc()
			log.Warn("Closing a subscriber that fell behind", "queueSize", s.cfg.QueueSize)
			return status.Errorf(codes.ResourceExhausted, "subscriber fell more than %d objects behind; reconnect to resync", s.cfg.QueueSize)
		case <-stream.Context().Done():
			return nil
		case <-s.stopping:
			return status.Error(codes.Unavailable, "watcher is shutting down; reconnect to another replica")
		}
	}
}

// timedStream records when a Send has been blocked since, so that a
// subscriber that stopped reading is noticed without a change to send it.
type timedStream struct {
	grpc.ServerStreamingServer[watcherv1.WatchResponse]
	sendingSince atomic.Int64 // UnixNano when the pending Send began; 0 when none is pending
	synced       atomic.Bool  // SYNCED was sent: the subscriber is in its deltas
}

func (t *timedStream) Send(r *watcherv1.WatchResponse) error {
	t.sendingSince.Store(time.Now().UnixNano())
	defer t.sendingSince.Store(0)
	return t.ServerStreamingServer.Send(r)
}

// blockedFor is how long the pending Send has waited (0 when none is pending).
func (t *timedStream) blockedFor() time.Duration {
	since := t.sendingSince.Load()
	if since == 0 {
		return 0
	}
	return time.Since(time.Unix(0, since))
}

// send streams sub's snapshot, SYNCED and deltas; omitOld leaves the old
// objects out of the deltas (WatchRequest.omit_old_object).
func (s *Server) send(ctx context.Context, stream *timedStream, sub store.Subscribed, omitOld bool,
	depth prometheus.Gauge, start time.Time) error {
	epoch := s.store.Epoch()
	if !sub.Resumed {
		// One response reused for every object: Send has encoded it when it
		// returns. resume_revision 0: a snapshot cannot be resumed before SYNCED.
		resp := &watcherv1.WatchResponse{Type: watcherv1.EventType_EVENT_TYPE_UPSERT, Epoch: epoch, Revision: sub.Revision}
		for o := range sub.Snapshot.All() {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if err := stream.Send(withObjects(resp, o, nil)); err != nil {
				return err
			}
			s.m.sent.WithLabelValues(o.Kind().String(), "UPSERT").Inc()
		}
		s.m.snapshotSeconds.Observe(time.Since(start).Seconds())
	}
	synced := &watcherv1.WatchResponse{Type: watcherv1.EventType_EVENT_TYPE_SYNCED, Epoch: epoch, Revision: sub.Revision,
		ResumeRevision: sub.Revision, Resumed: sub.Resumed}
	if sub.Resumed {
		synced.ResumeRevision = sub.ResumeRevision
	}
	if err := stream.Send(synced); err != nil {
		return err
	}
	stream.synced.Store(true)
	s.m.syncs.WithLabelValues(strconv.FormatBool(sub.Resumed)).Inc()

	heartbeat := time.NewTicker(s.cfg.HeartbeatInterval)
	defer heartbeat.Stop()
	sentSinceBeat := true
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-sub.Sub.Ready():
			for {
				ev, ok := sub.Sub.Next()
				if !ok {
					break
				}
				resp := &watcherv1.WatchResponse{Type: ev.Type, Epoch: epoch, Revision: ev.Revision, ResumeRevision: ev.ResumeRevision}
				old := ev.Old
				if omitOld {
					old = nil
				}
				if err := stream.Send(withObjects(resp, ev.Object, old)); err != nil {
					return err
				}
				s.m.sent.WithLabelValues(ev.Object.Kind().String(), eventTypeLabel(ev.Type)).Inc()
				depth.Set(float64(sub.Sub.Len()))
				sentSinceBeat = true
			}
		case <-heartbeat.C:
			if sentSinceBeat {
				sentSinceBeat = false
				continue
			}
			if err := stream.Send(&watcherv1.WatchResponse{Type: watcherv1.EventType_EVENT_TYPE_HEARTBEAT, Epoch: epoch,
				Revision: s.store.Revision(), ResumeRevision: sub.Sub.ResumeRevision()}); err != nil {
				return err
			}
			s.m.sent.WithLabelValues("", "HEARTBEAT").Inc()
		}
	}
}

// withObjects attaches obj and old to r in their encoded form (see
// store.Fields): every subscriber shares one encoding of an object.
func withObjects(r *watcherv1.WatchResponse, obj, old *store.Object) *watcherv1.WatchResponse {
	r.ProtoReflect().SetUnknown(store.Fields(obj, old))
	return r
}

func eventTypeLabel(t watcherv1.EventType) string {
	switch t {
	case watcherv1.EventType_EVENT_TYPE_UPSERT:
		return "UPSERT"
	case watcherv1.EventType_EVENT_TYPE_DELETE:
		return "DELETE"
	}
	return t.String()
}

// Metrics are the stream metrics of the watcher.
type Metrics struct {
	subscribers     prometheus.Gauge
	queueDepth      *prometheus.GaugeVec
	sent            *prometheus.CounterVec
	overflows       prometheus.Counter
	stalls          prometheus.Counter
	snapshotSeconds prometheus.Histogram
	syncs           *prometheus.CounterVec
}

// NewMetrics registers the stream metrics on reg (nil: unregistered).
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		subscribers: prometheus.NewGauge(prometheus.GaugeOpts{Name: "ipledger_watcher_subscribers",
			Help: "Watch streams currently open."}),
		queueDepth: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "ipledger_watcher_subscriber_queue_depth",
			Help: "Distinct objects waiting to be sent, per open stream."}, []string{"stream"}),
		sent: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "ipledger_watcher_events_sent_total",
			Help: "Events sent to subscribers, by kind and type."}, []string{"kind", "type"}),
		overflows: prometheus.NewCounter(prometheus.CounterOpts{Name: "ipledger_watcher_subscriber_overflows_total",
			Help: "Streams closed with RESOURCE_EXHAUSTED because their queue overflowed."}),
		stalls: prometheus.NewCounter(prometheus.CounterOpts{Name: "ipledger_watcher_subscriber_stalls_total",
			Help: "Streams closed with RESOURCE_EXHAUSTED because their subscriber accepted nothing for --subscriber-stall-timeout."}),
		snapshotSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "ipledger_watcher_snapshot_duration_seconds",
			Help: "Time to build and send a snapshot, up to SYNCED.", Buckets: prometheus.ExponentialBuckets(0.001, 4, 10)}),
		syncs: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "ipledger_watcher_syncs_total",
			Help: "SYNCED events sent, by whether the stream resumed instead of taking a snapshot."}, []string{"resumed"}),
	}
	if err := promreg.Register(reg, m.subscribers, m.queueDepth, m.sent, m.overflows, m.stalls, m.snapshotSeconds, m.syncs); err != nil {
		return nil, err
	}
	return m, nil
}

// ErrNotSynced is returned by readiness checks before the informers synced.
var ErrNotSynced = errors.New("informers not synced")
