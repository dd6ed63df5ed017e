// Package app wires ipledger-watcher together: informers feeding the versioned
// store, the WatcherService gRPC server (authorized with `snapshots`/`watch`),
// and the ops server, under one errgroup.
package app

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"flag"
	"log/slog"
	"net"
	"os"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sync/errgroup"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"

	"github.com/ipledger/ipledger/pkg/authz"
	"github.com/ipledger/ipledger/pkg/cmdmain"
	"github.com/ipledger/ipledger/pkg/grpcserver"
	"github.com/ipledger/ipledger/pkg/kubemetrics"
	"github.com/ipledger/ipledger/pkg/opsserver"
	"github.com/ipledger/ipledger/pkg/promreg"
	watcherv1 "github.com/ipledger/ipledger/proto/ipledger/watcher/v1"
	watcherv1grpc "github.com/ipledger/ipledger/proto/ipledger/watcher/v1/watcherv1grpc"
	"github.com/ipledger/ipledger/services/watcher/internal/informers"
	"github.com/ipledger/ipledger/services/watcher/internal/server"
	"github.com/ipledger/ipledger/services/watcher/internal/store"
)

// Rules authorizes the watcher's one RPC.
var Rules = authz.Rules{
	"/ipledger.watcher.v1.WatcherService/Watch": {Verb: "watch", Resource: "snapshots"},
}

// Config is the watcher's configuration.
type Config struct {
	Common cmdmain.Common
	GRPC   grpcserver.Config
	Ops    opsserver.Config
	// HeartbeatInterval: a stream silent this long gets a HEARTBEAT.
	HeartbeatInterval time.Duration
	// QueueSize: distinct objects that may wait for one subscriber.
	QueueSize int
	// StallTimeout: how long a subscriber may accept nothing while events wait for it.
	StallTimeout time.Duration
	// HistorySize: changes kept for subscribers that resume.
	HistorySize int
	// HistoryBytes: what those changes' objects may weigh (store.LimitHistoryBytes).
	HistoryBytes int
	// DiscoveryInterval: how often to look for the Gateway API's CRDs.
	DiscoveryInterval time.Duration
	// LedgerReadInterval: how often, at most, a ledger shard that keeps
	// changing is read and streamed.
	LedgerReadInterval time.Duration
	// CiliumNamespace holds Cilium's L2 announcement Leases, the only
	// Leases streamed; empty streams none.
	CiliumNamespace string
}

// Defaults fills the fields left unset with the watcher's defaults.
func (c *Config) Defaults() {
	c.Common.Defaults() // cmdmain's client rate limits (50/100) suit it
	c.GRPC.DefaultAudiences(authz.WatcherAudience)
	if c.HeartbeatInterval == 0 {
		c.HeartbeatInterval = 10 * time.Second
	}
	if c.QueueSize == 0 {
		c.QueueSize = 10000
	}
	if c.StallTimeout == 0 {
		c.StallTimeout = server.DefaultStallTimeout
	}
	if c.HistorySize == 0 {
		c.HistorySize = 50000
	}
	if c.HistoryBytes == 0 {
		c.HistoryBytes = 16 << 20
	}
	if c.DiscoveryInterval == 0 {
		c.DiscoveryInterval = informers.DefaultDiscoveryInterval
	}
	if c.LedgerReadInterval == 0 {
		c.LedgerReadInterval = informers.DefaultLedgerReadInterval
	}
	if c.CiliumNamespace == "" {
		c.CiliumNamespace = DefaultCiliumNamespace
	}
}

// DefaultCiliumNamespace is where Cilium's Helm chart runs its agents.
const DefaultCiliumNamespace = "kube-system"

