// Package integration tests pkg/stream against real watcher processes and a
// real API server: what a consumer sees when it fails over to a replica that
// is behind.
package integration

import (
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ipledger/ipledger/lab/controlplane"
	"github.com/ipledger/ipledger/lab/testenv"
	"github.com/ipledger/ipledger/pkg/stream"
	watcherv1 "github.com/ipledger/ipledger/proto/ipledger/watcher/v1"
)

func TestMain(m *testing.M) { testenv.Main(m) }

const system = testenv.SystemNamespace

// startWatcher runs the real watcher binary on addr, talking to the API
// server at apiServer as the ipledger-watcher ServiceAccount.
func startWatcher(t *testing.T, env *testenv.Env, name, apiServer, addr string) *testenv.Process {
	t.Helper()
	token, err := env.ServiceAccountToken(context.Background(), system, "ipledger-watcher")
	if err != nil {
		t.Fatal(err)
	}
	kubeconfig := filepath.Join(t.TempDir(), name+".kubeconfig")
	if err := os.WriteFile(kubeconfig, []byte(controlplane.Kubeconfig(apiServer, token)), 0o600); err != nil {
		t.Fatal(err)
	}
	return testenv.StartProcess(t, name, env.Binary(t, "watcher"), nil,
		"--kubeconfig", kubeconfig, "--grpc-addr", addr, "--grpc-plaintext", "--ops-addr", testenv.FreeAddr(t),
		"--heartbeat-interval", "1s", "--log-format", "text")
}

func runClient(t *testing.T, cfg stream.Config, reg prometheus.Registerer) *stream.Client {
	t.Helper()
	c, err := stream.New(cfg, nil, reg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { c.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	wctx, wcancel := context.WithTimeout(ctx, 60*time.Second)
	defer wcancel()
	if err := c.WaitForSync(wctx); err != nil {
		t.Fatalf("stream never synced: %v", err)
	}
	return c
}

// testContext is the context of a test's API calls: it ends with the test,
// or a little before the test binary's -timeout would end it, so that a call
// that hangs fails with its own error and the cleanups still run. Not a fixed
// budget from the test's start: that would count the first build of the
// watcher binary (env.Binary, minutes on a cold cache beside the rest of
// `make test`), which no API call is waiting for. Each wait of the test has
// its own bound, on its own condition.
func testContext(t *testing.T) context.Context {
	ctx := t.Context()
	if d, ok := t.Deadline(); ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, d.Add(-min(time.Minute, time.Until(d)/4)))
		t.Cleanup(cancel)
	}
	return ctx
}

// versions is name -> resourceVersion of the Services of one namespace.
type versions map[string]string

func storeVersions(c *stream.Client, ns string) versions {
	out := versions{}
	for _, o := range c.Store().ListNamespace(watcherv1.Kind_KIND_SERVICE, ns) {
		out[o.GetMeta().GetName()] = o.GetMeta().GetResourceVersion()
	}
	return out
}

func waitVersions(t *testing.T, what string, c *stream.Client, ns string, want versions) {
	t.Helper()
	testenv.Eventually(t, 30*time.Second, func() error {
		if got := storeVersions(c, ns); !maps.Equal(got, want) {
			return fmt.Errorf("%s holds %v, want %v", what, got, want)
		}
		return nil
	})
}

// recorder logs the events a handler receives for one namespace.
type recorder struct {
	ns  string
	mu  sync.Mutex
	log []string
}

func (r *recorder) add(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.log = append(r.log, fmt.Sprintf(format, args...))
}

func (r *recorder) OnAdd(o *watcherv1.Object) {
	if o.GetMeta().GetNamespace() == r.ns {
		r.add("add %s@%s", o.GetMeta().GetName(), o.GetMeta().GetResourceVersion())
	}
}

func (r *recorder) OnUpdate(old, o *watcherv1.Object) {
	if o.GetMeta().GetNamespace() == r.ns {
		r.add("update %s@%s->%s", o.GetMeta().GetName(), old.GetMeta().GetResourceVersion(), o.GetMeta().GetResourceVersion())
	}
}

func (r *recorder) OnDelete(o *watcherv1.Object) {
	if o.GetMeta().GetNamespace() == r.ns {
		r.add("delete %s@%s", o.GetMeta().GetName(), o.GetMeta().GetResourceVersion())
	}
}

func (r *recorder) events() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.log)
}

func (r *recorder) reset() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.log = nil
}

