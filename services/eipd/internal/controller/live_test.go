package controller

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/ipledger/ipledger/lab/testenv"
)

// noNodes is an API server that has no Node: every GET of one answers 404
// with the Status a kube-apiserver sends.
func noNodes(t *testing.T) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		name, ok := strings.CutPrefix(r.URL.Path, "/api/v1/nodes/")
		if r.Method != http.MethodGet || !ok {
			http.Error(w, "unexpected request "+r.Method+" "+r.URL.Path, http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusNotFound)
		fmt.Fprintf(w, `{"kind":"Status","apiVersion":"v1","status":"Failure","message":"nodes %q not found","reason":"NotFound","details":{"name":%q,"kind":"nodes"},"code":404}`, name, name)
	}))
	t.Cleanup(srv.Close)
	return srv
}

// gatedGets holds every GET of a Node until released, counting how many are
// in flight at once.
type gatedGets struct {
	rt      http.RoundTripper
	release chan struct{}

	mu            sync.Mutex
	inFlight, max int
}

func (g *gatedGets) RoundTrip(req *http.Request) (*http.Response, error) {
	if !strings.HasPrefix(req.URL.Path, "/api/v1/nodes/") {
		return g.rt.RoundTrip(req)
	}
	g.mu.Lock()
	g.inFlight++
	g.max = max(g.max, g.inFlight)
	g.mu.Unlock()
	<-g.release
	resp, err := g.rt.RoundTrip(req)
	g.mu.Lock()
	g.inFlight--
	g.mu.Unlock()
	return resp, err
}

func (g *gatedGets) counts() (inFlight, max int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.inFlight, g.max
}

// TestLiveNodesReadsInParallelWithinTheBound: confirming many Nodes sends
// their GETs side by side, never more than the bound at once. The API server
// is a stand-in (an HTTP server without Nodes): what is under test is the
// client side, over a real HTTP connection.
func TestLiveNodesReadsInParallelWithinTheBound(t *testing.T) {
	gate := &gatedGets{release: make(chan struct{})}
	cfg := &rest.Config{Host: noNodes(t).URL}
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper { gate.rt = rt; return gate })
	cfg.QPS, cfg.Burst = 1000, 1000
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	c, err := New(Config{ClusterID: "test"}, nil, nil, nil, kube, slog.New(slog.NewTextHandler(io.Discard, nil)), nil)
	if err != nil {
		t.Fatal(err)
	}
	const n, bound = 20, 4
	var names []string
	for i := range n {
		names = append(names, fmt.Sprintf("no-such-node-%d", i))
	}
	done := make(chan []liveNode)
	go func() { done <- c.liveNodes(context.Background(), names, bound) }()
	testenv.Eventually(t, 10*time.Second, func() error {
		if inFlight, _ := gate.counts(); inFlight != bound {
			return fmt.Errorf("%d GETs in flight, want %d side by side", inFlight, bound)
		}
		return nil
	})
	close(gate.release)
	got := <-done
	if _, most := gate.counts(); most != bound {
		t.Errorf("at most %d GETs in flight, want %d", most, bound)
	}
	for i, res := range got {
		if res.err != nil || res.exists {
			t.Errorf("%s: exists=%v err=%v, want absent", names[i], res.exists, res.err)
		}
	}
}
