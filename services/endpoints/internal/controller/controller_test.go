package controller

import (
	"context"
	"fmt"
	"io"
	"iter"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/record"

	"github.com/ipledger/ipledger/pkg/leader"
	"github.com/ipledger/ipledger/pkg/stream"
	watcherv1 "github.com/ipledger/ipledger/proto/ipledger/watcher/v1"
	"github.com/ipledger/ipledger/services/endpoints/internal/prober"
)

// fakeAPI serves EndpointSlices with the API server's semantics that the
// controller relies on: AlreadyExists on a taken name, resourceVersion
// conflicts on update, delete preconditions, generation bumps.
type fakeAPI struct {
	// gate, when set, holds every create until it is closed; entered
	// receives a value each time a create waits on it.
	gate    chan struct{}
	entered chan struct{}

	mu     sync.Mutex
	rv     int
	uid    int
	slices map[string]*discoveryv1.EndpointSlice // ns/name
	writes []string                              // "op ns/name"
}

func newFakeAPI() (*fakeAPI, *fake.Clientset) {
	f := &fakeAPI{slices: map[string]*discoveryv1.EndpointSlice{}}
	cs := fake.NewClientset()
	cs.PrependReactor("*", "endpointslices", f.react)
	return f, cs
}

func (f *fakeAPI) react(a k8stesting.Action) (bool, runtime.Object, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	gr := discoveryv1.Resource("endpointslices")
	if a.GetVerb() == "create" && f.gate != nil {
		f.mu.Unlock()
		f.entered <- struct{}{}
		<-f.gate
		f.mu.Lock()
	}
	switch a.GetVerb() {
	case "create":
		a := a.(k8stesting.CreateAction)
		s := a.GetObject().(*discoveryv1.EndpointSlice).DeepCopy()
		key := s.Namespace + "/" + s.Name
		f.writes = append(f.writes, "create "+key)
		if _, ok := f.slices[key]; ok {
			return true, nil, apierrors.NewAlreadyExists(gr, s.Name)
		}
		f.rv++
		f.uid++
		s.ResourceVersion, s.Generation, s.UID = fmt.Sprint(f.rv), 1, types.UID(fmt.Sprintf("uid-%d", f.uid))
		f.slices[key] = s
		return true, s.DeepCopy(), nil
	case "update":
		a := a.(k8stesting.UpdateAction)
		s := a.GetObject().(*discoveryv1.EndpointSlice).DeepCopy()
		key := s.Namespace + "/" + s.Name
		f.writes = append(f.writes, "update "+key)
		old, ok := f.slices[key]
		if !ok {
			return true, nil, apierrors.NewNotFound(gr, s.Name)
		}
		if s.ResourceVersion != old.ResourceVersion {
			return true, nil, apierrors.NewConflict(gr, s.Name, fmt.Errorf("resourceVersion %s, have %s", s.ResourceVersion, old.ResourceVersion))
		}
		f.rv++
		s.ResourceVersion, s.UID, s.Generation = fmt.Sprint(f.rv), old.UID, old.Generation
		if !apiequality.Semantic.DeepEqual(s.Endpoints, old.Endpoints) || !apiequality.Semantic.DeepEqual(s.Ports, old.Ports) ||
			!apiequality.Semantic.DeepEqual(s.Labels, old.Labels) {
			s.Generation++
		}
		f.slices[key] = s
		return true, s.DeepCopy(), nil
	case "delete":
		a := a.(k8stesting.DeleteAction)
		key := a.GetNamespace() + "/" + a.GetName()
		f.writes = append(f.writes, "delete "+key)
		old, ok := f.slices[key]
		if !ok {
			return true, nil, apierrors.NewNotFound(gr, a.GetName())
		}
		if p := a.GetDeleteOptions().Preconditions; p != nil {
			if (p.UID != nil && *p.UID != old.UID) || (p.ResourceVersion != nil && *p.ResourceVersion != old.ResourceVersion) {
				return true, nil, apierrors.NewConflict(gr, a.GetName(), fmt.Errorf("precondition failed"))
			}
		}
		delete(f.slices, key)
		return true, nil, nil
	}
	return false, nil, nil
}

