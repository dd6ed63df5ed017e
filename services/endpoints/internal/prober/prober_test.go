package prober

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/protobuf/proto"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/tools/record"

	"github.com/ipledger/ipledger/lab/testenv"
	"github.com/ipledger/ipledger/pkg/convert"
	watcherv1 "github.com/ipledger/ipledger/proto/ipledger/watcher/v1"
	"github.com/ipledger/ipledger/services/endpoints/internal/probepolicy"
	"github.com/ipledger/ipledger/services/endpoints/internal/prober/probetest"
	"github.com/ipledger/ipledger/services/endpoints/internal/readiness"
)

// unit is one "second" of a probe spec in these tests: periods of 1 are
// 100ms, so a threshold of 3 is reached in a few hundred milliseconds.
const unit = 100 * time.Millisecond

// written is one status patch the prober sent.
type written struct {
	key             string
	resourceVersion string // the precondition the patch carried
	conditions      []metav1.Condition
	failuresBefore  float64 // failed probes counted when the patch was sent
}

// fakeWriter records status patches and, like the watcher stream, shows
// each accepted one back to the prober (echo), unless told not to.
type fakeWriter struct {
	p         func() *Prober
	m         *Metrics
	noEcho    bool
	conflicts atomic.Int32 // answer this many patches with a conflict first

	mu      sync.Mutex
	rv      int
	objs    map[string]*watcherv1.Object
	patches []written
}

func (w *fakeWriter) PatchStatus(ctx context.Context, ns, name string, patch []byte) (string, error) {
	if err := ctx.Err(); err != nil {
		return "", err
	}
	var body struct {
		Metadata struct {
			ResourceVersion string `json:"resourceVersion"`
		} `json:"metadata"`
		Status struct {
			Conditions []metav1.Condition `json:"conditions"`
		} `json:"status"`
	}
	if err := json.Unmarshal(patch, &body); err != nil {
		return "", err
	}
	key := ns + "/" + name
	w.mu.Lock()
	w.patches = append(w.patches, written{key: key, resourceVersion: body.Metadata.ResourceVersion, conditions: body.Status.Conditions,
		failuresBefore: testutil.ToFloat64(w.m.Probes.WithLabelValues(resultFailure))})
	cur := w.objs[key]
	if cur == nil || cur.GetMeta().GetResourceVersion() != body.Metadata.ResourceVersion {
		w.mu.Unlock()
		return "", apierrors.NewConflict(schema.GroupResource{Group: "ipledger.io", Resource: "externalworkloads"}, name, fmt.Errorf("resourceVersion"))
	}
	if w.conflicts.Load() > 0 {
		w.conflicts.Add(-1)
		w.mu.Unlock()
		return "", apierrors.NewConflict(schema.GroupResource{Group: "ipledger.io", Resource: "externalworkloads"}, name, fmt.Errorf("injected"))
	}
	next := proto.Clone(cur).(*watcherv1.Object)
	w.rv++
	next.Meta.ResourceVersion = strconv.Itoa(w.rv)
	next.GetExternalWorkload().Conditions = convert.Conditions(body.Status.Conditions)
	w.objs[key] = next
	w.mu.Unlock()
	if !w.noEcho {
		w.p().Update(next)
	}
	return next.Meta.ResourceVersion, nil
}

// show makes o the current object, as the API server and the stream have it.
func (w *fakeWriter) show(o *watcherv1.Object) *watcherv1.Object {
	w.mu.Lock()
	w.rv++
	o = proto.Clone(o).(*watcherv1.Object)
	o.Meta.ResourceVersion = strconv.Itoa(w.rv)
	w.objs[o.Meta.Namespace+"/"+o.Meta.Name] = o
	w.mu.Unlock()
	w.p().Update(o)
	return o
}

func (w *fakeWriter) written() []written {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]written(nil), w.patches...)
}

type harness struct {
	p      *Prober
	w      *fakeWriter
	m      *Metrics
	cancel context.CancelFunc
	dials  atomic.Int64 // probe connections attempted
}

