// Package grpcserver is the one way ipledger builds a gRPC server: a
// go-grpc-middleware v2 interceptor chain (Prometheus metrics on the injected
// registry → structured logging → Kubernetes authentication and
// authorization of tokens with ipledger's audience, streams re-authorized
// while they last and bounded per caller → panic recovery), server
// reflection, grpc.health.v1 reflecting readiness, TLS from (rotating) files
// or plaintext only when asked for, and a bounded graceful stop.
package grpcserver

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"runtime/debug"
	"strings"
	"sync"
	"time"
	"unicode"

	grpcprom "github.com/grpc-ecosystem/go-grpc-middleware/providers/prometheus"
	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/auth"
	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/logging"
	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/recovery"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/reflection"
	"google.golang.org/grpc/status"

	"github.com/ipledger/ipledger/pkg/authz"
)

// DefaultShutdownTimeout bounds the graceful stop: long-lived streams
// (Watch) do not end by themselves, so after it the server stops hard and
// their clients reconnect elsewhere.
const DefaultShutdownTimeout = 5 * time.Second

// Config configures the server.
type Config struct {
	// Addr is the listen address, e.g. ":8443" or "127.0.0.1:0".
	Addr string
	// TLSCertFile and TLSKeyFile hold the serving certificate; they are
	// re-read when they change (cert-manager rotation).
	TLSCertFile, TLSKeyFile string
	// Plaintext serves without TLS; it must be asked for explicitly.
	Plaintext bool
	// ShutdownTimeout bounds the graceful stop (default DefaultShutdownTimeout).
	ShutdownTimeout time.Duration
	// TokenAudience is the audience a caller's token must carry (default
	// authz.Audience); tokens for the Kubernetes API are refused.
	TokenAudience string
	// AuthCacheTTL is how long an allowed review is cached and how often an
	// open stream is re-authorized (default authz.DefaultAllowTTL): a revoked
	// caller's stream ends within twice this.
	AuthCacheTTL time.Duration
	// MaxStreamsPerIdentity bounds the streams one caller may hold open
	// (default DefaultMaxStreamsPerIdentity).
	MaxStreamsPerIdentity int
}

// Flags registers --grpc-addr, --grpc-tls-cert-file, --grpc-tls-key-file,
// --grpc-plaintext, --grpc-token-audience, --grpc-auth-cache-ttl and
// --grpc-max-streams-per-identity.
func (c *Config) Flags(fs *flag.FlagSet, defaultAddr string) {
	c.Defaults()
	fs.StringVar(&c.Addr, "grpc-addr", defaultAddr, "gRPC listen address")
	fs.StringVar(&c.TLSCertFile, "grpc-tls-cert-file", c.TLSCertFile, "PEM serving certificate for gRPC (re-read on change)")
	fs.StringVar(&c.TLSKeyFile, "grpc-tls-key-file", c.TLSKeyFile, "PEM private key of --grpc-tls-cert-file")
	fs.BoolVar(&c.Plaintext, "grpc-plaintext", c.Plaintext, "serve gRPC without TLS (bearer tokens travel in clear: local development only)")
	fs.StringVar(&c.TokenAudience, "grpc-token-audience", c.TokenAudience,
		"audience a caller's bearer token must carry (project it with this audience); tokens for the Kubernetes API are refused")
	fs.DurationVar(&c.AuthCacheTTL, "grpc-auth-cache-ttl", c.AuthCacheTTL,
		"how long an allowed token and access review is cached, and how often open streams are re-authorized (a revoked caller's stream ends within twice this)")
	fs.IntVar(&c.MaxStreamsPerIdentity, "grpc-max-streams-per-identity", c.MaxStreamsPerIdentity,
		"open streams one caller (user name) may hold; one more is refused with RESOURCE_EXHAUSTED")
}

// Defaults fills the zero values of the authorization settings (the
// address is Flags' defaultAddr).
func (c *Config) Defaults() {
	if c.TokenAudience == "" {
		c.TokenAudience = authz.Audience
	}
	if c.AuthCacheTTL == 0 {
		c.AuthCacheTTL = authz.DefaultAllowTTL
	}
	if c.MaxStreamsPerIdentity == 0 {
		c.MaxStreamsPerIdentity = DefaultMaxStreamsPerIdentity
	}
}

// Validate reports a configuration that cannot serve.
func (c *Config) Validate() error {
	switch {
	case c.Plaintext && (c.TLSCertFile != "" || c.TLSKeyFile != ""):
		return errors.New("--grpc-plaintext conflicts with --grpc-tls-cert-file/--grpc-tls-key-file: choose one")
	case !c.Plaintext && (c.TLSCertFile == "" || c.TLSKeyFile == ""):
		return errors.New("gRPC needs TLS: set --grpc-tls-cert-file and --grpc-tls-key-file, or pass --grpc-plaintext explicitly")
	case c.AuthCacheTTL < 0:
		return fmt.Errorf("--grpc-auth-cache-ttl %s: must be positive", c.AuthCacheTTL)
	case c.MaxStreamsPerIdentity < 0:
		return fmt.Errorf("--grpc-max-streams-per-identity %d: must be positive", c.MaxStreamsPerIdentity)
	}
	return nil
}