// Flags registers every flag of the watcher with the current values (after
// Defaults) as their defaults.
func (c *Config) Flags(fs *flag.FlagSet) {
	c.Defaults()
	c.Common.Flags(fs)
	c.GRPC.Flags(fs, ":9443")
	c.Ops.Flags(fs)
	fs.DurationVar(&c.HeartbeatInterval, "heartbeat-interval", c.HeartbeatInterval, "send a HEARTBEAT on a stream silent this long")
	fs.IntVar(&c.QueueSize, "subscriber-queue-size", c.QueueSize,
		"distinct objects that may wait for one subscriber before its stream is closed with RESOURCE_EXHAUSTED")
	fs.DurationVar(&c.StallTimeout, "subscriber-stall-timeout", c.StallTimeout,
		"how long a subscriber may accept nothing (in its snapshot or its deltas) while events wait for it before its stream is closed with RESOURCE_EXHAUSTED")
	fs.IntVar(&c.HistorySize, "history-size", c.HistorySize, "changes kept so that a reconnecting subscriber can resume without a snapshot")
	fs.IntVar(&c.HistoryBytes, "history-bytes", c.HistoryBytes,
		"what the kept changes' objects may weigh, in bytes; the oldest are forgotten first (a subscriber resuming from before them gets a snapshot)")
	fs.DurationVar(&c.DiscoveryInterval, "gateway-api-discovery-interval", c.DiscoveryInterval,
		"how often to ask the API server whether the optional kinds are served — the Gateway API CRDs (gateway.networking.k8s.io/v1), MetalLB's (metallb.io/v1beta1), ServiceCIDRs: each kind is streamed while it is, and deleted from the stream when it goes")
	fs.DurationVar(&c.LedgerReadInterval, "ledger-read-interval", c.LedgerReadInterval,
		"how often, at most, a ledger ConfigMap that ipam keeps rewriting is read and streamed: a shard that changes after a quiet interval is read at once, and a burst of writes costs one read per interval; "+
			"shorter makes ipam's read API (ListAllocations, ListPools) fresher during bursts of allocations, at the cost of reading up to 480 KiB per shard that often")
	fs.StringVar(&c.CiliumNamespace, "cilium-namespace", c.CiliumNamespace,
		"the namespace of Cilium's agents, whose L2 announcement Leases (cilium-l2announce-<namespace>-<name>) tell ipam which node announces a Service; "+
			"only those Leases are streamed, and the watcher needs list and watch on leases there (deploy/kustomize/base/rbac/watcher.yaml); \"-\" streams none")
}

// Watcher is an assembled, not yet running, watcher.
type Watcher struct {
	cfg    Config
	log    *slog.Logger
	reg    *prometheus.Registry
	client kubernetes.Interface
	dyn    dynamic.Interface
	meta   metadata.Interface
	store  *store.Store
	grpc   *grpcserver.Server
	srv    *server.Server
	ops    *opsserver.Server
	inf    atomic.Pointer[informers.Set]
}

// New builds a watcher from a REST config and listens on the gRPC address.
func New(cfg Config, restCfg *rest.Config, log *slog.Logger, reg *prometheus.Registry) (*Watcher, error) {
	client, err := kubernetes.NewForConfig(restCfg)
	if err != nil {
		return nil, err
	}
	dyn, err := dynamic.NewForConfig(restCfg)
	if err != nil {
		return nil, err
	}
	cfg.GRPC.DefaultAudiences(authz.WatcherAudience)
	reviews, err := cfg.GRPC.ReviewClient(restCfg)
	if err != nil {
		return nil, err
	}
	meta, err := metadata.NewForConfig(restCfg)
	if err != nil {
		return nil, err
	}
	w := &Watcher{cfg: cfg, log: log, reg: reg, client: client, dyn: dyn, meta: meta}
	kubemetrics.Register(reg)
	w.store = store.New(newEpoch(), cfg.HistorySize)
	w.store.LimitHistoryBytes(cfg.HistoryBytes)
	revision := prometheus.NewGauge(prometheus.GaugeOpts{Name: "ipledger_watcher_revision", Help: "Revision of the watcher's store."})
	objects := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "ipledger_watcher_objects", Help: "Objects in the watcher's store, by kind."}, []string{"kind"})
	if err := promreg.Register(reg, revision, objects); err != nil {
		return nil, err
	}
	w.store.OnChange(func(rev uint64, kind watcherv1.Kind, n int) {
		revision.Set(float64(rev))
		objects.WithLabelValues(kind.String()).Set(float64(n))
	})
	serverM, err := server.NewMetrics(reg)
	if err != nil {
		return nil, err
	}
	w.srv = server.New(server.Config{HeartbeatInterval: cfg.HeartbeatInterval, QueueSize: cfg.QueueSize, StallTimeout: cfg.StallTimeout}, w.store,
		w.Synced, log, serverM)
	cfg.GRPC.CertClient = reviews
	w.grpc, err = grpcserver.New(cfg.GRPC, authz.New(reviews, Rules, log), log, reg)
	if err != nil {
		return nil, err
	}
	w.grpc.Register(&watcherv1grpc.WatcherService_ServiceDesc, w.srv)
	w.ops = opsserver.New(cfg.Ops, reg, func() error {
		if err := w.grpc.CertificateReady(); err != nil {
			return err
		}
		if !w.Synced() {
			return server.ErrNotSynced
		}
		return nil
	})
	return w, nil
}