func newHarness(t *testing.T, concurrency int) *harness {
	t.Helper()
	return newHarnessDial(t, concurrency, probetest.LoopbackDial)
}

// newHarnessDial is newHarness whose probes connect through next.
func newHarnessDial(t *testing.T, concurrency int, next func(ctx context.Context, network, address string) (net.Conn, error)) *harness {
	t.Helper()
	m := testMetrics(t)
	h := &harness{m: m}
	h.w = &fakeWriter{p: func() *Prober { return h.p }, m: m, objs: map[string]*watcherv1.Object{}}
	ctx, cancel := context.WithCancel(context.Background())
	h.cancel = cancel
	dial := func(ctx context.Context, network, address string) (net.Conn, error) {
		h.dials.Add(1)
		return next(ctx, network, address)
	}
	h.p = New(ctx, Config{Concurrency: concurrency, Dial: dial}, h.w, m, slog.New(slog.NewTextHandler(io.Discard, nil)))
	h.p.unit = unit
	t.Cleanup(func() { h.p.Stop(); cancel() })
	return h
}

func (h *harness) probes(result string) float64 {
	return testutil.ToFloat64(h.m.Probes.WithLabelValues(result))
}

func tcpProbe(port int) *watcherv1.ReadinessProbe {
	return &watcherv1.ReadinessProbe{Action: &watcherv1.ReadinessProbe_TcpSocket{TcpSocket: &watcherv1.TCPSocketAction{Port: int32(port)}},
		PeriodSeconds: 1, TimeoutSeconds: 10, SuccessThreshold: 1, FailureThreshold: 3}
}

func httpProbe(port int, path string) *watcherv1.ReadinessProbe {
	return &watcherv1.ReadinessProbe{Action: &watcherv1.ReadinessProbe_HttpGet{HttpGet: &watcherv1.HTTPGetAction{Port: int32(port), Path: path, Scheme: "HTTP"}},
		PeriodSeconds: 1, TimeoutSeconds: 10, SuccessThreshold: 1, FailureThreshold: 3}
}

func workload(name string, probe *watcherv1.ReadinessProbe, ips ...string) *watcherv1.Object {
	return &watcherv1.Object{
		Kind: watcherv1.Kind_KIND_EXTERNAL_WORKLOAD,
		Meta: &watcherv1.ObjectMeta{Namespace: "ns", Name: name, Uid: "uid-" + name, Generation: 1,
			CreationTimestamp: time.Now().Add(-time.Hour).UnixNano()},
		Body: &watcherv1.Object_ExternalWorkload{ExternalWorkload: &watcherv1.ExternalWorkload{WorkloadIps: ips, ReadinessProbe: probe}},
	}
}

// waitWrites waits until n patches were sent and returns them.
func (h *harness) waitWrites(t *testing.T, n int) []written {
	t.Helper()
	var got []written
	testenv.Eventually(t, 20*time.Second, func() error {
		if got = h.w.written(); len(got) < n {
			return fmt.Errorf("%d status patches, want %d", len(got), n)
		}
		return nil
	})
	return got
}

// waitProbes waits until at least n more probes (any result) ran.
func (h *harness) waitProbes(t *testing.T, n float64) {
	t.Helper()
	start := h.probes(resultSuccess) + h.probes(resultFailure)
	testenv.Eventually(t, 20*time.Second, func() error {
		if done := h.probes(resultSuccess) + h.probes(resultFailure) - start; done < n {
			return fmt.Errorf("%v of %v probes", done, n)
		}
		return nil
	})
}

func ready(t *testing.T, w written) metav1.Condition {
	t.Helper()
	for _, c := range w.conditions {
		if c.Type == readiness.ConditionReady {
			return c
		}
	}
	t.Fatalf("patch of %s has no Ready condition: %+v", w.key, w.conditions)
	return metav1.Condition{}
}