// TestFailoverToLaggingReplicaNeverGoesBack: a consumer follows watcher A;
// watcher B stops hearing from the API server (its watch responses are held
// by a proxy) while a Service is updated, one created and one deleted. A
// dies; the consumer's only way forward is B's older snapshot. It must keep
// what it already saw: no older version of "kept", no delete of "born", no
// return of "gone" — and no event at all, since nothing changed in the
// world. Once B catches up, the consumer follows it as usual.
func TestFailoverToLaggingReplicaNeverGoesBack(t *testing.T) {
	env := testenv.Get(t)
	ctx := testContext(t)
	ns := env.Namespace(t, nil)
	services := env.Client.CoreV1().Services(ns)
	create := func(name string) *corev1.Service {
		t.Helper()
		s, err := services.Create(ctx, &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec:       corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 80, Protocol: corev1.ProtocolTCP}}},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	kept, gone := create("kept"), create("gone")

	addrA, addrB := testenv.FreeAddr(t), testenv.FreeAddr(t)
	a := startWatcher(t, env, "watcher-a", env.CP.APIServerURL, addrA)
	token := env.TokenFile(t, system, "ipledger-ipam")
	// The grace is longer than the test can last: what is under test is
	// what the client does while a replica is behind, within the grace (its
	// expiry is lag_test.go's, on a fake clock). With the default minute, a
	// slow enough machine between A's delete of "gone" and B's snapshot, or
	// between the hold on "born" and B's catching up, would turn "behind"
	// into "believed".
	cfg := stream.Config{Plaintext: true, TokenFile: token, Kinds: []watcherv1.Kind{watcherv1.Kind_KIND_SERVICE},
		Namespaces: []string{ns}, MinBackoff: 20 * time.Millisecond, MaxBackoff: 200 * time.Millisecond,
		LagGrace: time.Hour}
	// B is not listening yet: round robin puts the consumer on A.
	consumerCfg := cfg
	consumerCfg.Target = "static:///" + addrA + "," + addrB
	reg := prometheus.NewRegistry()
	consumer := runClient(t, consumerCfg, reg)
	waitVersions(t, "consumer", consumer, ns, versions{"kept": kept.ResourceVersion, "gone": gone.ResourceVersion})

	gate := startWatchGate(t, env.CP.APIServerURL)
	startWatcher(t, env, "watcher-b", gate.url, addrB)
	probeCfg := cfg
	probeCfg.Target = "static:///" + addrB
	probe := runClient(t, probeCfg, nil)
	waitVersions(t, "watcher B", probe, ns, versions{"kept": kept.ResourceVersion, "gone": gone.ResourceVersion})

	gate.Pause()
	kept.Labels = map[string]string{"step": "2"}
	kept2, err := services.Update(ctx, kept, metav1.UpdateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	born := create("born")
	if err := services.Delete(ctx, "gone", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	now := versions{"kept": kept2.ResourceVersion, "born": born.ResourceVersion}
	waitVersions(t, "consumer (on A)", consumer, ns, now)
	// B cannot have heard of any of it: the proxy holds its watch events.
	if got, stale := storeVersions(probe, ns), (versions{"kept": kept.ResourceVersion, "gone": gone.ResourceVersion}); !maps.Equal(got, stale) {
		t.Fatalf("watcher B is not behind: it shows %v, want %v", got, stale)
	}

	rec := &recorder{ns: ns}
	consumer.AddHandler(rec)
	rec.reset() // forget the replay
	a.Kill()
	testenv.Eventually(t, 30*time.Second, func() error {
		if n := testenv.MetricValue(t, reg, "ipledger_stream_syncs_total", map[string]string{"resumed": "false"}); n < 2 {
			return fmt.Errorf("consumer took %v snapshots, want a second one from watcher B", n)
		}
		return nil
	})
	if got := storeVersions(consumer, ns); !maps.Equal(got, now) {
		t.Errorf("after failover to the lagging replica the consumer holds %v, want %v (what it had already seen)", got, now)
	}
	if ev := rec.events(); len(ev) != 0 {
		t.Errorf("failover to the lagging replica told handlers %q, want nothing (the world did not change)", ev)
	}
	// Why: B's kept and gone were older than what the consumer had seen, and
	// B could not show it had heard of born.
	if n := testenv.MetricValue(t, reg, "ipledger_stream_stale_upserts_dropped_total", nil); n != 2 {
		t.Errorf("%v stale UPSERTs dropped, want 2 (kept's old version, gone)", n)
	}
	if n := testenv.MetricValue(t, reg, "ipledger_stream_deletes_held_back", nil); n != 1 {
		t.Errorf("%v deletions held back, want 1 (born)", n)
	}

	// B catches up; the consumer follows it and is told nothing new.
	gate.Resume()
	waitVersions(t, "watcher B", probe, ns, now)
	marker := create("marker")
	now["marker"] = marker.ResourceVersion
	waitVersions(t, "consumer (on B)", consumer, ns, now)
	if ev, want := rec.events(), []string{"add marker@" + marker.ResourceVersion}; !slices.Equal(ev, want) {
		t.Errorf("once B caught up handlers were told %q, want %q", ev, want)
	}
	if n := testenv.MetricValue(t, reg, "ipledger_stream_deletes_held_back", nil); n != 0 {
		t.Errorf("%v deletions still held back once B caught up, want 0", n)
	}
	if n := testenv.MetricValue(t, reg, "ipledger_stream_deletes_held_back_expired_total", nil); n != 0 {
		t.Errorf("%v held-back deletions expired, want 0 (B showed born before the grace)", n)
	}
}