// deleteOutOfBand removes a slice as another actor would.
func (f *fakeAPI) deleteOutOfBand(key string) *discoveryv1.EndpointSlice {
	f.mu.Lock()
	defer f.mu.Unlock()
	s := f.slices[key]
	delete(f.slices, key)
	return s
}

func (f *fakeAPI) list() []*discoveryv1.EndpointSlice {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []*discoveryv1.EndpointSlice
	for _, s := range f.slices {
		out = append(out, s.DeepCopy())
	}
	slices.SortFunc(out, func(a, b *discoveryv1.EndpointSlice) int { return strings.Compare(a.Name, b.Name) })
	return out
}

func (f *fakeAPI) takeWrites() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	w := f.writes
	f.writes = nil
	return w
}

// fakeStream is a Store and Source over a map, delivering events to the
// registered handlers like pkg/stream (replay on AddHandler).
type fakeStream struct {
	mu       sync.Mutex
	objs     map[watcherv1.Kind]map[string]*watcherv1.Object
	handlers map[uint64]stream.Handler
}

func newFakeStream() *fakeStream {
	return &fakeStream{objs: map[watcherv1.Kind]map[string]*watcherv1.Object{}, handlers: map[uint64]stream.Handler{}}
}

func (s *fakeStream) Get(kind watcherv1.Kind, ns, name string) (*watcherv1.Object, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	o, ok := s.objs[kind][ns+"/"+name]
	return o, ok
}

func (s *fakeStream) List(kind watcherv1.Kind) []*watcherv1.Object {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Collect(maps.Values(s.objs[kind]))
}

func (s *fakeStream) All(kind watcherv1.Kind) iter.Seq[*watcherv1.Object] {
	return slices.Values(s.List(kind))
}

func (s *fakeStream) ListNamespace(kind watcherv1.Kind, ns string) []*watcherv1.Object {
	var out []*watcherv1.Object
	for _, o := range s.List(kind) {
		if o.GetMeta().GetNamespace() == ns {
			out = append(out, o)
		}
	}
	return out
}

func (s *fakeStream) ByIndex(kind watcherv1.Kind, index, value string) []*watcherv1.Object {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []*watcherv1.Object
	fn := Indexes[kind][index]
	for _, o := range s.objs[kind] {
		if fn != nil && slices.Contains(fn(o), value) {
			out = append(out, o)
		}
	}
	return out
}

func (s *fakeStream) IndexKeys(kind watcherv1.Kind, index, value string) []string {
	var keys []string
	for _, o := range s.ByIndex(kind, index, value) {
		keys = append(keys, stream.Key(o))
	}
	slices.Sort(keys)
	return keys
}

func (s *fakeStream) Attribute(kind watcherv1.Kind, name, key string) (any, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	o, ok := s.objs[kind][key]
	if !ok || kind != watcherv1.Kind_KIND_SERVICE || name != AttrSelector {
		return nil, ok
	}
	return selectorAttr(o), true
}

// AddHandler replays the cached objects, then delivers live events.
func (s *fakeStream) AddHandler(h stream.Handler) stream.Registration {
	s.mu.Lock()
	s.handlers[uint64(len(s.handlers))] = h
	var replay []*watcherv1.Object
	for _, m := range s.objs {
		for _, o := range m {
			replay = append(replay, o)
		}
	}
	s.mu.Unlock()
	for _, o := range replay {
		h.OnAdd(o)
	}
	return stream.Registration{}
}

// RemoveHandler removes every handler: Registrations cannot be told apart
// outside pkg/stream, and the tests hold at most one at a time.
func (s *fakeStream) RemoveHandler(stream.Registration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	clear(s.handlers)
}

