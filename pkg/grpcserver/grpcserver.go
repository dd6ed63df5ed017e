// Package grpcserver is the one way ipledger builds a gRPC server: a
// go-grpc-middleware v2 interceptor chain (Prometheus metrics on the injected
// registry → structured logging → Kubernetes authentication and
// authorization of tokens with the server's audience, streams re-authorized
// while they last and bounded per caller, open methods bounded in total →
// panic recovery), bounds on streams per connection and header size, server
// reflection, grpc.health.v1 reflecting readiness, TLS from (rotating) files
// or plaintext only when asked for, and a bounded graceful stop.
package grpcserver

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"runtime/debug"
	"strconv"
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
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/ipledger/ipledger/pkg/authz"
	"github.com/ipledger/ipledger/pkg/parallel"
	"github.com/ipledger/ipledger/pkg/promreg"
	"github.com/ipledger/ipledger/pkg/servingcert"
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
	// TLSSigner, instead of the files, gets the serving certificate for
	// TLSDNSNames from the CertificateSigningRequest API with this
	// signerName (pkg/servingcert): the key is made in memory and renewed
	// before the certificate ends.
	TLSSigner   string
	TLSDNSNames []string
	// CertClient is the Kubernetes client of TLSSigner's requests; the
	// binary sets it (its ReviewClient will do: one request a few days).
	CertClient kubernetes.Interface
	// Plaintext serves without TLS; it must be asked for explicitly.
	Plaintext bool
	// ShutdownTimeout bounds the graceful stop (default DefaultShutdownTimeout).
	ShutdownTimeout time.Duration
	// TokenAudiences are the audiences of which a caller's token must carry
	// one: the server's own (authz.WatcherAudience, …) and, for one release,
	// authz.LegacyAudience (DefaultAudiences). Tokens for the Kubernetes API
	// are refused. Required.
	TokenAudiences []string
	// AuthCacheTTL is how long an allowed review is cached and how often an
	// open stream is re-authorized (default authz.DefaultAllowTTL): a revoked
	// caller's stream ends within twice this.
	AuthCacheTTL time.Duration
	// MaxStreamsPerIdentity bounds the streams one caller may hold open
	// (default DefaultMaxStreamsPerIdentity).
	MaxStreamsPerIdentity int
	// MaxConcurrentStreams bounds the streams (and calls) in flight on one
	// connection (default DefaultMaxConcurrentStreams).
	MaxConcurrentStreams uint32
	// MaxHeaderListSize bounds the request headers a client may send, in
	// bytes as HTTP/2 counts them (default DefaultMaxHeaderListSize).
	MaxHeaderListSize uint32
	// MaxOpenStreams bounds the streams of the methods open without a token
	// (grpc.health.v1 Watch, reflection) that all callers together hold at
	// once (default DefaultMaxOpenStreams).
	MaxOpenStreams int
	// ReviewQPS and ReviewBurst are the client-side rate limit of the
	// Kubernetes client of TokenReviews and SubjectAccessReviews
	// (ReviewClient), apart from the component's own client: a flood of
	// made-up tokens spends this budget, never the one of the component's
	// Lease renewals and writes (defaults DefaultReviewQPS, DefaultReviewBurst).
	ReviewQPS   float64
	ReviewBurst int
	// MaxPendingReviews bounds the reviews waiting for the API server at
	// once; one more call that needs a review is refused with UNAVAILABLE
	// (default authz.DefaultMaxPendingReviews).
	MaxPendingReviews int
}

