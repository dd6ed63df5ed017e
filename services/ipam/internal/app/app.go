// Package app wires ipledger-ipam together: the stream client, the
// lease-gated controller, the gRPC API and the ops server, under one errgroup.
package app

import (
	"context"
	"flag"
	"fmt"
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sync/errgroup"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/ipledger/ipledger/pkg/authz"
	"github.com/ipledger/ipledger/pkg/cmdmain"
	"github.com/ipledger/ipledger/pkg/grpcserver"
	"github.com/ipledger/ipledger/pkg/kubemetrics"
	"github.com/ipledger/ipledger/pkg/leader"
	"github.com/ipledger/ipledger/pkg/opsserver"
	"github.com/ipledger/ipledger/pkg/stream"
	ipamv1grpc "github.com/ipledger/ipledger/proto/ipledger/ipam/v1/ipamv1grpc"
	watcherv1 "github.com/ipledger/ipledger/proto/ipledger/watcher/v1"
	"github.com/ipledger/ipledger/services/ipam/internal/aggregated"
	"github.com/ipledger/ipledger/services/ipam/internal/announced"
	"github.com/ipledger/ipledger/services/ipam/internal/controller"
	"github.com/ipledger/ipledger/services/ipam/internal/history"
	"github.com/ipledger/ipledger/services/ipam/internal/objects"
	"github.com/ipledger/ipledger/services/ipam/internal/server"
)

// Defaults of Config.
const (
	DefaultLeaseName = "ipledger-ipam"
	DefaultGRPCAddr  = ":8443"
	// Component is the source of ipam's Events.
	Component = "ipledger-ipam"
	// DefaultQPS and DefaultBurst are raised deliberately from client-go's
	// 5/10: a cold start writes one status per Service, and the API server
	// on 2 cores takes ~1,100 status writes/s from 32 workers. At 500 QPS
	// the client's own limiter was the bottleneck (10,000 Services took 3×
	// the floor). The API server's priority and fairness still protects it.
	DefaultQPS   = 2000
	DefaultBurst = 4000
)

// Config is every flag of ipledger-ipam.
type Config struct {
	Common     cmdmain.Common
	Stream     stream.Config
	Leader     leader.Config
	GRPC       grpcserver.Config
	Ops        opsserver.Config
	Controller controller.Config
	// Aggregated is the api.ipledger.io aggregated API, off by default.
	Aggregated aggregated.Config
}

// Defaults fills the fields left unset with ipam's defaults.
func (c *Config) Defaults() {
	if c.Common.KubeAPIQPS == 0 {
		c.Common.KubeAPIQPS = DefaultQPS
	}
	if c.Common.KubeAPIBurst == 0 {
		c.Common.KubeAPIBurst = DefaultBurst
	}
	c.Common.Defaults()
	c.GRPC.DefaultAudiences(authz.IPAMAudience)
	if c.Leader.LeaseName == "" {
		c.Leader.LeaseName = DefaultLeaseName
	}
	c.Leader.Defaults()
	c.Controller.Defaults()
}

// Flags registers the flags with the current values (after Defaults) as
// their defaults.
func (c *Config) Flags(fs *flag.FlagSet) {
	c.Defaults()
	c.Common.Flags(fs)
	c.Stream.Flags(fs)
	c.Leader.Flags(fs)
	c.GRPC.Flags(fs, DefaultGRPCAddr)
	c.Ops.Flags(fs)
	c.Aggregated.Flags(fs)
	objects.ClassFlags(fs, &c.Controller.LBClass, &c.Controller.RequireLBClass)
	fs.BoolVar(&c.Controller.WriteKubeVIPAnnotation, "write-kube-vip-annotation", c.Controller.WriteKubeVIPAnnotation,
		"write the kube-vip.io/loadbalancerIPs annotation kube-vip announces, with each Service's status: the addresses ipam granted, "+
			"under field manager ipledger-ipam (never over one another writer set). Off, ipam removes the ones it wrote. "+
			"Pair it with components/kube-vip's admission policy (docs/reachability.md#kube-vip)")
	fs.IntVar(&c.Controller.StatusWorkers, "status-workers", c.Controller.StatusWorkers, "Service status writes in flight at once")
	fs.IntVar(&c.Controller.BatchSize, "batch-size", c.Controller.BatchSize, "Services decided per ledger write")
	objects.GatewayServiceNamespacesFlag(fs, &c.Controller.GatewayServiceNamespaces)
	// 0 is a value (free released addresses at once): the default is the
	// flag's, not Defaults'.
	c.Controller.KeepReleased = objects.DefaultKeepReleased
	objects.KeepReleasedFlag(fs, &c.Controller.KeepReleased)
	c.Controller.History = history.DefaultRetention
	fs.DurationVar(&c.Controller.History.MaxAge, "history-max-age", c.Controller.History.MaxAge,
		"drop address history entries older than this (0: keep by age forever); the entry saying who holds an address now is always kept (docs/history.md)")
	fs.IntVar(&c.Controller.History.MaxPerAddress, "history-max-per-address", c.Controller.History.MaxPerAddress,
		"keep at most this many address history entries per address, the newest (0: no bound); the entry saying who holds it now is always kept")
}

