package app

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	"github.com/ipledger/ipledger/lab/testenv"
	"github.com/ipledger/ipledger/pkg/grpcserver"
	watcherv1 "github.com/ipledger/ipledger/proto/ipledger/watcher/v1"
	watcherv1grpc "github.com/ipledger/ipledger/proto/ipledger/watcher/v1/watcherv1grpc"
	"github.com/ipledger/ipledger/services/watcher/internal/store"
)

func TestMain(m *testing.M) { testenv.Main(m) }

func testLogger(t testing.TB) *slog.Logger {
	if testing.Verbose() {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	}
	return slog.New(slog.DiscardHandler)
}

// startWatcher runs an in-process watcher on loopback until the test ends and
// waits until it serves.
func startWatcher(t *testing.T, env *testenv.Env, mod func(*Config)) (*Watcher, *prometheus.Registry) {
	t.Helper()
	return startWatcherAs(t, env, env.Config, mod)
}

// startWatcherAs is startWatcher with the API server credentials of rc.
func startWatcherAs(t *testing.T, env *testenv.Env, rc *rest.Config, mod func(*Config)) (*Watcher, *prometheus.Registry) {
	t.Helper()
	var cfg Config
	cfg.Defaults()
	cfg.Common.Namespace = testenv.SystemNamespace
	cfg.GRPC = grpcserver.Config{Addr: "127.0.0.1:0", Plaintext: true, ShutdownTimeout: time.Second}
	if mod != nil {
		mod(&cfg)
	}
	reg := prometheus.NewRegistry()
	w, err := New(cfg, rc, testLogger(t), reg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("watcher Run: %v", err)
		}
	})
	testenv.Eventually(t, 30*time.Second, func() error {
		if !w.Synced() {
			return fmt.Errorf("watcher informers not synced")
		}
		return nil
	})
	return w, reg
}

// subscriberToken is a token of a ServiceAccount bound to ipledger:snapshot-subscriber.
func subscriberToken(t *testing.T, env *testenv.Env) string {
	t.Helper()
	return env.TokenFile(t, testenv.SystemNamespace, "ipledger-ipam")
}

// dial opens a raw client connection with the token file (may be "").
func dial(t *testing.T, addr, tokenFile string) watcherv1grpc.WatcherServiceClient {
	t.Helper()
	return watcherv1grpc.NewWatcherServiceClient(testenv.Dial(t, addr, tokenFile))
}

// rawStream is a Watch stream read on a goroutine into a channel.
type rawStream struct {
	events chan *watcherv1.WatchResponse
	err    chan error
	cancel context.CancelFunc
}

func watch(t *testing.T, c watcherv1grpc.WatcherServiceClient, req *watcherv1.WatchRequest) *rawStream {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	s, err := c.Watch(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	r := &rawStream{events: make(chan *watcherv1.WatchResponse, 100000), err: make(chan error, 1), cancel: cancel}
	go func() {
		for {
			ev, err := s.Recv()
			if err != nil {
				r.err <- err
				return
			}
			r.events <- ev
		}
	}()
	return r
}

// next returns the next event that is not a HEARTBEAT.
func (r *rawStream) next(t *testing.T) *watcherv1.WatchResponse {
	t.Helper()
	timeout := time.After(30 * time.Second)
	for {
		select {
		case ev := <-r.events:
			if ev.GetType() != watcherv1.EventType_EVENT_TYPE_HEARTBEAT {
				return ev
			}
		case err := <-r.err:
			t.Fatalf("stream ended: %v", err)
		case <-timeout:
			t.Fatal("no event within 30s")
		}
	}
}

// untilSynced returns the snapshot UPSERTs and the SYNCED event.
func (r *rawStream) untilSynced(t *testing.T) ([]*watcherv1.WatchResponse, *watcherv1.WatchResponse) {
	t.Helper()
	var snap []*watcherv1.WatchResponse
	for {
		ev := r.next(t)
		if ev.GetType() == watcherv1.EventType_EVENT_TYPE_SYNCED {
			return snap, ev
		}
		if ev.GetType() != watcherv1.EventType_EVENT_TYPE_UPSERT {
			t.Fatalf("before SYNCED got %v", ev.GetType())
		}
		snap = append(snap, ev)
	}
}

func watchErr(t *testing.T, c watcherv1grpc.WatcherServiceClient, req *watcherv1.WatchRequest) codes.Code {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := c.Watch(ctx, req)
	if err == nil {
		_, err = s.Recv()
	}
	return status.Code(err)
}

func service(ns, name string, labels map[string]string) *corev1.Service {
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: labels},
		Spec:       corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 80, Protocol: corev1.ProtocolTCP}}},
	}
}

func nsObj(name string) *corev1.Namespace {
	return &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
}

func storeFilter(ns string) store.Filter {
	return store.Filter{Kinds: map[watcherv1.Kind]bool{watcherv1.Kind_KIND_POD: true}, Namespaces: map[string]bool{ns: true}}
}
