// Package cmdmain owns what every ipledger binary does the same way before
// and after its real work: the common flags (kubeconfig, logging, namespace),
// the process logger, the Kubernetes client configuration, the signal
// context, and the one place the process exits.
package cmdmain

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/util/flowcontrol"
	"k8s.io/klog/v2"

	"github.com/ipledger/ipledger/pkg/install"
	"github.com/ipledger/ipledger/pkg/version"
)

// DefaultKubeAPIQPS and DefaultKubeAPIBurst are the Kubernetes client rate
// limits of a binary that presets none. client-go's own 5/10 is far too low
// for a controller that writes thousands of objects: each binary chooses
// deliberately and presets its own before Flags.
const (
	DefaultKubeAPIQPS   = 50
	DefaultKubeAPIBurst = 100
)

// Common holds the flags every binary shares.
type Common struct {
	// Kubeconfig is a kubeconfig path; empty means in-cluster configuration.
	Kubeconfig string
	// LogLevel is one of debug, info, warn, error.
	LogLevel string
	// LogFormat is json or text.
	LogFormat string
	// Namespace is ipledger's own namespace (Leases, ledger ConfigMaps).
	Namespace string
	// KubeAPIQPS and KubeAPIBurst are the client-side rate limits of the
	// Kubernetes clients built from RESTConfig.
	KubeAPIQPS   float64
	KubeAPIBurst int

	logger *slog.Logger
}

// Defaults fills the fields left unset; values already set are kept, so a
// binary presets its own defaults (such as its rate limits) before Flags.
func (c *Common) Defaults() {
	c.LogLevel = orDefault(c.LogLevel, "info")
	c.LogFormat = orDefault(c.LogFormat, "json")
	c.Namespace = orDefault(c.Namespace, install.DefaultNamespace)
	if c.KubeAPIQPS == 0 {
		c.KubeAPIQPS = DefaultKubeAPIQPS
	}
	if c.KubeAPIBurst == 0 {
		c.KubeAPIBurst = DefaultKubeAPIBurst
	}
}

// Flags registers --kubeconfig, --kube-api-qps, --kube-api-burst,
// --log-level, --log-format and --namespace, with the current values (after
// Defaults) as their defaults. --kubeconfig defaults to $KUBECONFIG so that
// a local process finds the cluster; in a Pod neither is set and the
// in-cluster config is used.
func (c *Common) Flags(fs *flag.FlagSet) {
	c.Defaults()
	fs.StringVar(&c.Kubeconfig, "kubeconfig", orDefault(c.Kubeconfig, os.Getenv("KUBECONFIG")),
		"path to a kubeconfig; empty uses the in-cluster ServiceAccount (default $KUBECONFIG)")
	fs.Float64Var(&c.KubeAPIQPS, "kube-api-qps", c.KubeAPIQPS,
		"client-side rate limit (queries per second) of the Kubernetes clients; client-go's default of 5 would throttle the writes of a cold start")
	fs.IntVar(&c.KubeAPIBurst, "kube-api-burst", c.KubeAPIBurst, "client-side burst of the Kubernetes clients (client-go's default is 10)")
	fs.Func("log-level", "log level: debug, info, warn or error (default "+c.LogLevel+")", func(s string) error {
		if _, err := ParseLevel(s); err != nil {
			return err
		}
		c.LogLevel = s
		return nil
	})
	fs.Func("log-format", "log format: json or text (default "+c.LogFormat+")", func(s string) error {
		if s != "json" && s != "text" {
			return fmt.Errorf("log format %q: want json or text", s)
		}
		c.LogFormat = s
		return nil
	})
	fs.StringVar(&c.Namespace, "namespace", c.Namespace, "ipledger's own namespace (Leases, ledger)")
}

// ParseLevel parses a --log-level value.
func ParseLevel(s string) (slog.Level, error) {
	switch strings.ToLower(s) {
	case "debug":
		return slog.LevelDebug, nil
	case "", "info":
		return slog.LevelInfo, nil
	case "warn", "warning":
		return slog.LevelWarn, nil
	case "error":
		return slog.LevelError, nil
	}
	return 0, fmt.Errorf("log level %q: want debug, info, warn or error", s)
}