// App is one ipledger-ipam process.
type App struct {
	cfg     Config
	log     *slog.Logger
	client  kubernetes.Interface
	reg     *prometheus.Registry
	watch   *stream.Client
	ctrl    *controller.Controller
	tracker *announced.Tracker
	grpc    *grpcserver.Server
	agg     *aggregated.Server // nil unless --aggregated-api-addr
	ops     *opsserver.Server
}

// New builds the process from cfg without starting anything (the gRPC
// server already listens, so its address is known).
func New(cfg Config) (*App, error) {
	a := &App{cfg: cfg, log: cfg.Common.Logger(), reg: prometheus.NewRegistry()}
	c := &a.cfg
	if c.Leader.LeaseNamespace == "" {
		c.Leader.LeaseNamespace = c.Common.Namespace
	}
	if c.Leader.Identity == "" {
		c.Leader.Identity = leader.DefaultIdentity()
	}
	c.Controller.Namespace = c.Common.Namespace
	restCfg, err := c.Common.RESTConfig()
	if err != nil {
		return nil, err
	}
	typedCfg, dynCfg := cmdmain.ClientConfigs(restCfg)
	if a.client, err = kubernetes.NewForConfig(typedCfg); err != nil {
		return nil, fmt.Errorf("kubernetes client: %w", err)
	}
	dyn, err := dynamic.NewForConfig(dynCfg)
	if err != nil {
		return nil, fmt.Errorf("dynamic client: %w", err)
	}
	kubemetrics.Register(a.reg)
	if err := a.newLeaderSide(dyn); err != nil {
		return nil, err
	}
	if err := a.newAPI(restCfg); err != nil {
		return nil, err
	}
	a.ops = opsserver.New(c.Ops, a.reg, a.ready)
	return a, nil
}

// newLeaderSide builds the stream, the controller and the announcement
// tracker beside it.
func (a *App) newLeaderSide(dyn dynamic.Interface) error {
	c := &a.cfg
	sc := c.Stream
	sc.Kinds = []watcherv1.Kind{watcherv1.Kind_KIND_SERVICE, watcherv1.Kind_KIND_NAMESPACE, watcherv1.Kind_KIND_IP_POOL, watcherv1.Kind_KIND_LEDGER_CONFIG_MAP}
	// A 0.2 watcher does not know the Gateway kinds: during a roll ipam
	// streams without them rather than wait for a new watcher.
	// The announcers' kinds (announced.Kinds): a 0.3 watcher before them
	// streams none, and ipam says "no announcer found".
	sc.OptionalKinds = append([]watcherv1.Kind{watcherv1.Kind_KIND_GATEWAY, watcherv1.Kind_KIND_GATEWAY_CLASS}, announced.Kinds...)
	var err error
	if a.watch, err = stream.New(sc, a.log, a.reg); err != nil { // the stream names itself component=stream
		return err
	}
	if a.ctrl, err = controller.New(c.Controller, a.client, dyn, a.watch, a.log.With("component", "controller"), a.reg); err != nil {
		return err
	}
	// Beside the controller, never in its loop: whether each address is
	// announced (its metric and Events), for each term.
	a.tracker, err = announced.New(a.watch, objects.Class{Name: c.Controller.LBClass, Required: c.Controller.RequireLBClass},
		&objects.PoolSet{KeepReleased: c.Controller.KeepReleased}, a.log.With("component", "announced"), a.reg)
	return err
}

