// Package app wires the ipledger-endpoints process together: the watcher
// stream it reads from, the Kubernetes client it writes with, the Lease that
// gates the controller, and the ops server, all under one errgroup.
package app

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sync/errgroup"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/ipledger/ipledger/pkg/cmdmain"
	"github.com/ipledger/ipledger/pkg/kubemetrics"
	"github.com/ipledger/ipledger/pkg/leader"
	"github.com/ipledger/ipledger/pkg/opsserver"
	"github.com/ipledger/ipledger/pkg/stream"
	"github.com/ipledger/ipledger/services/endpoints/internal/controller"
	"github.com/ipledger/ipledger/services/endpoints/internal/prober"
)

// LeaseName is the default Lease the replicas campaign for.
const LeaseName = "ipledger-endpoints"

// Config is everything the binary is configured with.
type Config struct {
	Common     cmdmain.Common
	Stream     stream.Config
	Leader     leader.Config
	Controller controller.Config
	Ops        opsserver.Config
}

// Defaults of the Kubernetes clients' rate limits: one budget for the
// process's writes (EndpointSlices, Ready conditions, Events), shared by its
// clients; client-go's 5/10 would throttle a cold start.
const (
	DefaultKubeAPIQPS   = 100
	DefaultKubeAPIBurst = 200
)

// Defaults fills the fields left unset with endpoints' defaults.
func (c *Config) Defaults() {
	if c.Common.KubeAPIQPS == 0 {
		c.Common.KubeAPIQPS = DefaultKubeAPIQPS
	}
	if c.Common.KubeAPIBurst == 0 {
		c.Common.KubeAPIBurst = DefaultKubeAPIBurst
	}
	c.Common.Defaults()
	if c.Leader.LeaseName == "" {
		c.Leader.LeaseName = LeaseName
	}
	c.Leader.Defaults()
	c.Controller.Defaults()
}

// Flags registers every flag with the current values (after Defaults) as
// their defaults.
func (c *Config) Flags(fs *flag.FlagSet) {
	c.Defaults()
	c.Common.Flags(fs)
	c.Stream.Flags(fs)
	c.Leader.Flags(fs)
	c.Controller.Flags(fs)
	c.Ops.Flags(fs)
}

// App is one ipledger-endpoints process.
type App struct {
	// Registry holds every metric of the process.
	Registry *prometheus.Registry
	// Controller is the EndpointSlice controller (its Metrics are public).
	Controller *controller.Controller

	cfg    Config
	log    *slog.Logger
	client kubernetes.Interface
	watch  *stream.Client
	ops    *opsserver.Server
	synced atomic.Bool
}

// New builds the process from cfg without starting anything.
func New(cfg Config) (*App, error) {
	a := &App{cfg: cfg, log: cfg.Common.Logger(), Registry: prometheus.NewRegistry()}
	kubemetrics.Register(a.Registry)
	if err := cfg.Controller.Validate(); err != nil {
		return nil, err
	}
	if a.cfg.Leader.LeaseName == "" {
		a.cfg.Leader.LeaseName = LeaseName
	}
	if a.cfg.Leader.LeaseNamespace == "" {
		a.cfg.Leader.LeaseNamespace = cfg.Common.Namespace
	}
	restCfg, err := cfg.Common.RESTConfig()
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
	sc := cfg.Stream
	sc.Kinds, sc.OptionalKinds = controller.Kinds, controller.OptionalKinds
	if a.watch, err = stream.New(sc, a.log, a.Registry); err != nil {
		return nil, fmt.Errorf("watcher stream: %w", err)
	}
	controller.AddIndexes(a.watch.Store())
	a.cfg.Leader.Events, a.cfg.Leader.EventComponent = a.client.CoreV1(), controller.Component
	if a.Controller, err = controller.New(cfg.Controller, a.client, prober.DynamicWriter{Client: dyn}, a.watch, a.watch.Store(), a.log, a.Registry); err != nil {
		return nil, err
	}
	if pol := cfg.Controller.Probe.Policy; pol.NoneAllowed {
		a.log.Warn("--probe-allowed-cidrs=none: every readiness probe of an ExternalWorkload is refused (Ready=False, ProbeRefused) until --probe-allowed-cidrs names the networks where they live")
	} else if len(pol.Allowed) == 0 {
		// The compatible default (docs/security.md): say so once, where an
		// operator looks, with what is refused beside the built-in list.
		a.log.Info("No --probe-allowed-cidrs: readiness probes may dial any address but loopback, link-local, multicast, cloud metadata and the CIDRs denied",
			"podCIDRs", fmt.Sprint(pol.PodCIDRs), "serviceCIDRs", fmt.Sprint(pol.ServiceCIDRs), "deniedCIDRs", fmt.Sprint(pol.Denied))
	}
	a.ops = opsserver.New(cfg.Ops, a.Registry, a.ready)
	return a, nil
}

func (a *App) ready() error {
	if !a.synced.Load() {
		return errors.New("watcher stream not synced yet")
	}
	return nil
}

// Run runs the process until ctx ends or a part fails. On the way out the
// leader drains its queue and releases the Lease before Run returns.
func (a *App) Run(ctx context.Context) error {
	g, gctx := errgroup.WithContext(ctx)
	if a.cfg.Ops.Addr != "" {
		g.Go(func() error { return a.ops.Serve(gctx) })
	}
	g.Go(func() error { return a.watch.Run(gctx) })
	g.Go(func() error {
		return leader.RunWhenSynced(gctx, a.watch, func() { a.synced.Store(true) },
			a.client, a.cfg.Leader, a.Controller.NewWorker, a.log, a.Registry)
	})
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