// Logger returns the process logger (built once, on stderr). It also becomes
// slog's default and klog's backend, so client-go's own messages (leader
// election, reflectors) come out in the same format. Its first line names
// the binary and the release it was built from (pkg/version).
func (c *Common) Logger() *slog.Logger {
	if c.logger == nil {
		c.logger = NewLogger(os.Stderr, c.LogLevel, c.LogFormat)
		slog.SetDefault(c.logger)
		klog.SetSlogLogger(c.logger)
		v := version.Get()
		c.logger.Info("Starting "+binary+" "+v.Version, append([]any{"binary", binary}, v.LogAttrs()...)...)
	}
	return c.logger
}

// NewLogger builds a logger writing to w; an invalid level means info and
// any format other than text means json.
func NewLogger(w io.Writer, level, format string) *slog.Logger {
	lvl, err := ParseLevel(level)
	if err != nil {
		lvl = slog.LevelInfo
	}
	opts := &slog.HandlerOptions{Level: lvl}
	if format == "text" {
		return slog.New(slog.NewTextHandler(w, opts))
	}
	return slog.New(slog.NewJSONHandler(w, opts))
}

// RESTConfig returns the Kubernetes client configuration with the
// client-side rate limits KubeAPIQPS and KubeAPIBurst (the defaults of
// Defaults when unset).
func (c *Common) RESTConfig() (*rest.Config, error) {
	var (
		cfg *rest.Config
		err error
	)
	if c.Kubeconfig == "" {
		cfg, err = rest.InClusterConfig()
		if err != nil {
			return nil, fmt.Errorf("in-cluster config (set --kubeconfig when running outside a Pod): %w", err)
		}
	} else {
		cfg, err = clientcmd.BuildConfigFromFlags("", c.Kubeconfig)
		if err != nil {
			return nil, fmt.Errorf("kubeconfig %s: %w", c.Kubeconfig, err)
		}
	}
	d := *c
	d.Defaults()
	cfg.QPS = float32(d.KubeAPIQPS)
	cfg.Burst = d.KubeAPIBurst
	return cfg, nil
}

// ClientConfigs derives the configs of a process's two clients from base,
// which it leaves as it is. One budget for the process: the typed client
// and the dynamic one draw from the same token bucket, where each would
// otherwise build its own. The typed client speaks protobuf: the API server
// stores built-in kinds so, and decoding each write from JSON and encoding
// the answer back was most of its cost for endpoints' slices and ipam's
// ledger shards. Custom resources (IPPools, ExternalWorkloads) have no
// protobuf form, so the dynamic client keeps JSON.
func ClientConfigs(base *rest.Config) (typed, dyn *rest.Config) {
	typed, dyn = rest.CopyConfig(base), rest.CopyConfig(base)
	limiter := flowcontrol.NewTokenBucketRateLimiter(base.QPS, base.Burst)
	typed.RateLimiter, dyn.RateLimiter = limiter, limiter
	typed.ContentType = runtime.ContentTypeProtobuf
	typed.AcceptContentTypes = runtime.ContentTypeProtobuf + "," + runtime.ContentTypeJSON
	return typed, dyn
}

// binary is the name Main was given: the process's one binary, named in
// the logger's first line.
var binary = "ipledger"

// Main parses os.Args[1:] into fs (with --version added), runs run with a
// context cancelled on SIGINT or SIGTERM, and exits: 0 when run returns nil
// (or on -h, or --version, which prints the release and revision the binary
// was built from), 2 on a flag error, 1 when run fails. A second signal kills
// the process at once. It is the only place an ipledger binary exits
// (besides pkg/leader's stop bound).
func Main(name string, fs *flag.FlagSet, run func(ctx context.Context) error) {
	os.Exit(main(name, fs, os.Args[1:], os.Stdout, run))
}

func main(name string, fs *flag.FlagSet, args []string, stdout io.Writer, run func(ctx context.Context) error) int {
	binary = name
	showVersion := fs.Bool("version", false, "print the release (VERSION) and git revision this binary was built from, and exit")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		// The FlagSet has already printed the error and usage.
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "%s: unexpected arguments %q\n", name, fs.Args())
		return 2
	}
	if *showVersion {
		fmt.Fprintln(stdout, name, version.Get())
		return 0
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	go func() {
		<-ctx.Done()
		// Restore default handling: a second signal terminates immediately.
		stop()
	}()
	if err := run(ctx); err != nil && !(errors.Is(err, context.Canceled) && ctx.Err() != nil) {
		slog.Default().Error("Exiting", "binary", name, "err", err)
		return 1
	}
	return 0
}

func orDefault(v, def string) string {
	if v != "" {
		return v
	}
	return def
}