func (s *fakeStream) upsert(o *watcherv1.Object) {
	s.mu.Lock()
	m := s.objs[o.Kind]
	if m == nil {
		m = map[string]*watcherv1.Object{}
		s.objs[o.Kind] = m
	}
	old := m[stream.Key(o)]
	m[stream.Key(o)] = o
	hs := s.handlerList()
	s.mu.Unlock()
	for _, h := range hs {
		if old == nil {
			h.OnAdd(o)
		} else {
			h.OnUpdate(old, o)
		}
	}
}

func (s *fakeStream) remove(kind watcherv1.Kind, key string) {
	s.mu.Lock()
	old, ok := s.objs[kind][key]
	delete(s.objs[kind], key)
	hs := s.handlerList()
	s.mu.Unlock()
	if ok {
		for _, h := range hs {
			h.OnDelete(old)
		}
	}
}

func (s *fakeStream) handlerList() []stream.Handler {
	var out []stream.Handler
	for _, h := range s.handlers {
		out = append(out, h)
	}
	return out
}

// catchUp makes the stream show the API's slices, as the watcher would.
func (s *fakeStream) catchUp(api *fakeAPI) {
	want := map[string]bool{}
	for _, sl := range api.list() {
		want[sl.Namespace+"/"+sl.Name] = true
		if cur, ok := s.Get(watcherv1.Kind_KIND_ENDPOINT_SLICE, sl.Namespace, sl.Name); ok && cur.GetMeta().GetResourceVersion() == sl.ResourceVersion {
			continue
		}
		s.upsert(objectFromSlice(sl))
	}
	s.mu.Lock()
	var gone []string
	for k := range s.objs[watcherv1.Kind_KIND_ENDPOINT_SLICE] {
		if !want[k] {
			gone = append(gone, k)
		}
	}
	s.mu.Unlock()
	for _, k := range gone {
		s.remove(watcherv1.Kind_KIND_ENDPOINT_SLICE, k)
	}
}

func objectFromSlice(sl *discoveryv1.EndpointSlice) *watcherv1.Object {
	str := func(p *string) string {
		if p == nil {
			return ""
		}
		return *p
	}
	b := func(p *bool) bool { return p != nil && *p }
	es := &watcherv1.EndpointSlice{AddressType: string(sl.AddressType)}
	for _, p := range sl.Ports {
		es.Ports = append(es.Ports, &watcherv1.EndpointPort{Name: str(p.Name), Protocol: string(*p.Protocol), Port: *p.Port})
	}
	for _, e := range sl.Endpoints {
		es.Endpoints = append(es.Endpoints, &watcherv1.Endpoint{
			Addresses: e.Addresses, Ready: b(e.Conditions.Ready), Serving: b(e.Conditions.Serving), Terminating: b(e.Conditions.Terminating),
			Zone: str(e.Zone), TargetRefKind: e.TargetRef.Kind, TargetRefName: e.TargetRef.Name, TargetRefNamespace: e.TargetRef.Namespace, TargetRefUid: string(e.TargetRef.UID),
		})
	}
	m := &watcherv1.ObjectMeta{Namespace: sl.Namespace, Name: sl.Name, Uid: string(sl.UID), ResourceVersion: sl.ResourceVersion,
		Generation: sl.Generation, Labels: sl.Labels, Annotations: sl.Annotations}
	for _, r := range sl.OwnerReferences {
		m.OwnerReferences = append(m.OwnerReferences, &watcherv1.OwnerReference{ApiVersion: r.APIVersion, Kind: r.Kind, Name: r.Name, Uid: string(r.UID), Controller: b(r.Controller)})
	}
	return &watcherv1.Object{Kind: watcherv1.Kind_KIND_ENDPOINT_SLICE, Meta: m, Body: &watcherv1.Object_EndpointSlice{EndpointSlice: es}}
}