func TestTCPProbeReadyThenNotReady(t *testing.T) {
	h := newHarness(t, 10)
	l := probetest.Listen(t)
	h.w.show(workload("vm", tcpProbe(l.Port()), "192.0.2.1"))

	got := h.waitWrites(t, 1)
	c := ready(t, got[0])
	if c.Status != metav1.ConditionTrue || c.Reason != readiness.ReasonProbeSucceeded || c.ObservedGeneration != 1 ||
		!strings.Contains(c.Message, fmt.Sprintf("192.0.2.1:%d", l.Port())) {
		t.Fatalf("first write %+v, want Ready=True naming the address", c)
	}
	if got[0].resourceVersion == "" {
		t.Fatalf("the status patch carries no resourceVersion precondition")
	}

	// Steady state: probes go on, nothing is written.
	h.waitProbes(t, 5)
	if n := len(h.w.written()); n != 1 {
		t.Fatalf("%d writes while the workload stayed ready, want 1", n)
	}

	l.Close()
	got = h.waitWrites(t, 2)
	c = ready(t, got[1])
	if c.Status != metav1.ConditionFalse || c.Reason != readiness.ReasonProbeFailed ||
		!strings.Contains(c.Message, "connection refused") || !strings.Contains(c.Message, "3 consecutive failures") {
		t.Fatalf("second write %+v, want Ready=False saying why", c)
	}
	if got[1].failuresBefore < 3 {
		t.Fatalf("Ready=False written after %v failed probes, want failureThreshold (3)", got[1].failuresBefore)
	}
	h.waitProbes(t, 3)
	if n := len(h.w.written()); n != 2 {
		t.Fatalf("%d writes while the workload stayed not ready, want 2", n)
	}
}

func TestHTTPProbe(t *testing.T) {
	h := newHarness(t, 10)
	var code atomic.Int32
	code.Store(http.StatusOK)
	var gotPath, gotAgent atomic.Value
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		gotPath.Store(r.URL.RequestURI())
		gotAgent.Store(r.UserAgent())
		w.WriteHeader(int(code.Load()))
	}))
	t.Cleanup(srv.Close)
	port := srv.Listener.Addr().(*net.TCPAddr).Port
	h.w.show(workload("vm", httpProbe(port, "/healthz?deep=1"), "192.0.2.1"))

	c := ready(t, h.waitWrites(t, 1)[0])
	want := fmt.Sprintf("HTTP probe GET http://192.0.2.1:%d/healthz?deep=1: 200 OK", port)
	if c.Status != metav1.ConditionTrue || c.Message != want {
		t.Fatalf("%+v, want True with message %q", c, want)
	}
	if gotPath.Load() != "/healthz?deep=1" || !strings.HasPrefix(gotAgent.Load().(string), "ipledger-probe/") {
		t.Fatalf("request %v with User-Agent %v", gotPath.Load(), gotAgent.Load())
	}

	// A redirect is not followed and counts as success, as for the kubelet.
	code.Store(http.StatusFound)
	h.waitProbes(t, 3)
	if n := len(h.w.written()); n != 1 {
		t.Fatalf("a 302 changed the condition (%d writes)", n)
	}

	code.Store(http.StatusServiceUnavailable)
	c = ready(t, h.waitWrites(t, 2)[1])
	if c.Status != metav1.ConditionFalse || !strings.Contains(c.Message, "503 Service Unavailable (3 consecutive failures)") {
		t.Fatalf("%+v, want False naming the 503", c)
	}
}

func TestHTTPProbeTimeout(t *testing.T) {
	h := newHarness(t, 10)
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(func() { close(release); srv.Close() })
	probe := httpProbe(srv.Listener.Addr().(*net.TCPAddr).Port, "/")
	probe.TimeoutSeconds, probe.FailureThreshold = 1, 1
	h.w.show(workload("vm", probe, "192.0.2.1"))
	c := ready(t, h.waitWrites(t, 1)[0])
	if c.Status != metav1.ConditionFalse || !strings.Contains(c.Message, "timed out after 100ms") {
		t.Fatalf("%+v, want False saying the probe timed out", c)
	}
}

