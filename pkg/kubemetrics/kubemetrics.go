// Package kubemetrics exports client-go's REST client metrics — requests by
// result, their latency, retries, and the time spent waiting on the
// client-side rate limiter (--kube-api-qps, --kube-api-burst) — under the
// names Kubernetes' own components use (rest_client_*), so that stock
// dashboards and alerts for controllers read ipledger's binaries too.
//
// client-go reports through package-level hooks that can be set once per
// process (k8s.io/client-go/tools/metrics.Register), so the collectors here
// are the process's one set; Register adds them to a binary's injected
// registry (a collector may sit in several registries, as tests that build
// more than one binary in a process do).
package kubemetrics

import (
	"context"
	"net/url"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	clientmetrics "k8s.io/client-go/tools/metrics"

	"github.com/ipledger/ipledger/pkg/promreg"
)

// buckets are component-base's for the REST client (seconds), so that
// ipledger's histograms aggregate with the control plane's.
var buckets = []float64{0.005, 0.025, 0.1, 0.25, 0.5, 1, 2, 4, 8, 15, 30, 60}

var (
	requests = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "rest_client_requests_total",
		Help: "Requests to the Kubernetes API, by HTTP status code (or <error>), method and host.",
	}, []string{"code", "method", "host"})
	requestDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "rest_client_request_duration_seconds",
		Help:    "Latency of requests to the Kubernetes API, by verb and host, rate limiter wait excluded.",
		Buckets: buckets,
	}, []string{"verb", "host"})
	rateLimiterDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "rest_client_rate_limiter_duration_seconds",
		Help:    "Time requests to the Kubernetes API waited on the client-side rate limiter (--kube-api-qps, --kube-api-burst), by verb and host.",
		Buckets: buckets,
	}, []string{"verb", "host"})
	retries = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "rest_client_request_retries_total",
		Help: "Requests to the Kubernetes API retried, by HTTP status code (or <error>), verb and host.",
	}, []string{"code", "verb", "host"})
)

var hookOnce sync.Once

// Register points client-go's metric hooks at this package's collectors
// (once per process) and registers them on reg. Requests made before the
// first Register are not counted, so a binary calls it before its clients'
// first request. Registering on a registry that already holds them is a
// no-op (promreg.Reuse).
func Register(reg prometheus.Registerer) {
	hookOnce.Do(func() {
		clientmetrics.Register(clientmetrics.RegisterOpts{
			RequestResult:      result{requests},
			RequestLatency:     latency{requestDuration},
			RateLimiterLatency: latency{rateLimiterDuration},
			RequestRetry:       retry{retries},
		})
	})
	for _, c := range []prometheus.Collector{requests, requestDuration, rateLimiterDuration, retries} {
		promreg.Reuse(reg, c)
	}
}

type result struct{ v *prometheus.CounterVec }

func (r result) Increment(_ context.Context, code, method, host string) {
	r.v.WithLabelValues(code, method, host).Inc()
}

type retry struct{ v *prometheus.CounterVec }

func (r retry) IncrementRetry(_ context.Context, code, verb, host string) {
	r.v.WithLabelValues(code, verb, host).Inc()
}

// latency labels by the URL's host only: its path (namespace, name) would
// make a series per object.
type latency struct{ v *prometheus.HistogramVec }

func (l latency) Observe(_ context.Context, verb string, u url.URL, d time.Duration) {
	l.v.WithLabelValues(verb, u.Host).Observe(d.Seconds())
}