func svcObj(ns, name string) *watcherv1.Object {
	return &watcherv1.Object{
		Kind: watcherv1.Kind_KIND_SERVICE,
		Meta: &watcherv1.ObjectMeta{Namespace: ns, Name: name, Uid: "svc-uid-" + name},
		Body: &watcherv1.Object_Service{Service: &watcherv1.Service{
			Type: "ClusterIP", ClusterIps: []string{"10.0.0.1"}, IpFamilies: []string{"IPv4"},
			Selector: map[string]string{"app": name}, HasSelector: true,
			Ports: []*watcherv1.ServicePort{{Name: "http", Protocol: "TCP", Port: 80, TargetPortNumber: 8080}},
		}},
	}
}

func wlObj(ns, name, app, ip string) *watcherv1.Object {
	return &watcherv1.Object{
		Kind: watcherv1.Kind_KIND_EXTERNAL_WORKLOAD,
		Meta: &watcherv1.ObjectMeta{Namespace: ns, Name: name, Uid: "wl-uid-" + name, Labels: map[string]string{"app": app}},
		Body: &watcherv1.Object_ExternalWorkload{ExternalWorkload: &watcherv1.ExternalWorkload{
			WorkloadIps: []string{ip},
			Conditions:  []*watcherv1.Condition{{Type: "Ready", Status: "True"}},
		}},
	}
}

type harness struct {
	api    *fakeAPI
	stream *fakeStream
	c      *Controller
	reg    *prometheus.Registry
}

func newHarness(t testing.TB) *harness {
	t.Helper()
	api, cs := newFakeAPI()
	fs := newFakeStream()
	reg := prometheus.NewRegistry()
	c, err := New(Config{MaxEndpointsPerSlice: 100, Workers: 1, ExpectationTimeout: time.Hour, Probe: prober.Config{Concurrency: 1}}, cs, nil, fs, fs,
		slog.New(slog.NewTextHandler(io.Discard, nil)), reg)
	if err != nil {
		t.Fatal(err)
	}
	return &harness{api: api, stream: fs, c: c, reg: reg}
}

// term is one term's state with its queue recorded instead of run.
type term struct {
	st     *termState
	queued []string
	// conditions are the workloads queued for their AddressAccepted condition.
	conditions []string
	reg        stream.Registration
	rec        *record.FakeRecorder
}

func (h *harness) startTerm() *term {
	tm := &term{}
	tm.st = h.c.newTermState(h.c.log)
	tm.rec = record.NewFakeRecorder(100)
	tm.st.recorder = tm.rec
	tm.st.enqueue = func(k string) {
		if !slices.Contains(tm.queued, k) {
			tm.queued = append(tm.queued, k)
		}
	}
	tm.st.enqueueCondition = func(k string) {
		if !slices.Contains(tm.conditions, k) {
			tm.conditions = append(tm.conditions, k)
		}
	}
	tm.reg = h.stream.AddHandler(tm.st.handler())
	return tm
}

func (h *harness) endTerm(tm *term) { h.stream.RemoveHandler(tm.reg) }

// drain syncs every queued key once and returns the errors by key.
func (tm *term) drain(t *testing.T) map[string]error {
	t.Helper()
	errs := map[string]error{}
	keys := tm.queued
	tm.queued = nil
	for _, k := range keys {
		if err := tm.st.sync(context.Background(), k); err != nil {
			errs[k] = err
		}
	}
	return errs
}

func (h *harness) staleRetries() float64 { return testutil.ToFloat64(h.c.Metrics.StaleRetries) }