// newAPI builds the gRPC server with ipam's API and, when enabled, the
// aggregated API answering from the same server.
func (a *App) newAPI(restCfg *rest.Config) error {
	c := &a.cfg
	c.GRPC.DefaultAudiences(authz.IPAMAudience)
	reviews, err := c.GRPC.ReviewClient(restCfg)
	if err != nil {
		return err
	}
	c.GRPC.CertClient = reviews
	authorizer := authz.New(reviews, server.Rules(), a.log.With("component", "authz"))
	if a.grpc, err = grpcserver.New(c.GRPC, authorizer, a.log.With("component", "grpc"), a.reg); err != nil {
		return err
	}
	ipamServer, err := server.New(server.Config{
		Namespace: c.Common.Namespace, LeaseName: c.Leader.LeaseName, LBClass: c.Controller.LBClass,
		RequireLBClass: c.Controller.RequireLBClass, GatewayServiceNamespaces: c.Controller.GatewayServiceNamespaces,
		KeepReleased: c.Controller.KeepReleased, Registerer: a.reg, Access: authorizer,
	}, a.watch.Store, a.client, a.ctrl, a.log.With("component", "api"))
	if err != nil {
		return err
	}
	a.grpc.Register(&ipamv1grpc.IPAMService_ServiceDesc, ipamServer)
	// The aggregated API answers from the same server, on every replica
	// (reads only); the kube-apiserver has authenticated the person.
	if c.Aggregated.Enabled() {
		ac := c.Aggregated
		ac.Kubeconfig = c.Common.Kubeconfig
		if a.agg, err = aggregated.New(ac, ipamServer); err != nil {
			return err
		}
	}
	return nil
}

func (a *App) ready() error {
	if err := a.grpc.CertificateReady(); err != nil {
		return err
	}
	if !a.watch.HasSynced() {
		return fmt.Errorf("the watcher stream has not synced yet")
	}
	return nil
}

// Run runs the process until ctx ends or a part fails. On the way out the
// leader's term ends and releases the Lease before Run returns.
func (a *App) Run(ctx context.Context) error {
	c := &a.cfg
	g, ctx := errgroup.WithContext(ctx)
	g.Go(func() error { return a.watch.Run(ctx) })
	lc := c.Leader
	lc.Events, lc.EventComponent = a.client.CoreV1(), Component
	g.Go(func() error {
		return leader.RunWhenSynced(ctx, a.watch, func() { a.grpc.SetServing(true) }, a.client, lc, WithTracker(a.ctrl.NewWorker, a.tracker), a.log.With("component", "leader"), a.reg)
	})
	g.Go(func() error { return a.grpc.Serve(ctx) })
	g.Go(func() error { return a.ops.Serve(ctx) })
	if a.agg != nil {
		g.Go(func() error { return a.agg.Run(ctx) })
	}
	a.log.Info("Starting ipledger-ipam", "namespace", c.Common.Namespace, "lbClass", c.Controller.LBClass, "requireLBClass", c.Controller.RequireLBClass,
		"keepReleasedAddresses", c.Controller.KeepReleased.String(), "identity", c.Leader.Identity, "grpcAddr", a.grpc.Addr().String(), "qps", c.Common.KubeAPIQPS, "burst", c.Common.KubeAPIBurst)
	return g.Wait()
}

// Run builds and runs the process.
func Run(ctx context.Context, cfg Config) error {
	a, err := New(cfg)
	if err != nil {
		return err
	}
	return a.Run(ctx)
}

// WithTracker runs the announcement tracker beside each term's worker: both
// end with the term; the worker's error is the term's.
func WithTracker(newWorker func(*leader.Term) (leader.Worker, error), t *announced.Tracker) func(*leader.Term) (leader.Worker, error) {
	return func(term *leader.Term) (leader.Worker, error) {
		w, err := newWorker(term)
		if err != nil {
			return nil, err
		}
		return leader.WorkerFunc(func(term *leader.Term) error {
			done := make(chan struct{})
			go func() {
				defer close(done)
				t.Run(term)
			}()
			defer func() { <-done }()
			return w.Run(term)
		}), nil
	}
}
