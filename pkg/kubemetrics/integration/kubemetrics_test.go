// Package integration checks, against a real API server, that client-go's
// requests and its rate limiter's waits reach a registry kubemetrics
// registered.
package integration

import (
	"context"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/ipledger/ipledger/lab/testenv"
	"github.com/ipledger/ipledger/pkg/kubemetrics"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// TestRequestsAndThrottlingAreCounted makes requests through a client whose
// rate limit (one request a second, no burst beyond one) makes the second
// wait, as --kube-api-qps does under load, and finds both the requests and
// the wait in the registry.
func TestRequestsAndThrottlingAreCounted(t *testing.T) {
	env := testenv.Get(t)
	reg := prometheus.NewRegistry()
	kubemetrics.Register(reg)
	cfg := rest.CopyConfig(env.Config)
	cfg.QPS, cfg.Burst, cfg.RateLimiter = 1, 1, nil
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	before := testenv.MetricValue(t, reg, "rest_client_requests_total", map[string]string{"code": "200", "method": "GET"})
	for range 2 {
		if _, err := client.CoreV1().Namespaces().Get(context.Background(), "default", metav1.GetOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if got := testenv.MetricValue(t, reg, "rest_client_requests_total", map[string]string{"code": "200", "method": "GET"}) - before; got < 2 {
		t.Errorf("rest_client_requests_total{code=200,method=GET} rose by %v after two GETs, want at least 2", got)
	}
	count, sum := histogram(t, reg, "rest_client_rate_limiter_duration_seconds", "GET")
	if count < 2 {
		t.Errorf("rest_client_rate_limiter_duration_seconds{verb=GET} counted %d waits, want at least 2", count)
	}
	if sum <= 0 {
		t.Errorf("rest_client_rate_limiter_duration_seconds{verb=GET} sums %vs: the second GET under a limit of 1/s did not wait", sum)
	}
	if count, _ := histogram(t, reg, "rest_client_request_duration_seconds", "GET"); count < 2 {
		t.Errorf("rest_client_request_duration_seconds{verb=GET} counted %d requests, want at least 2", count)
	}
}

// histogram is the sample count and sum of the series of name with that
// verb.
func histogram(t *testing.T, reg prometheus.Gatherer, name, verb string) (uint64, float64) {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var count uint64
	var sum float64
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if lp.GetName() == "verb" && lp.GetValue() == verb {
					count += m.GetHistogram().GetSampleCount()
					sum += m.GetHistogram().GetSampleSum()
				}
			}
		}
	}
	return count, sum
}