func TestSyncWaitsForItsOwnWrites(t *testing.T) {
	h := newHarness(t)
	h.stream.upsert(svcObj("a", "web"))
	h.stream.upsert(wlObj("a", "vm-1", "web", "192.0.2.1"))
	tm := h.startTerm()
	if errs := tm.drain(t); len(errs) != 0 {
		t.Fatal(errs)
	}
	if got := h.api.takeWrites(); len(got) != 1 || !strings.HasPrefix(got[0], "create ") {
		t.Fatalf("writes %v, want one create", got)
	}

	// The stream has not shown the created slice: a new change must not
	// create a second one.
	h.stream.upsert(wlObj("a", "vm-2", "web", "192.0.2.2"))
	errs := tm.drain(t)
	if _, stale := errs["a/web"].(errStale); !stale {
		t.Fatalf("sync on a stale view returned %v, want errStale", errs["a/web"])
	}
	if got := h.api.takeWrites(); len(got) != 0 {
		t.Fatalf("writes on a stale view: %v", got)
	}
	if h.staleRetries() != 1 {
		t.Fatalf("stale retries %v, want 1", h.staleRetries())
	}

	// Once the stream shows it, the Service is synced again (the echo the
	// stale sync waited for queues it) and the slice is updated in place.
	h.stream.catchUp(h.api)
	if !slices.Contains(tm.queued, "a/web") {
		t.Fatalf("echo of the awaited write did not queue the Service")
	}
	if errs := tm.drain(t); len(errs) != 0 {
		t.Fatal(errs)
	}
	if got := h.api.takeWrites(); len(got) != 1 || !strings.HasPrefix(got[0], "update ") {
		t.Fatalf("writes %v, want one update", got)
	}
	if n := len(h.api.list()); n != 1 {
		t.Fatalf("%d slices, want 1", n)
	}
	// The echo of that update queues nothing.
	h.stream.catchUp(h.api)
	if len(tm.queued) != 0 {
		t.Fatalf("own write's echo queued %v", tm.queued)
	}
	if got := testutil.ToFloat64(h.c.Metrics.EndpointsManaged); got != 2 {
		t.Fatalf("endpoints managed %v, want 2", got)
	}
}

// The Linkerd bug: a replica that leads, stops leading, and leads again must
// not carry its old expectations into the new term, or a slice deleted while
// it was not leading is waited for forever instead of being re-created.
func TestNewTermStartsWithFreshTracker(t *testing.T) {
	h := newHarness(t)
	h.stream.upsert(svcObj("a", "web"))
	h.stream.upsert(wlObj("a", "vm-1", "web", "192.0.2.1"))
	first := h.startTerm()
	if errs := first.drain(t); len(errs) != 0 {
		t.Fatal(errs)
	}
	h.stream.catchUp(h.api)
	first.drain(t)
	h.endTerm(first)

	// Deleted out of band while nobody leads; the stream shows it.
	name := h.api.list()[0].Namespace + "/" + h.api.list()[0].Name
	h.api.deleteOutOfBand(name)
	h.stream.catchUp(h.api)
	h.api.takeWrites()

	// The old term's tracker would wait for a slice that will never come back.
	if reason := first.st.tracker.Stale("a/web", nil); reason == "" {
		t.Fatalf("the old tracker should consider the view stale (else this test proves nothing)")
	}

	second := h.startTerm() // replays: the Service is queued
	if errs := second.drain(t); len(errs) != 0 {
		t.Fatal(errs)
	}
	if got := h.api.takeWrites(); len(got) != 1 || got[0] != "create "+name {
		t.Fatalf("writes %v, want the slice re-created under its name", got)
	}
	if h.staleRetries() != 0 {
		t.Fatalf("stale retries %v, want 0", h.staleRetries())
	}
}

func TestOutOfBandDeleteRequeuesService(t *testing.T) {
	h := newHarness(t)
	h.stream.upsert(svcObj("a", "web"))
	h.stream.upsert(wlObj("a", "vm-1", "web", "192.0.2.1"))
	tm := h.startTerm()
	tm.drain(t)
	h.stream.catchUp(h.api)
	tm.drain(t)
	if len(tm.queued) != 0 {
		t.Fatalf("queued %v", tm.queued)
	}
	s := h.api.list()[0]
	h.api.deleteOutOfBand(s.Namespace + "/" + s.Name)
	h.stream.catchUp(h.api)
	if !slices.Contains(tm.queued, "a/web") {
		t.Fatalf("out-of-band delete did not queue the Service")
	}
	if errs := tm.drain(t); len(errs) != 0 {
		t.Fatal(errs)
	}
	if n := len(h.api.list()); n != 1 {
		t.Fatalf("%d slices after repair, want 1", n)
	}
}