// Addr is the gRPC listen address.
func (w *Watcher) Addr() net.Addr { return w.grpc.Addr() }

// Epoch names this process's history.
func (w *Watcher) Epoch() string { return w.store.Epoch() }

// Synced reports whether the informers have synced (the watcher serves only then).
func (w *Watcher) Synced() bool {
	inf := w.inf.Load()
	return inf != nil && inf.Synced()
}

// Store is the versioned store (for tests and benchmarks).
func (w *Watcher) Store() *store.Store { return w.store }

// Run starts the informers and serves until ctx ends.
func (w *Watcher) Run(ctx context.Context) error {
	g, ctx := errgroup.WithContext(ctx)
	inf, err := informers.Start(ctx, informers.Config{Namespace: w.cfg.Common.Namespace, DiscoveryInterval: w.cfg.DiscoveryInterval,
		LedgerReadInterval: w.cfg.LedgerReadInterval, CiliumNamespace: ciliumNamespace(w.cfg.CiliumNamespace)}, w.client, w.dyn, w.meta, w.store, w.log, w.reg)
	if err != nil {
		return err
	}
	w.inf.Store(inf)
	w.log.Info("Watcher starting", "epoch", w.store.Epoch(), "grpcAddr", w.grpc.Addr().String())
	g.Go(func() error {
		if err := inf.WaitForSync(ctx); err != nil {
			return nil
		}
		w.grpc.SetServing(true)
		return nil
	})
	g.Go(func() error {
		<-ctx.Done()
		// Streams never end by themselves: end them so that subscribers move
		// to another replica at once instead of waiting for the hard stop.
		w.srv.Shutdown()
		return nil
	})
	g.Go(func() error { return w.grpc.Serve(ctx) })
	if w.cfg.Ops.Addr != "" {
		g.Go(func() error { return w.ops.Serve(ctx) })
	}
	return g.Wait()
}

// Run builds and runs the process (cmd/ipledger-watcher). New takes the REST
// config and the registry instead of building them, so that tests run a
// watcher against their own API server and read its metrics.
func Run(ctx context.Context, cfg Config) error {
	log := cfg.Common.Logger().With("component", "watcher")
	restCfg, err := cfg.Common.RESTConfig()
	if err != nil {
		return err
	}
	w, err := New(cfg, restCfg, log, prometheus.NewRegistry())
	if err != nil {
		return err
	}
	return w.Run(ctx)
}

// newEpoch names this process: the Pod name (when known) and random bits, so
// a restarted Pod with the same name still gets a new epoch.
func newEpoch() string {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	if pod := os.Getenv("POD_NAME"); pod != "" {
		return pod + "-" + hex.EncodeToString(b)
	}
	return hex.EncodeToString(b)
}

// ciliumNamespace reads the flag: "-" is none (an empty flag would be the
// default again).
func ciliumNamespace(flag string) string {
	if flag == "-" {
		return ""
	}
	return flag
}