// Server is a gRPC server built by New.
type Server struct {
	cfg     Config
	log     *slog.Logger
	grpc    *grpc.Server
	health  *health.Server
	metrics *grpcprom.ServerMetrics
	ln      net.Listener

	mu       sync.Mutex
	services []string
	serving  bool
}

// New validates cfg, listens on cfg.Addr and builds the server. Every call
// goes through authorizer (grpc.health.v1 and reflection are open), which
// New sets to cfg's TokenAudience and AuthCacheTTL. Metrics are registered
// on reg (re-using collectors already there, so several servers may share a
// registry).
func New(cfg Config, authorizer *authz.Authorizer, log *slog.Logger, reg prometheus.Registerer) (*Server, error) {
	cfg.Defaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if authorizer == nil {
		return nil, errors.New("grpcserver: an authorizer is required (authz.New)")
	}
	if log == nil {
		log = slog.Default()
	}
	if cfg.ShutdownTimeout <= 0 {
		cfg.ShutdownTimeout = DefaultShutdownTimeout
	}
	authorizer.SetAudiences(cfg.TokenAudience)
	authorizer.SetCacheTTLs(cfg.AuthCacheTTL, min(authz.DefaultDenyTTL, cfg.AuthCacheTTL))
	var opts []grpc.ServerOption
	if !cfg.Plaintext {
		kp, err := newKeypairReloader(cfg.TLSCertFile, cfg.TLSKeyFile)
		if err != nil {
			return nil, err
		}
		opts = append(opts, grpc.Creds(credentials.NewTLS(kp.tlsConfig())))
	}

	metrics := grpcprom.NewServerMetrics(
		grpcprom.WithServerCounterOptions(grpcprom.WithNamespace("ipledger")),
		grpcprom.WithServerHandlingTimeHistogram(
			grpcprom.WithHistogramNamespace("ipledger"),
			grpcprom.WithHistogramBuckets([]float64{.001, .005, .01, .05, .1, .5, 1, 5, 30}),
		),
	)
	metrics = registerOrReuse(reg, metrics)
	panics := registerOrReuse(reg, prometheus.NewCounter(prometheus.CounterOpts{
		Name: "ipledger_grpc_server_panics_recovered_total",
		Help: "Panics in gRPC handlers turned into codes.Internal.",
	}))
	guard := &streamGuard{
		authorizer: authorizer,
		interval:   cfg.AuthCacheTTL,
		max:        cfg.MaxStreamsPerIdentity,
		log:        log,
		open:       map[string]int{},
		ended: registerOrReuse(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ipledger_grpc_server_streams_deauthorized_total",
			Help: "Open streams ended because a re-authorization refused their caller, by gRPC code.",
		}, []string{"grpc_code"})),
		overLimit: registerOrReuse(reg, prometheus.NewCounter(prometheus.CounterOpts{
			Name: "ipledger_grpc_server_streams_over_identity_limit_total",
			Help: "Streams refused with RESOURCE_EXHAUSTED because their caller held --grpc-max-streams-per-identity open streams.",
		})),
	}

	logger := interceptorLogger(log)
	logOpts := []logging.Option{
		logging.WithLogOnEvents(logging.FinishCall),
		logging.WithLevels(codeToLevel),
		logging.WithDisableLoggingFields(logging.SystemTag[0], logging.ComponentFieldKey, logging.MethodTypeFieldKey),
		logging.WithDurationField(func(d time.Duration) logging.Fields { return logging.Fields{"duration", d.String()} }),
	}
	recoverFn := func(ctx context.Context, p any) error {
		panics.Inc()
		method, _ := grpc.Method(ctx)
		log.Error("Recovered from a panic in a gRPC handler", "method", method, "panic", fmt.Sprint(p), "stack", string(debug.Stack()))
		return status.Error(codes.Internal, "internal error: the server recovered from a panic; see its log")
	}
	opts = append(opts,
		// Long-lived streams (Watch): find dead clients, and let clients
		// ping every 10s or more without being sent away (too_many_pings).
		grpc.KeepaliveParams(keepalive.ServerParameters{Time: 30 * time.Second, Timeout: 10 * time.Second}),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 10 * time.Second, PermitWithoutStream: true}),
		grpc.ChainUnaryInterceptor(
			metrics.UnaryServerInterceptor(),
			logging.UnaryServerInterceptor(logger, logOpts...),
			auth.UnaryServerInterceptor(authorizer.Authenticate),
			recovery.UnaryServerInterceptor(recovery.WithRecoveryHandlerContext(recoverFn)),
		),
		grpc.ChainStreamInterceptor(
			metrics.StreamServerInterceptor(),
			logging.StreamServerInterceptor(logger, logOpts...),
			guard.intercept,
			recovery.StreamServerInterceptor(recovery.WithRecoveryHandlerContext(recoverFn)),
		),
	)

	ln, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		return nil, fmt.Errorf("gRPC: listen on %s (--grpc-addr): %w", cfg.Addr, err)
	}
	s := &Server{
		cfg:     cfg,
		log:     log,
		grpc:    grpc.NewServer(opts...),
		health:  health.NewServer(),
		metrics: metrics,
		ln:      ln,
	}
	// Not serving until the service says it is ready.
	s.health.SetServingStatus("", healthpb.HealthCheckResponse_NOT_SERVING)
	healthpb.RegisterHealthServer(s.grpc, s.health)
	reflection.Register(s.grpc)
	return s, nil
}