func TestCreateFromStaleViewNeverDuplicates(t *testing.T) {
	h := newHarness(t)
	h.stream.upsert(svcObj("a", "web"))
	h.stream.upsert(wlObj("a", "vm-1", "web", "192.0.2.1"))
	// Another term created the slice; this term's stream has not shown it.
	other := h.startTerm()
	other.drain(t)
	h.endTerm(other)
	h.api.takeWrites()

	tm := h.startTerm()
	errs := tm.drain(t)
	if _, stale := errs["a/web"].(errStale); !stale {
		t.Fatalf("got %v, want errStale from AlreadyExists", errs["a/web"])
	}
	if n := len(h.api.list()); n != 1 {
		t.Fatalf("%d slices, want 1", n)
	}
	// Until the view shows it, the tracker holds syncs back without writing.
	tm.queued = []string{"a/web"}
	tm.drain(t)
	if got := h.api.takeWrites(); len(got) != 1 {
		t.Fatalf("writes %v, want only the refused create", got)
	}
	h.stream.catchUp(h.api)
	if errs := tm.drain(t); len(errs) != 0 {
		t.Fatal(errs)
	}
	if got := h.api.takeWrites(); len(got) != 0 {
		t.Fatalf("writes %v after catching up, want none", got)
	}
}

func TestForeignSliceNeverTouched(t *testing.T) {
	h := newHarness(t)
	h.stream.upsert(svcObj("a", "web"))
	h.stream.upsert(wlObj("a", "vm-1", "web", "192.0.2.1"))
	foreign := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Namespace: "a", Name: "web-foreign", UID: "f", ResourceVersion: "1", Generation: 1,
			Labels: map[string]string{discoveryv1.LabelServiceName: "web", discoveryv1.LabelManagedBy: "someone-else"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{"192.0.2.1"}, TargetRef: &corev1.ObjectReference{Kind: "ExternalWorkload", Namespace: "a", Name: "vm-1"}}},
	}
	h.api.slices["a/web-foreign"] = foreign
	h.stream.upsert(objectFromSlice(foreign))
	tm := h.startTerm()
	tm.drain(t)
	h.stream.catchUp(h.api)
	tm.drain(t)
	for _, w := range h.api.takeWrites() {
		if strings.HasSuffix(w, "/web-foreign") {
			t.Fatalf("wrote the foreign slice: %s", w)
		}
	}
	if _, ok := h.api.slices["a/web-foreign"]; !ok {
		t.Fatalf("foreign slice deleted")
	}
}

func TestWorkloadChangeQueuesSelectingServices(t *testing.T) {
	h := newHarness(t)
	h.stream.upsert(svcObj("a", "web"))
	h.stream.upsert(svcObj("a", "db"))
	h.stream.upsert(svcObj("b", "web"))
	tm := h.startTerm()
	tm.queued = nil
	h.stream.upsert(wlObj("a", "vm-1", "web", "192.0.2.1"))
	if !slices.Equal(tm.queued, []string{"a/web"}) {
		t.Fatalf("queued %v, want [a/web]", tm.queued)
	}
	tm.queued = nil
	// Relabelled from web to db: both must resync.
	h.stream.upsert(wlObj("a", "vm-1", "db", "192.0.2.1"))
	slices.Sort(tm.queued)
	if !slices.Equal(tm.queued, []string{"a/db", "a/web"}) {
		t.Fatalf("queued %v, want [a/db a/web]", tm.queued)
	}
}

func TestSkippedWorkloadEvent(t *testing.T) {
	h := newHarness(t)
	svc := svcObj("a", "web")
	svc.GetService().Ports[0].TargetPortNumber, svc.GetService().Ports[0].TargetPortName = 0, "web"
	h.stream.upsert(svc)
	ok := wlObj("a", "vm-1", "web", "192.0.2.1")
	ok.GetExternalWorkload().Ports = []*watcherv1.WorkloadPort{{Name: "web", Port: 9090, Protocol: "TCP"}}
	h.stream.upsert(ok)
	h.stream.upsert(wlObj("a", "vm-2", "web", "192.0.2.2"))
	tm := h.startTerm()
	if errs := tm.drain(t); len(errs) != 0 {
		t.Fatal(errs)
	}
	select {
	case e := <-tm.rec.Events:
		if !strings.Contains(e, "ExternalWorkloadSkipped") || !strings.Contains(e, "vm-2") {
			t.Fatalf("event %q", e)
		}
	default:
		t.Fatalf("no event for the skipped workload")
	}
}