// Defaults of the limits on callers, valid or not (docs/security.md,
// "Callers without a valid token").
const (
	// DefaultMaxConcurrentStreams: an ipledger client holds one Watch stream
	// per connection and a few unary calls; grpc-go's own default is
	// unlimited.
	DefaultMaxConcurrentStreams = 100
	// DefaultMaxHeaderListSize: a ServiceAccount token is 1–2 KB; grpc-go's
	// own default is 16 MB.
	DefaultMaxHeaderListSize = 16 << 10
	// DefaultMaxOpenStreams: the kubelet's gRPC probes are unary Checks,
	// and grpcurl or the plugin opens a reflection stream for a second.
	DefaultMaxOpenStreams = 64
	// DefaultReviewQPS and DefaultReviewBurst: callers with valid tokens
	// cost one TokenReview and one SubjectAccessReview per AuthCacheTTL
	// (10 s) each, so 20/s serves a few hundred of them.
	DefaultReviewQPS   = 20
	DefaultReviewBurst = 40
)

// DefaultAudiences sets TokenAudiences, when unset, to those of a server
// whose own audience is own (authz.ServerAudiences: own and the legacy
// one). Each binary calls it with its own before Flags and before New.
func (c *Config) DefaultAudiences(own string) {
	if len(c.TokenAudiences) == 0 {
		c.TokenAudiences = authz.ServerAudiences(own)
	}
}

// Flags registers --grpc-addr, --grpc-tls-cert-file, --grpc-tls-key-file,
// --grpc-plaintext, --grpc-token-audiences (and its deprecated singular
// --grpc-token-audience), --grpc-auth-cache-ttl,
// --grpc-max-streams-per-identity, --grpc-max-concurrent-streams,
// --grpc-max-header-list-size, --grpc-max-open-streams,
// --grpc-auth-kube-api-qps, --grpc-auth-kube-api-burst and
// --grpc-auth-max-pending-reviews.
func (c *Config) Flags(fs *flag.FlagSet, defaultAddr string) {
	c.Defaults()
	fs.StringVar(&c.Addr, "grpc-addr", defaultAddr, "gRPC listen address")
	fs.StringVar(&c.TLSCertFile, "grpc-tls-cert-file", c.TLSCertFile, "PEM serving certificate for gRPC (re-read on change)")
	fs.StringVar(&c.TLSKeyFile, "grpc-tls-key-file", c.TLSKeyFile, "PEM private key of --grpc-tls-cert-file")
	fs.StringVar(&c.TLSSigner, "grpc-tls-signer", c.TLSSigner,
		"get the serving certificate from the CertificateSigningRequest API with this `signerName` (ipledger.io/grpc-serving: ipledger-signer) instead of files; the key never leaves the process")
	fs.Var((*audiencesFlag)(&c.TLSDNSNames), "grpc-tls-dns-names", "comma-separated DNS `names` the --grpc-tls-signer certificate carries")
	fs.BoolVar(&c.Plaintext, "grpc-plaintext", c.Plaintext, "serve gRPC without TLS (bearer tokens travel in clear: local development only)")
	fs.Var((*audiencesFlag)(&c.TokenAudiences), "grpc-token-audiences",
		"comma-separated `audiences` of which a caller's bearer token must carry one: this server's own and, for one release, the legacy "+
			authz.LegacyAudience+" of older clients; tokens for the Kubernetes API are refused")
	fs.Func("grpc-token-audience", "deprecated: the one `audience` accepted (use --grpc-token-audiences)", func(v string) error {
		c.TokenAudiences = []string{v}
		return nil
	})
	fs.DurationVar(&c.AuthCacheTTL, "grpc-auth-cache-ttl", c.AuthCacheTTL,
		"how long an allowed token and access review is cached, and how often open streams are re-authorized (a revoked caller's stream ends within twice this)")
	fs.IntVar(&c.MaxStreamsPerIdentity, "grpc-max-streams-per-identity", c.MaxStreamsPerIdentity,
		"open streams one caller (user name) may hold; one more is refused with RESOURCE_EXHAUSTED")
	fs.Func("grpc-max-concurrent-streams", fmt.Sprintf("`streams` and calls in flight on one connection; the client waits for a free one (default %d)", c.MaxConcurrentStreams),
		func(v string) error { return parseUint32(v, &c.MaxConcurrentStreams) })
	fs.Func("grpc-max-header-list-size", fmt.Sprintf("`bytes` of request headers a client may send (HTTP/2 accounting); a bigger request is refused (default %d)", c.MaxHeaderListSize),
		func(v string) error { return parseUint32(v, &c.MaxHeaderListSize) })
	fs.IntVar(&c.MaxOpenStreams, "grpc-max-open-streams", c.MaxOpenStreams,
		"streams of the methods open without a token (grpc.health.v1 Watch, reflection) all callers together may hold; one more is refused with RESOURCE_EXHAUSTED")
	fs.Float64Var(&c.ReviewQPS, "grpc-auth-kube-api-qps", c.ReviewQPS,
		"client-side rate limit (queries per second) of the TokenReviews and SubjectAccessReviews of gRPC callers, apart from --kube-api-qps: made-up tokens never spend the budget of the Lease renewals and writes")
	fs.IntVar(&c.ReviewBurst, "grpc-auth-kube-api-burst", c.ReviewBurst, "client-side burst of the token and access reviews of gRPC callers")
	fs.IntVar(&c.MaxPendingReviews, "grpc-auth-max-pending-reviews", c.MaxPendingReviews,
		"token and access reviews that may wait for the API server at once; a call needing one more is refused with UNAVAILABLE")
}

