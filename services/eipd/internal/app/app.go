// Package app wires the ipledger-eipd process together: the watcher stream
// it reads Nodes and Pods from, the EC2 client, the Kubernetes client it
// writes Node labels and Events with, the Lease that gates the controller,
// the EIPService gRPC server and the ops server, all under one errgroup.
package app

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"sync/atomic"

	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sync/errgroup"
	"k8s.io/client-go/kubernetes"

	"github.com/ipledger/ipledger/pkg/authz"
	"github.com/ipledger/ipledger/pkg/cmdmain"
	"github.com/ipledger/ipledger/pkg/grpcserver"
	"github.com/ipledger/ipledger/pkg/kubemetrics"
	"github.com/ipledger/ipledger/pkg/leader"
	"github.com/ipledger/ipledger/pkg/opsserver"
	"github.com/ipledger/ipledger/pkg/stream"
	eipdv1grpc "github.com/ipledger/ipledger/proto/ipledger/eipd/v1/eipdv1grpc"
	watcherv1 "github.com/ipledger/ipledger/proto/ipledger/watcher/v1"
	"github.com/ipledger/ipledger/services/eipd/internal/awsec2"
	"github.com/ipledger/ipledger/services/eipd/internal/controller"
	"github.com/ipledger/ipledger/services/eipd/internal/server"
)

// Defaults of the process.
const (
	LeaseName       = "ipledger-eipd"
	DefaultGRPCAddr = ":9445"
	// Component is the Event source and field manager.
	Component = "ipledger-eipd"
)

// Kinds eipd reads from the stream.
var Kinds = []watcherv1.Kind{watcherv1.Kind_KIND_NODE, watcherv1.Kind_KIND_POD}

// Config is everything the binary is configured with.
type Config struct {
	Common     cmdmain.Common
	Stream     stream.Config
	Leader     leader.Config
	Controller controller.Config
	EC2        awsec2.Config
	GRPC       grpcserver.Config
	Ops        opsserver.Config
	// ClusterID goes into the ipledger.io/cluster tag of every address:
	// eipd only ever sees and touches its own cluster's addresses.
	ClusterID string
	// EC2Options adjust the EC2 client beyond the SDK's standard chain
	// (tests point it at a fault proxy); not a flag.
	EC2Options []func(*ec2.Options)
}

// Defaults fills the fields left unset with eipd's defaults.
func (c *Config) Defaults() {
	c.Common.Defaults() // cmdmain's client rate limits (50/100) suit it
	c.GRPC.DefaultAudiences(authz.EIPDAudience)
	if c.Leader.LeaseName == "" {
		c.Leader.LeaseName = LeaseName
	}
	c.Leader.Defaults()
	c.Controller.Defaults()
	c.EC2.Defaults()
}

// Flags registers every flag with the current values (after Defaults) as
// defaults.
func (c *Config) Flags(fs *flag.FlagSet) {
	c.Defaults()
	c.Common.Flags(fs)
	c.Stream.Flags(fs)
	c.Leader.Flags(fs)
	c.Controller.Flags(fs)
	c.EC2.Flags(fs)
	c.GRPC.Flags(fs, DefaultGRPCAddr)
	c.Ops.Flags(fs)
	fs.StringVar(&c.ClusterID, "cluster-id", c.ClusterID, "identifies this cluster in the ipledger.io/cluster tag of its Elastic IPs (required; unique among the clusters of one AWS account: eipd never touches an address tagged for another cluster)")
}

// App is one ipledger-eipd process.
type App struct {
	// Registry holds every metric of the process.
	Registry *prometheus.Registry
	// Controller is the Elastic IP controller.
	Controller *controller.Controller

	cfg    Config
	log    *slog.Logger
	client kubernetes.Interface
	watch  *stream.Client
	grpc   *grpcserver.Server
	ops    *opsserver.Server
	synced atomic.Bool
}

// New builds the process from cfg without starting anything (the gRPC
// server already listens, so Addr is known).
func New(ctx context.Context, cfg Config) (*App, error) {
	if err := awsec2.ValidateClusterID(cfg.ClusterID); err != nil {
		return nil, err
	}
	a := &App{cfg: cfg, log: cfg.Common.Logger(), Registry: prometheus.NewRegistry()}
	kubemetrics.Register(a.Registry)
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
	if a.client, err = kubernetes.NewForConfig(restCfg); err != nil {
		return nil, fmt.Errorf("kubernetes client: %w", err)
	}
	ec2c, err := awsec2.New(ctx, cfg.ClusterID, cfg.EC2, a.Registry, cfg.EC2Options...)
	if err != nil {
		return nil, err
	}
	sc := cfg.Stream
	sc.Kinds = Kinds
	if a.watch, err = stream.New(sc, a.log, a.Registry); err != nil {
		return nil, fmt.Errorf("watcher stream: %w", err)
	}
	a.cfg.Leader.Events, a.cfg.Leader.EventComponent = a.client.CoreV1(), Component
	ctrlCfg := cfg.Controller
	ctrlCfg.ClusterID = cfg.ClusterID
	if a.Controller, err = controller.New(ctrlCfg, ec2c, a.watch, a.watch.Store(), a.client, a.log, a.Registry); err != nil {
		return nil, err
	}
	cfg.GRPC.DefaultAudiences(authz.EIPDAudience)
	reviews, err := cfg.GRPC.ReviewClient(restCfg)
	if err != nil {
		return nil, err
	}
	cfg.GRPC.CertClient = reviews
	if a.grpc, err = grpcserver.New(cfg.GRPC, authz.New(reviews, server.Rules, a.log), a.log, a.Registry); err != nil {
		return nil, err
	}
	a.grpc.Register(&eipdv1grpc.EIPService_ServiceDesc, server.New(ec2c, a.watch.Store(), a.Controller.Status(), a.Controller.Wants))
	a.ops = opsserver.New(cfg.Ops, a.Registry, a.ready)
	return a, nil
}

// GRPCAddr is where EIPService listens.
func (a *App) GRPCAddr() string { return a.grpc.Addr().String() }

func (a *App) ready() error {
	if err := a.grpc.CertificateReady(); err != nil {
		return err
	}
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
	g.Go(func() error { return a.grpc.Serve(gctx) })
	g.Go(func() error { return a.watch.Run(gctx) })
	g.Go(func() error {
		return leader.RunWhenSynced(gctx, a.watch, func() { a.synced.Store(true); a.grpc.SetServing(true) },
			a.client, a.cfg.Leader, a.Controller.NewWorker, a.log, a.Registry)
	})
	return g.Wait()
}

// Run builds and runs the process.
func Run(ctx context.Context, cfg Config) error {
	a, err := New(ctx, cfg)
	if err != nil {
		return err
	}
	return a.Run(ctx)
}