// A workload with two addresses is Ready only when both pass; the message
// names the one that fails.
func TestEveryAddressMustPass(t *testing.T) {
	h := newHarness(t, 10)
	l := probetest.Listen(t) // on 127.0.0.1 only: 192.0.2.2, sent to 127.0.0.2, is refused
	probe := tcpProbe(l.Port())
	probe.FailureThreshold = 1
	h.w.show(workload("vm", probe, "192.0.2.1", "192.0.2.2"))
	c := ready(t, h.waitWrites(t, 1)[0])
	bad := fmt.Sprintf("192.0.2.2:%d", l.Port())
	if c.Status != metav1.ConditionFalse || !strings.Contains(c.Message, bad) || strings.Contains(c.Message, fmt.Sprintf("192.0.2.1:%d", l.Port())) {
		t.Fatalf("%+v, want False naming only %s", c, bad)
	}
	l.WaitAccepted(t, 1) // 192.0.2.1 was probed
}

// Probes in flight never exceed the concurrency, over all workloads. The
// workloads are in namespaces of their own: one namespace alone keeps a
// slot free for the others (probeslots), so only several reach the bound.
func TestConcurrencyIsBounded(t *testing.T) {
	h := newHarness(t, 3)
	var inflight, peak atomic.Int32
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := inflight.Add(1)
		defer inflight.Add(-1)
		for {
			p := peak.Load()
			if n <= p || peak.CompareAndSwap(p, n) {
				break
			}
		}
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(srv.Close)
	port := srv.Listener.Addr().(*net.TCPAddr).Port
	for i := range 10 {
		o := workload(fmt.Sprintf("vm-%d", i), httpProbe(port, "/"), "192.0.2.1")
		o.Meta.Namespace = fmt.Sprintf("ns-%d", i%5)
		h.w.show(o)
	}
	testenv.Eventually(t, 20*time.Second, func() error {
		if n := inflight.Load(); n != 3 {
			return fmt.Errorf("%d probes in flight, want 3 (the bound) reached", n)
		}
		if w := testutil.CollectAndCount(h.m.SlotWait); w == 0 {
			return fmt.Errorf("no probe waited for a slot yet")
		}
		return nil
	})
	close(release)
	h.waitProbes(t, 20)
	if p := peak.Load(); p > 3 {
		t.Fatalf("%d probes in flight at once, want at most 3", p)
	}
}

// One probe per workload per period, however often the stream shows it.
func TestOneProbePerPeriod(t *testing.T) {
	h := newHarness(t, 10)
	l := probetest.Listen(t)
	o := h.w.show(workload("vm", tcpProbe(l.Port()), "192.0.2.1"))
	h.waitWrites(t, 1)
	start := l.Count()
	// Updates that do not change the probe (labels, say, or other
	// Services' interest) neither restart nor add probes.
	for range 50 {
		o = proto.Clone(o).(*watcherv1.Object)
		o.Meta.Labels = map[string]string{"touched": strconv.Itoa(int(time.Now().UnixNano()))}
		o = h.w.show(o)
	}
	h.waitProbes(t, 10)
	// Counted, not spaced: the probe's ticker keeps one tick while the
	// machine stalls the loop, so two probes may come close together, but
	// never more than one a period over the whole run. A restart per update
	// would probe at once, 50 times.
	times := l.Accepted()[start:]
	span := times[len(times)-1].Sub(times[0])
	if most := int(span/unit) + 2; len(times) > most {
		t.Fatalf("%d probes in %s, want at most %d (one a period of %s, and a tick kept through a stall)", len(times), span, most, unit)
	}
}