func TestTrackerExpiresLostExpectations(t *testing.T) {
	now := time.Unix(0, 0)
	tr := newTracker(time.Minute, func() time.Time { return now })
	tr.Wrote("a/web", &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Name: "s", UID: "u", Generation: 2}})
	if tr.Stale("a/web", nil) == "" {
		t.Fatalf("missing written slice not stale")
	}
	old := &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Name: "s", UID: "u", Generation: 1}}
	if tr.Stale("a/web", []*discoveryv1.EndpointSlice{old}) == "" {
		t.Fatalf("older generation not stale")
	}
	replaced := &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Name: "s", UID: "other", Generation: 1}}
	if r := tr.Stale("a/web", []*discoveryv1.EndpointSlice{replaced}); r != "" {
		t.Fatalf("replaced slice reported stale: %s", r)
	}
	tr.Wrote("a/web", &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Name: "s2", UID: "u2", Generation: 1}})
	now = now.Add(2 * time.Minute)
	if r := tr.Stale("a/web", nil); r != "" {
		t.Fatalf("expired expectation still holds syncs back: %s", r)
	}
}

// twentyServices gives the harness 20 Services with one workload each.
func twentyServices(h *harness) {
	for i := range 20 {
		name := fmt.Sprintf("s%02d", i)
		h.stream.upsert(svcObj("a", name))
		h.stream.upsert(wlObj("a", "vm-"+name, name, fmt.Sprintf("192.0.2.%d", i+1)))
	}
}

// A term that loses the Lease with 20 Services queued writes nothing more
// once its Run has returned: queued items are dropped, not synced.
func TestLostTermDropsQueuedWork(t *testing.T) {
	h := newHarness(t)
	h.api.gate, h.api.entered = make(chan struct{}), make(chan struct{}, 100)
	twentyServices(h)
	tm, stop, end := leader.NewTerm(context.Background(), "a", "a/0/test")
	w, err := h.c.NewWorker(tm)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- w.Run(tm) }()
	<-h.api.entered // one create in flight, 19 Services queued
	end()           // the Lease is lost: the term's context ends first,
	stop()          // then it stops taking work
	close(h.api.gate)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	after := len(h.api.takeWrites())
	if after > 1 {
		t.Fatalf("%d writes from a lost term, want at most the one in flight", after)
	}
	if p := h.c.Pending(); p != 0 {
		t.Fatalf("pending %d after the term", p)
	}
	if got := testutil.ToFloat64(h.c.Metrics.EndpointsManaged); got != 0 {
		t.Fatalf("endpoints managed %v after the term, want 0", got)
	}
}

// A term that stops gracefully (SIGTERM) syncs everything queued before
// its Run returns, so the Lease is released only after the work is done.
func TestGracefulStopDrainsQueue(t *testing.T) {
	h := newHarness(t)
	h.api.gate, h.api.entered = make(chan struct{}), make(chan struct{}, 100)
	twentyServices(h)
	tm, stop, end := leader.NewTerm(context.Background(), "a", "a/0/test")
	defer end()
	w, err := h.c.NewWorker(tm)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- w.Run(tm) }()
	<-h.api.entered
	stop()
	close(h.api.gate)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if n := len(h.api.list()); n != 20 {
		t.Fatalf("%d slices after a graceful stop, want 20", n)
	}
}

