// Package opsserver serves a process's operational HTTP endpoints: Prometheus
// metrics from the process's injected registry, /healthz (liveness),
// /readyz (readiness) and, only when asked for (--enable-pprof), /debug/pprof:
// profiles expose memory contents and cost CPU, and the ops port is not
// authenticated.
package opsserver

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/ipledger/ipledger/pkg/version"
)

// DefaultAddr is the listen address when --ops-addr is not given.
const DefaultAddr = ":9090"

// shutdownTimeout bounds how long in-flight scrapes may take after the
// context ends.
const shutdownTimeout = 5 * time.Second

// Config configures the ops server.
type Config struct {
	// Addr is the listen address, e.g. ":9090" or "127.0.0.1:0".
	Addr string
	// Pprof serves /debug/pprof. Off by default.
	Pprof bool
}

// Defaults fills the fields left unset.
func (c *Config) Defaults() {
	if c.Addr == "" {
		c.Addr = DefaultAddr
	}
}

// Flags registers --ops-addr and --enable-pprof; a preset Addr becomes the
// flag's default.
func (c *Config) Flags(fs *flag.FlagSet) {
	c.Defaults()
	fs.StringVar(&c.Addr, "ops-addr", c.Addr, "listen address for /metrics, /healthz, /readyz (and /debug/pprof with --enable-pprof)")
	fs.BoolVar(&c.Pprof, "enable-pprof", c.Pprof,
		"serve /debug/pprof on the ops port; off by default because the port is not authenticated and profiles expose memory contents")
}

// Server is the ops HTTP server.
type Server struct {
	cfg     Config
	handler http.Handler
}

// New builds the server. It registers the Go runtime and process collectors
// and ipledger_build_info (pkg/version) on reg (unless already there); ready reports readiness for /readyz (nil
// means always ready).
func New(cfg Config, reg *prometheus.Registry, ready func() error) *Server {
	// Registering fails only when the caller already registered these
	// collectors itself, which is fine.
	_ = reg.Register(collectors.NewGoCollector())
	_ = reg.Register(collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	_ = reg.Register(version.Get().Collector())
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		if ready != nil {
			if err := ready(); err != nil {
				w.WriteHeader(http.StatusServiceUnavailable)
				fmt.Fprintf(w, "not ready: %v\n", err)
				return
			}
		}
		fmt.Fprintln(w, "ok")
	})
	if cfg.Pprof {
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	}
	return &Server{cfg: cfg, handler: mux}
}

// Handler returns the server's HTTP handler (for tests and embedding).
func (s *Server) Handler() http.Handler { return s.handler }

// Serve listens on the configured address and serves until ctx ends, then
// shuts down gracefully. It returns nil after a clean shutdown.
func (s *Server) Serve(ctx context.Context) error {
	ln, err := net.Listen("tcp", s.cfg.Addr)
	if err != nil {
		return fmt.Errorf("ops server: listen on %s (--ops-addr): %w", s.cfg.Addr, err)
	}
	return s.ServeListener(ctx, ln)
}

// ServeListener is Serve on an existing listener, which it closes.
func (s *Server) ServeListener(ctx context.Context, ln net.Listener) error {
	srv := &http.Server{Handler: s.handler, ReadHeaderTimeout: 10 * time.Second}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return fmt.Errorf("ops server on %s: %w", ln.Addr(), err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), shutdownTimeout)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		_ = srv.Close()
	}
	if err := <-errc; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("ops server on %s: %w", ln.Addr(), err)
	}
	return nil
}