// Stop ends every probe: nothing connects and nothing is written after it
// returns, and updates after it start nothing.
func TestStopEndsProbes(t *testing.T) {
	h := newHarness(t, 10)
	l := probetest.Listen(t)
	h.w.show(workload("vm", tcpProbe(l.Port()), "192.0.2.1"))
	h.waitWrites(t, 1)
	if v := testutil.ToFloat64(h.m.Workloads); v != 1 {
		t.Fatalf("probed workloads gauge %v, want 1", v)
	}
	h.p.Stop()
	if n := testutil.CollectAndCount(h.m.Workloads); n != 0 {
		t.Fatalf("probed workloads still exported after the term ended")
	}
	// Stop waited for every probe goroutine: none is left to probe or write.
	if n := h.p.running.Load(); n != 0 {
		t.Fatalf("%d probe goroutines still running after Stop", n)
	}
	// Dials, not the listener's accepts: an accept of a probe dialed before
	// Stop may still be on its way.
	dials, writes := h.dials.Load(), len(h.w.written())
	h.p.Update(workload("vm-2", tcpProbe(l.Port()), "192.0.2.1"))
	if n := h.p.running.Load(); n != 0 {
		t.Fatalf("an update after Stop started %d probe goroutines", n)
	}
	if h.dials.Load() != dials || len(h.w.written()) != writes {
		t.Fatalf("probed or wrote after Stop")
	}
}

// The write is conditional on the resourceVersion the decision was made on;
// a conflict is retried at the next period.
func TestConflictRetried(t *testing.T) {
	h := newHarness(t, 10)
	l := probetest.Listen(t)
	h.w.conflicts.Store(1)
	h.w.show(workload("vm", tcpProbe(l.Port()), "192.0.2.1"))
	got := h.waitWrites(t, 2)
	if c := ready(t, got[1]); c.Status != metav1.ConditionTrue {
		t.Fatalf("retry wrote %+v", c)
	}
	if v := testutil.ToFloat64(h.m.ConditionWrites.WithLabelValues(resultConflict)); v != 1 {
		t.Fatalf("conflicts counted %v, want 1", v)
	}
}

// Removing the probe removes the condition the probe wrote (the workload is
// then ready, like one never probed); a condition somebody else wrote stays.
func TestProbeRemovedClearsItsCondition(t *testing.T) {
	h := newHarness(t, 10)
	l := probetest.Listen(t)
	probe := tcpProbe(l.Port())
	o := h.w.show(workload("vm", probe, "192.0.2.1"))
	h.waitWrites(t, 1)
	h.w.mu.Lock()
	o = proto.Clone(h.w.objs["ns/vm"]).(*watcherv1.Object)
	h.w.mu.Unlock()
	o.GetExternalWorkload().ReadinessProbe = nil
	o.GetExternalWorkload().Conditions = append(o.GetExternalWorkload().Conditions, &watcherv1.Condition{Type: "Maintenance", Status: "False"})
	h.w.show(o)
	got := h.waitWrites(t, 2)[1]
	if len(got.conditions) != 1 || got.conditions[0].Type != "Maintenance" {
		t.Fatalf("clear wrote %+v, want only the other condition left", got.conditions)
	}
	if v := testutil.ToFloat64(h.m.Workloads); v != 0 {
		t.Fatalf("probed workloads %v after the probe was removed", v)
	}

	manual := workload("vm-manual", nil, "192.0.2.1")
	manual.GetExternalWorkload().Conditions = []*watcherv1.Condition{{Type: "Ready", Status: "False", Reason: "Maintenance"}}
	h.w.show(manual)
	h.waitWrites(t, 2)
	if n := len(h.w.written()); n != 2 {
		t.Fatalf("an operator's Ready condition was rewritten")
	}
}

// A new workload is first probed initialDelaySeconds after its creation.
func TestInitialDelay(t *testing.T) {
	h := newHarness(t, 10)
	l := probetest.Listen(t)
	probe := tcpProbe(l.Port())
	probe.InitialDelaySeconds = 5
	o := workload("vm", probe, "192.0.2.1")
	created := time.Now()
	o.Meta.CreationTimestamp = created.UnixNano()
	h.w.show(o)
	h.waitWrites(t, 1)
	if first := l.WaitAccepted(t, 1)[0]; first.Sub(created) < 5*unit {
		t.Fatalf("first probe %s after creation, want at least the initial delay %s", first.Sub(created), 5*unit)
	}
}