func parseUint32(v string, dst *uint32) error {
	n, err := strconv.ParseUint(v, 10, 32)
	if err != nil {
		return err
	}
	*dst = uint32(n)
	return nil
}

// audiencesFlag is a comma-separated list of audiences.
type audiencesFlag []string

func (f *audiencesFlag) String() string { return strings.Join(*f, ",") }

func (f *audiencesFlag) Set(v string) error {
	var out []string
	for _, a := range strings.Split(v, ",") {
		if a = strings.TrimSpace(a); a != "" {
			out = append(out, a)
		}
	}
	*f = out
	return nil
}

// Defaults fills the zero values of the authorization settings and limits
// (the address is Flags' defaultAddr, the audiences DefaultAudiences').
func (c *Config) Defaults() {
	if c.AuthCacheTTL == 0 {
		c.AuthCacheTTL = authz.DefaultAllowTTL
	}
	if c.MaxStreamsPerIdentity == 0 {
		c.MaxStreamsPerIdentity = DefaultMaxStreamsPerIdentity
	}
	if c.MaxConcurrentStreams == 0 {
		c.MaxConcurrentStreams = DefaultMaxConcurrentStreams
	}
	if c.MaxHeaderListSize == 0 {
		c.MaxHeaderListSize = DefaultMaxHeaderListSize
	}
	if c.MaxOpenStreams == 0 {
		c.MaxOpenStreams = DefaultMaxOpenStreams
	}
	if c.ReviewQPS == 0 {
		c.ReviewQPS = DefaultReviewQPS
	}
	if c.ReviewBurst == 0 {
		c.ReviewBurst = DefaultReviewBurst
	}
	if c.MaxPendingReviews == 0 {
		c.MaxPendingReviews = authz.DefaultMaxPendingReviews
	}
}