// A name taken by a slice the stream never shows (another manager's) holds
// the Service back only until the expectation expires; then the slice is
// created under another name, and the foreign one is never written.
func TestTakenNameByInvisibleSlice(t *testing.T) {
	h := newHarness(t)
	now := time.Unix(0, 0)
	h.c.now = func() time.Time { return now }
	h.stream.upsert(svcObj("a", "web"))
	h.stream.upsert(wlObj("a", "vm-1", "web", "192.0.2.1"))
	// Learn the name the planner picks, then have someone else hold it.
	probe := h.startTerm()
	probe.drain(t)
	h.endTerm(probe)
	name := h.api.list()[0].Name
	h.api.slices["a/"+name].Labels[discoveryv1.LabelManagedBy] = "someone-else"
	h.api.takeWrites()

	tm := h.startTerm()
	if errs := tm.drain(t); errs["a/web"] == nil {
		t.Fatalf("create over a taken name succeeded")
	}
	now = now.Add(2 * time.Hour) // past ExpectationTimeout
	tm.queued = []string{"a/web"}
	if errs := tm.drain(t); len(errs) != 0 {
		t.Fatal(errs)
	}
	writes := h.api.takeWrites()
	if len(writes) != 2 || writes[1] == "create a/"+name || !strings.HasPrefix(writes[1], "create ") {
		t.Fatalf("writes %v, want a refused create, then a create under another name", writes)
	}
	if h.api.slices["a/"+name].Labels[discoveryv1.LabelManagedBy] != "someone-else" {
		t.Fatalf("foreign slice changed")
	}
}

// A workload's change queues exactly the Services whose whole selector its
// labels match, found through the selector index and the store's selector
// attribute (not by decoding every Service that shares a label), and
// follows selector edits and deletions.
func TestWorkloadChangeFollowsSharedTermsAndSelectorEdits(t *testing.T) {
	svc := func(name string, sel map[string]string) *watcherv1.Object {
		o := svcObj("a", name)
		o.GetService().Selector = sel
		return o
	}
	wl := func(labels map[string]string) *watcherv1.Object {
		o := wlObj("a", "vm-1", "", "192.0.2.1")
		o.Meta.Labels = labels
		return o
	}
	h := newHarness(t)
	h.stream.upsert(svc("web-prod", map[string]string{"app": "web", "env": "prod"}))
	h.stream.upsert(svc("db-prod", map[string]string{"app": "db", "env": "prod"}))
	h.stream.upsert(svc("all-prod", map[string]string{"env": "prod"}))
	h.stream.upsert(svc("other-ns", nil)) // selects nothing
	tm := h.startTerm()
	tm.queued = nil // the replay queued every Service

	for _, tc := range []struct {
		step   string
		change func()
		want   []string
	}{
		{"a web prod workload appears", func() { h.stream.upsert(wl(map[string]string{"app": "web", "env": "prod"})) },
			[]string{"a/web-prod", "a/all-prod"}},
		{"its app label changes to db (old and new selectors)", func() { h.stream.upsert(wl(map[string]string{"app": "db", "env": "prod"})) },
			[]string{"a/web-prod", "a/all-prod", "a/db-prod"}},
		{"all-prod now also needs tier=gold (still indexed under env=prod)", func() {
			h.stream.upsert(svc("all-prod", map[string]string{"env": "prod", "tier": "gold"}))
			tm.queued = nil // the Service's own change queued it
			h.stream.upsert(wl(map[string]string{"app": "db", "env": "prod", "rev": "2"}))
		}, []string{"a/db-prod"}},
		{"db-prod is deleted", func() {
			h.stream.remove(watcherv1.Kind_KIND_SERVICE, "a/db-prod")
			tm.queued = nil
			h.stream.upsert(wl(map[string]string{"app": "db", "env": "prod", "rev": "3"}))
		}, nil},
	} {
		tc.change()
		got := slices.Sorted(slices.Values(tm.queued))
		want := slices.Sorted(slices.Values(tc.want))
		if !slices.Equal(got, want) {
			t.Errorf("%s: queued %v, want %v", tc.step, got, want)
		}
		tm.queued = nil
	}
}