// A changed probe starts over with the new spec.
func TestProbeChangeRestarts(t *testing.T) {
	h := newHarness(t, 10)
	dead := probetest.Listen(t)
	dead.Close()
	live := probetest.Listen(t)
	o := h.w.show(workload("vm", tcpProbe(dead.Port()), "192.0.2.1"))
	if c := ready(t, h.waitWrites(t, 1)[0]); c.Status != metav1.ConditionFalse {
		t.Fatalf("%+v", c)
	}
	h.w.mu.Lock()
	o = proto.Clone(h.w.objs["ns/vm"]).(*watcherv1.Object)
	h.w.mu.Unlock()
	o.GetExternalWorkload().ReadinessProbe = tcpProbe(live.Port())
	h.w.show(o)
	if c := ready(t, h.waitWrites(t, 2)[1]); c.Status != metav1.ConditionTrue {
		t.Fatalf("%+v", c)
	}
}

// Deleting the workload ends its probes.
func TestDeleteEndsProbes(t *testing.T) {
	h := newHarness(t, 10)
	l := probetest.Listen(t)
	o := h.w.show(workload("vm", tcpProbe(l.Port()), "192.0.2.1"))
	h.waitWrites(t, 1)
	h.p.Delete(o)
	if v := testutil.ToFloat64(h.m.Workloads); v != 0 {
		t.Fatalf("%v probed workloads after the delete", v)
	}
	testenv.Eventually(t, 5*time.Second, func() error {
		if n := h.p.running.Load(); n != 0 {
			return fmt.Errorf("%d probe goroutines still running", n)
		}
		return nil
	})
}

// An address no EndpointSlice may hold is never probed: it would be the
// leader's own host (loopback) or a cloud metadata service (link-local).
func TestRefusedAddressesAreNeverProbed(t *testing.T) {
	h := newHarness(t, 10)
	h.p.dial = func(ctx context.Context, network, address string) (net.Conn, error) {
		t.Errorf("dialled %s", address)
		return nil, fmt.Errorf("test: no dial")
	}
	probe := tcpProbe(8080)
	probe.FailureThreshold = 1
	for i, ip := range []string{"127.0.0.1", "169.254.169.254", "::1", "0.0.0.0"} {
		h.w.show(workload(fmt.Sprintf("vm-%d", i), probe, ip))
	}
	got := h.waitWrites(t, 4)
	for _, w := range got {
		if c := ready(t, w); c.Status != metav1.ConditionFalse || !strings.Contains(c.Message, "not probed") {
			t.Errorf("%s: %+v, want False saying the address is not probed", w.key, c)
		}
	}
}

