package opsserver

import (
	"context"
	"errors"
	"flag"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

func TestEndpoints(t *testing.T) {
	reg := prometheus.NewRegistry()
	c := prometheus.NewCounter(prometheus.CounterOpts{Name: "ipledger_test_things_total", Help: "Things."})
	reg.MustRegister(c)
	c.Inc()
	var notReady atomic.Bool
	notReady.Store(true)
	srv := New(Config{Pprof: true}, reg, func() error {
		if notReady.Load() {
			return errors.New("stream not synced")
		}
		return nil
	})

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.ServeListener(ctx, ln) }()
	base := "http://" + ln.Addr().String()

	get := func(path string) (int, string) {
		t.Helper()
		resp, err := http.Get(base + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	tests := []struct {
		path     string
		wantCode int
		wantBody string
	}{
		{"/healthz", 200, "ok"},
		{"/readyz", 503, "stream not synced"},
		{"/metrics", 200, "ipledger_test_things_total 1"},
		{"/metrics", 200, "go_goroutines"},
		{"/metrics", 200, "ipledger_build_info{goversion="},
		{"/debug/pprof/", 200, "goroutine"},
	}
	for _, tt := range tests {
		code, body := get(tt.path)
		if code != tt.wantCode || !strings.Contains(body, tt.wantBody) {
			t.Errorf("GET %s = %d %q, want %d containing %q", tt.path, code, body, tt.wantCode, tt.wantBody)
		}
	}
	notReady.Store(false)
	if code, _ := get("/readyz"); code != 200 {
		t.Errorf("GET /readyz when ready = %d, want 200", code)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Serve after cancel: %v", err)
	}
}

// TestPprofIsOffByDefault: the ops port is not authenticated, so profiles
// are served only when asked for.
func TestPprofIsOffByDefault(t *testing.T) {
	for _, on := range []bool{false, true} {
		rec := httptest.NewRecorder()
		New(Config{Pprof: on}, prometheus.NewRegistry(), nil).Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/debug/pprof/", nil))
		if want := map[bool]int{false: http.StatusNotFound, true: http.StatusOK}[on]; rec.Code != want {
			t.Errorf("Pprof %v: GET /debug/pprof/ = %d, want %d", on, rec.Code, want)
		}
	}
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	var c Config
	c.Flags(fs)
	if err := fs.Parse(nil); err != nil || c.Pprof {
		t.Fatalf("--enable-pprof defaults to %v (err %v), want false", c.Pprof, err)
	}
}

func TestServeListenError(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	srv := New(Config{Addr: ln.Addr().String()}, prometheus.NewRegistry(), nil)
	if err := srv.Serve(context.Background()); err == nil || !strings.Contains(err.Error(), "--ops-addr") {
		t.Fatalf("Serve on a busy address = %v, want an error naming --ops-addr", err)
	}
}