// registerOrReuse registers c on reg, or returns the equal collector that is
// already registered.
func registerOrReuse[C prometheus.Collector](reg prometheus.Registerer, c C) C {
	if reg == nil {
		return c
	}
	if err := reg.Register(c); err != nil {
		var are prometheus.AlreadyRegisteredError
		if errors.As(err, &are) {
			if existing, ok := are.ExistingCollector.(C); ok {
				return existing
			}
		}
		// A conflicting collector of another shape: keep serving, unmeasured.
	}
	return c
}

// Register registers a service implementation; call it before Serve.
func (s *Server) Register(desc *grpc.ServiceDesc, impl any) {
	s.grpc.RegisterService(desc, impl)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.services = append(s.services, desc.ServiceName)
	s.health.SetServingStatus(desc.ServiceName, s.statusLocked())
}

// SetServing sets the grpc.health.v1 status of the server ("") and of every
// registered service: SERVING when serving, else NOT_SERVING.
func (s *Server) SetServing(serving bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.serving = serving
	st := s.statusLocked()
	s.health.SetServingStatus("", st)
	for _, name := range s.services {
		s.health.SetServingStatus(name, st)
	}
}

func (s *Server) statusLocked() healthpb.HealthCheckResponse_ServingStatus {
	if s.serving {
		return healthpb.HealthCheckResponse_SERVING
	}
	return healthpb.HealthCheckResponse_NOT_SERVING
}

// Addr is the address the server listens on (useful with port 0).
func (s *Server) Addr() net.Addr { return s.ln.Addr() }

// GRPCServer exposes the underlying server (e.g. for extra registrations).
func (s *Server) GRPCServer() *grpc.Server { return s.grpc }

// Serve serves until ctx ends, then reports NOT_SERVING, stops gracefully
// for at most ShutdownTimeout and then hard. It returns nil after a stop
// caused by ctx.
func (s *Server) Serve(ctx context.Context) error {
	s.metrics.InitializeMetrics(s.grpc)
	errc := make(chan error, 1)
	go func() { errc <- s.grpc.Serve(s.ln) }()
	s.log.Info("Serving gRPC", "addr", s.ln.Addr().String(), "plaintext", s.cfg.Plaintext)
	select {
	case err := <-errc:
		return fmt.Errorf("gRPC server on %s: %w", s.ln.Addr(), err)
	case <-ctx.Done():
	}
	s.health.Shutdown()
	stopped := make(chan struct{})
	go func() {
		s.grpc.GracefulStop()
		close(stopped)
	}()
	select {
	case <-stopped:
	case <-time.After(s.cfg.ShutdownTimeout):
		s.log.Warn("Graceful gRPC stop timed out; closing remaining calls", "timeout", s.cfg.ShutdownTimeout.String())
		s.grpc.Stop()
		<-stopped
	}
	if err := <-errc; err != nil && !errors.Is(err, grpc.ErrServerStopped) {
		return fmt.Errorf("gRPC server on %s: %w", s.ln.Addr(), err)
	}
	return nil
}

// codeToLevel logs successful calls at debug (a busy server's happy path is
// metrics, not logs) and errors as go-grpc-middleware does by default.
func codeToLevel(code codes.Code) logging.Level {
	if code == codes.OK {
		return logging.LevelDebug
	}
	return logging.DefaultServerCodeToLevel(code)
}

// interceptorLogger adapts slog to the logging interceptor, rewriting its
// messages and keys to ipledger's style ("Finished call", "grpcMethod").
func interceptorLogger(log *slog.Logger) logging.Logger {
	return logging.LoggerFunc(func(ctx context.Context, lvl logging.Level, msg string, fields ...any) {
		for i := 0; i+1 < len(fields); i += 2 {
			if k, ok := fields[i].(string); ok {
				fields[i] = camelKey(k)
			}
		}
		log.Log(ctx, slog.Level(lvl), capitalize(msg), fields...)
	})
}

// camelKey turns "grpc.method" or "peer.address" or "grpc.time_ms" into
// lowerCamelCase.
func camelKey(k string) string {
	var b strings.Builder
	upper := false
	for i, r := range k {
		if r == '.' || r == '_' || r == '-' {
			upper = i > 0
			continue
		}
		if upper {
			r = unicode.ToUpper(r)
			upper = false
		}
		b.WriteRune(r)
	}
	return b.String()
}

func capitalize(s string) string {
	if s == "" {
		return s
	}
	r := []rune(s)
	r[0] = unicode.ToUpper(r[0])
	return string(r)
}