// An address the operator's policy refuses (here the pod CIDR, and cloud
// metadata over IPv6, which the API server accepts in a slice) is never
// dialed: the workload is Ready=False with reason ProbeRefused at its first
// period (no failureThreshold), naming the flag, with one Event however many
// periods pass, and counted by reason; the allowed workload beside it is
// probed as before.
func TestPolicyRefusesBeforeDialing(t *testing.T) {
	m := testMetrics(t)
	h := &harness{m: m}
	h.w = &fakeWriter{p: func() *Prober { return h.p }, m: m, objs: map[string]*watcherv1.Object{}}
	ctx, cancel := context.WithCancel(context.Background())
	h.cancel = cancel
	var mu sync.Mutex
	var dialed []string
	dial := func(ctx context.Context, network, address string) (net.Conn, error) {
		mu.Lock()
		dialed = append(dialed, address)
		mu.Unlock()
		return probetest.LoopbackDial(ctx, network, address)
	}
	pods, _ := netip.ParsePrefix("192.0.2.4/30")
	rec := record.NewFakeRecorder(100)
	h.p = New(ctx, Config{Concurrency: 10, Dial: dial, Policy: probepolicy.Policy{PodCIDRs: []netip.Prefix{pods}}},
		h.w, m, slog.New(slog.NewTextHandler(io.Discard, nil))).WithEvents(rec)
	h.p.unit = unit
	t.Cleanup(func() { h.p.Stop(); cancel() })

	l := probetest.Listen(t)
	h.w.show(workload("in-pods", tcpProbe(l.Port()), "192.0.2.5"))
	h.w.show(workload("imds6", tcpProbe(l.Port()), "192.0.2.20", "fd00:ec2::254"))
	h.w.show(workload("vm", tcpProbe(l.Port()), "192.0.2.1"))
	h.waitWrites(t, 3)
	h.waitProbes(t, 5) // several periods of the allowed one
	byKey := map[string]metav1.Condition{}
	for _, w := range h.w.written() {
		byKey[w.key] = ready(t, w)
	}
	for key, want := range map[string]string{
		"ns/in-pods": "TCP probe of 192.0.2.5 not probed: 192.0.2.5 is in the pod CIDR 192.0.2.4/30 (--pod-cidrs); an operator may allow a narrower range with --probe-allowed-cidrs",
		"ns/imds6":   "TCP probe of fd00:ec2::254 not probed: fd00:ec2::254 is AWS's instance services",
	} {
		if c := byKey[key]; c.Status != metav1.ConditionFalse || c.Reason != readiness.ReasonProbeRefused || !strings.HasPrefix(c.Message, want) {
			t.Errorf("%s: %+v, want False/ProbeRefused %q", key, c, want)
		}
	}
	if c := byKey["ns/vm"]; c.Status != metav1.ConditionTrue {
		t.Errorf("the allowed workload: %+v", c)
	}
	mu.Lock()
	for _, a := range dialed {
		if !strings.HasPrefix(a, "192.0.2.1:") {
			t.Errorf("dialed %s", a)
		}
	}
	mu.Unlock()
	if n := len(h.w.written()); n != 3 {
		t.Errorf("%d writes over several periods, want 3 (one per workload)", n)
	}
	if got := testutil.ToFloat64(m.Refused.WithLabelValues(probepolicy.ReasonPodCIDR)); got < 2 {
		t.Errorf("pod-cidr refusals counted %v times over several periods", got)
	}
	if got := testutil.ToFloat64(m.Refused.WithLabelValues(probepolicy.ReasonCloudMetadata)); got < 2 {
		t.Errorf("cloud-metadata refusals counted %v times", got)
	}
	close(rec.Events)
	var events []string
	for e := range rec.Events {
		events = append(events, e)
	}
	if len(events) != 2 {
		t.Fatalf("events %q, want one per refused workload", events)
	}
	for _, e := range events {
		if !strings.HasPrefix(e, "Warning ProbeRefused Readiness probe not sent") {
			t.Errorf("event %q", e)
		}
	}
}

// The guard in front of every dial refuses what the policy refuses,
// whoever asks for the connection (an HTTP redirect, were one followed).
func TestGuardRefusesBeforeDialing(t *testing.T) {
	pods, _ := netip.ParsePrefix("10.244.0.0/16")
	d := guard(probepolicy.Policy{PodCIDRs: []netip.Prefix{pods}}.Check, func(context.Context, string, string) (net.Conn, error) {
		t.Fatal("dialed")
		return nil, nil
	})
	for _, a := range []string{"10.244.1.1:80", "169.254.169.254:80", "[fd00:ec2::254]:80", "localhost:80"} {
		if _, err := d(context.Background(), "tcp", a); err == nil || !strings.Contains(err.Error(), "not probed") {
			t.Errorf("dial %s: %v", a, err)
		}
	}
}

// testMetrics are the prober's metrics on a registry of their own.
func testMetrics(tb testing.TB) *Metrics {
	tb.Helper()
	m, err := NewMetrics(prometheus.NewRegistry())
	if err != nil {
		tb.Fatal(err)
	}
	return m
}