// Validate reports a configuration that cannot serve.
func (c *Config) Validate() error {
	switch {
	case c.TLSSigner != "" && (c.Plaintext || c.TLSCertFile != "" || c.TLSKeyFile != ""):
		return errors.New("--grpc-tls-signer conflicts with --grpc-plaintext and --grpc-tls-cert-file/--grpc-tls-key-file: choose one")
	case c.TLSSigner != "" && len(c.TLSDNSNames) == 0:
		return errors.New("--grpc-tls-signer needs --grpc-tls-dns-names: the names clients dial")
	case c.Plaintext && (c.TLSCertFile != "" || c.TLSKeyFile != ""):
		return errors.New("--grpc-plaintext conflicts with --grpc-tls-cert-file/--grpc-tls-key-file: choose one")
	case c.TLSSigner == "" && !c.Plaintext && (c.TLSCertFile == "" || c.TLSKeyFile == ""):
		return errors.New("gRPC needs TLS: set --grpc-tls-cert-file and --grpc-tls-key-file, or --grpc-tls-signer, or pass --grpc-plaintext explicitly")
	case len(c.TokenAudiences) == 0:
		return errors.New("--grpc-token-audiences is empty: name the audiences this server accepts")
	case c.AuthCacheTTL < 0:
		return fmt.Errorf("--grpc-auth-cache-ttl %s: must be positive", c.AuthCacheTTL)
	case c.MaxStreamsPerIdentity < 0:
		return fmt.Errorf("--grpc-max-streams-per-identity %d: must be positive", c.MaxStreamsPerIdentity)
	case c.MaxOpenStreams < 0:
		return fmt.Errorf("--grpc-max-open-streams %d: must be positive", c.MaxOpenStreams)
	case c.ReviewQPS < 0 || c.ReviewBurst < 0:
		return fmt.Errorf("--grpc-auth-kube-api-qps %g, --grpc-auth-kube-api-burst %d: must be positive", c.ReviewQPS, c.ReviewBurst)
	case c.MaxPendingReviews < 0:
		return fmt.Errorf("--grpc-auth-max-pending-reviews %d: must be positive", c.MaxPendingReviews)
	}
	return nil
}

// ReviewClient builds the Kubernetes client of the TokenReviews and
// SubjectAccessReviews (pass it to authz.New) from a copy of the
// component's base config with a rate limiter of its own (ReviewQPS,
// ReviewBurst): a flood of made-up tokens waits in this limiter and is
// refused, while the component's Lease renewals and writes keep theirs.
func (c *Config) ReviewClient(base *rest.Config) (kubernetes.Interface, error) {
	d := *c
	d.Defaults()
	cfg := rest.CopyConfig(base)
	cfg.RateLimiter = nil // a copy of base's limiter would be the same bucket
	cfg.QPS, cfg.Burst = float32(d.ReviewQPS), d.ReviewBurst
	cfg.ContentType = runtime.ContentTypeProtobuf
	cfg.AcceptContentTypes = runtime.ContentTypeProtobuf + "," + runtime.ContentTypeJSON
	cfg.UserAgent = strings.TrimSpace(rest.DefaultKubernetesUserAgent() + " ipledger-grpc-auth")
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("kubernetes client for token and access reviews: %w", err)
	}
	return client, nil
}

// Server is a gRPC server built by New.
type Server struct {
	cfg     Config
	log     *slog.Logger
	grpc    *grpc.Server
	health  *health.Server
	metrics *grpcprom.ServerMetrics
	ln      net.Listener
	source  *servingcert.Source // with --grpc-tls-signer

	mu       sync.Mutex
	services []string
	serving  bool
}

// New validates cfg, listens on cfg.Addr and builds the server. Every call
// goes through authorizer (grpc.health.v1 and reflection are open), which
// New sets to cfg's TokenAudiences, AuthCacheTTL and MaxPendingReviews. Metrics are registered
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
	authorizer.SetAudiences(cfg.TokenAudiences...)
	authorizer.SetCacheTTLs(cfg.AuthCacheTTL, min(authz.DefaultDenyTTL, cfg.AuthCacheTTL))
	authorizer.SetMaxPendingReviews(cfg.MaxPendingReviews)
	var (
		opts   []grpc.ServerOption
		source *servingcert.Source
	)
	if !cfg.Plaintext {
		var (
			getCert  func(*tls.ClientHelloInfo) (*tls.Certificate, error)
			notAfter func() time.Time
		)
		if cfg.TLSSigner != "" {
			if cfg.CertClient == nil {
				return nil, errors.New("grpcserver: --grpc-tls-signer needs a Kubernetes client (Config.CertClient)")
			}
			var err error
			if source, err = servingcert.New(servingcert.Config{SignerName: cfg.TLSSigner, DNSNames: cfg.TLSDNSNames},
				cfg.CertClient, log.With("component", "servingcert")); err != nil {
				return nil, err
			}
			getCert, notAfter = source.GetCertificate, source.NotAfter
		} else {
			kp, err := newKeypairReloader(cfg.TLSCertFile, cfg.TLSKeyFile)
			if err != nil {
				return nil, err
			}
			getCert, notAfter = kp.getCertificate, kp.notAfter
		}
		opts = append(opts, grpc.Creds(credentials.NewTLS(serverTLSConfig(getCert))))
		promreg.Reuse(reg, prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "ipledger_grpc_server_certificate_expiry_timestamp_seconds",
			Help: "When the gRPC serving certificate (as last loaded or issued) expires, in seconds since the epoch (0 before the first is issued).",
		}, func() float64 {
			if t := notAfter(); !t.IsZero() {
				return float64(t.Unix())
			}
			return 0
		}))
	}

	metrics := grpcprom.NewServerMetrics(
		grpcprom.WithServerCounterOptions(grpcprom.WithNamespace("ipledger")),
		grpcprom.WithServerHandlingTimeHistogram(
			grpcprom.WithHistogramNamespace("ipledger"),
			grpcprom.WithHistogramBuckets([]float64{.001, .005, .01, .05, .1, .5, 1, 5, 30}),
		),
	)
	metrics = promreg.Reuse(reg, metrics)
	panics := promreg.Reuse(reg, prometheus.NewCounter(prometheus.CounterOpts{
		Name: "ipledger_grpc_server_panics_recovered_total",
		Help: "Panics in gRPC handlers turned into codes.Internal.",
	}))
	guard := &streamGuard{
		authorizer: authorizer,
		interval:   cfg.AuthCacheTTL,
		max:        cfg.MaxStreamsPerIdentity,
		log:        log,
		open:       map[string]int{},
		openSlots:  parallel.NewLimit(cfg.MaxOpenStreams),
		ended: promreg.Reuse(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ipledger_grpc_server_streams_deauthorized_total",
			Help: "Open streams ended because a re-authorization refused their caller, by gRPC code.",
		}, []string{"grpc_code"})),
		overLimit: promreg.Reuse(reg, prometheus.NewCounter(prometheus.CounterOpts{
			Name: "ipledger_grpc_server_streams_over_identity_limit_total",
			Help: "Streams refused with RESOURCE_EXHAUSTED because their caller held --grpc-max-streams-per-identity open streams.",
		})),
		overOpenLimit: promreg.Reuse(reg, prometheus.NewCounter(prometheus.CounterOpts{
			Name: "ipledger_grpc_server_open_streams_over_limit_total",
			Help: "Streams of methods open without a token (health Watch, reflection) refused with RESOURCE_EXHAUSTED because --grpc-max-open-streams were held.",
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
		// Bounds for everyone, token or not: streams per connection (a
		// client waits for a free one) and the size of request headers.
		grpc.MaxConcurrentStreams(cfg.MaxConcurrentStreams),
		grpc.MaxHeaderListSize(cfg.MaxHeaderListSize),
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
		source:  source,
	}
	// Not serving until the service says it is ready.
	s.health.SetServingStatus("", healthpb.HealthCheckResponse_NOT_SERVING)
	healthpb.RegisterHealthServer(s.grpc, s.health)
	reflection.Register(s.grpc)
	return s, nil
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

// CertificateReady is nil unless the server waits for its first
// certificate from --grpc-tls-signer: a binary's /readyz includes it, so a
// server that cannot serve TLS yet is not Ready.
func (s *Server) CertificateReady() error {
	if s.source == nil {
		return nil
	}
	return s.source.Ready()
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
	if s.source != nil {
		go func() { _ = s.source.Run(ctx) }()
	}
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
