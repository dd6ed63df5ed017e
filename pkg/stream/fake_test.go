package stream

import (
	"context"
	"net"
	"slices"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	watcherv1 "github.com/ipledger/ipledger/proto/ipledger/watcher/v1"
	watcherv1grpc "github.com/ipledger/ipledger/proto/ipledger/watcher/v1/watcherv1grpc"
)

// fakeWatcher is a minimal WatcherService: a snapshot of its objects, SYNCED,
// then whatever the test pushes. It never resumes (every stream is a snapshot).
type fakeWatcher struct {
	watcherv1grpc.UnimplementedWatcherServiceServer
	epoch string
	// serves, when set, are the only kinds it serves: a stream asking for
	// another is refused as a watcher of an older release refuses it.
	serves []watcherv1.Kind
	// kinds are what each stream asked for.
	kinds [][]watcherv1.Kind

	mu      sync.Mutex
	rev     uint64
	objects map[string]*watcherv1.Object
	subs    map[chan *watcherv1.WatchResponse]struct{}
	streams int

	srv  *grpc.Server
	addr string
}

func startFake(t *testing.T, epoch string, objs ...*watcherv1.Object) *fakeWatcher {
	t.Helper()
	return startFakeOn(t, "127.0.0.1:0", epoch, objs...)
}

func startFakeOn(t *testing.T, addr, epoch string, objs ...*watcherv1.Object) *fakeWatcher {
	t.Helper()
	f := &fakeWatcher{epoch: epoch, objects: map[string]*watcherv1.Object{}, subs: map[chan *watcherv1.WatchResponse]struct{}{}}
	for _, o := range objs {
		f.objects[Key(o)] = o
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	f.addr = ln.Addr().String()
	f.srv = grpc.NewServer()
	watcherv1grpc.RegisterWatcherServiceServer(f.srv, f)
	go f.srv.Serve(ln)
	t.Cleanup(f.srv.Stop)
	return f
}

func (f *fakeWatcher) Watch(req *watcherv1.WatchRequest, stream grpc.ServerStreamingServer[watcherv1.WatchResponse]) error {
	f.mu.Lock()
	f.streams++
	f.kinds = append(f.kinds, req.GetKinds())
	for _, k := range req.GetKinds() {
		if f.serves != nil && !slices.Contains(f.serves, k) {
			f.mu.Unlock()
			return status.Errorf(codes.InvalidArgument, "kinds: %v is not a kind the watcher serves; use one of KIND_SERVICE … KIND_LEDGER_CONFIG_MAP", k)
		}
	}
	ch := make(chan *watcherv1.WatchResponse, 1000)
	var snap []*watcherv1.WatchResponse
	for _, o := range f.objects {
		snap = append(snap, &watcherv1.WatchResponse{Type: watcherv1.EventType_EVENT_TYPE_UPSERT, Epoch: f.epoch, Revision: f.rev, Object: o})
	}
	snap = append(snap, &watcherv1.WatchResponse{Type: watcherv1.EventType_EVENT_TYPE_SYNCED, Epoch: f.epoch, Revision: f.rev, ResumeRevision: f.rev})
	f.subs[ch] = struct{}{}
	f.mu.Unlock()
	defer func() { f.mu.Lock(); delete(f.subs, ch); f.mu.Unlock() }()
	for _, r := range snap {
		if err := stream.Send(r); err != nil {
			return err
		}
	}
	for {
		select {
		case <-stream.Context().Done():
			return nil
		case r := <-ch:
			if err := stream.Send(r); err != nil {
				return err
			}
		}
	}
}

func (f *fakeWatcher) upsert(o *watcherv1.Object) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.rev++
	old := f.objects[Key(o)]
	f.objects[Key(o)] = o
	f.broadcast(&watcherv1.WatchResponse{Type: watcherv1.EventType_EVENT_TYPE_UPSERT, Epoch: f.epoch, Revision: f.rev, ResumeRevision: f.rev, Object: o, OldObject: old})
}

func (f *fakeWatcher) remove(o *watcherv1.Object) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.rev++
	delete(f.objects, Key(o))
	f.broadcast(&watcherv1.WatchResponse{Type: watcherv1.EventType_EVENT_TYPE_DELETE, Epoch: f.epoch, Revision: f.rev, ResumeRevision: f.rev, Object: o})
}

func (f *fakeWatcher) heartbeat() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.broadcast(&watcherv1.WatchResponse{Type: watcherv1.EventType_EVENT_TYPE_HEARTBEAT, Epoch: f.epoch, Revision: f.rev, ResumeRevision: f.rev})
}

func (f *fakeWatcher) broadcast(r *watcherv1.WatchResponse) {
	for ch := range f.subs {
		ch <- r
	}
}

func svc(ns, name, rv string, labels map[string]string) *watcherv1.Object {
	return &watcherv1.Object{Kind: watcherv1.Kind_KIND_SERVICE,
		Meta: &watcherv1.ObjectMeta{Namespace: ns, Name: name, ResourceVersion: rv, Labels: labels},
		Body: &watcherv1.Object_Service{Service: &watcherv1.Service{Type: "LoadBalancer"}}}
}

// recorder is a Handler that mirrors what it was told into a map and logs it.
type recorder struct {
	mu     sync.Mutex
	mirror map[string]*watcherv1.Object
	log    []string
}

func newRecorder() *recorder { return &recorder{mirror: map[string]*watcherv1.Object{}} }

func (r *recorder) OnAdd(o *watcherv1.Object) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.mirror[Key(o)] = o
	r.log = append(r.log, "add "+Key(o)+"@"+o.GetMeta().GetResourceVersion())
}

func (r *recorder) OnUpdate(old, o *watcherv1.Object) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.mirror[Key(o)] = o
	r.log = append(r.log, "update "+Key(o)+"@"+old.GetMeta().GetResourceVersion()+"->"+o.GetMeta().GetResourceVersion())
}

func (r *recorder) OnDelete(o *watcherv1.Object) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.mirror, Key(o))
	r.log = append(r.log, "delete "+Key(o))
}

func (r *recorder) reset() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.log = nil
}

func (r *recorder) events() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.log...)
}

func runClient(t *testing.T, target string) *Client {
	t.Helper()
	return runClientWith(t, Config{Target: target}, nil, nil)
}

// runClientWith runs a client of Services with cfg (Target set), metrics in
// reg (may be nil), after setup (may be nil) has adjusted it.
func runClientWith(t *testing.T, cfg Config, reg prometheus.Registerer, setup func(*Client)) *Client {
	t.Helper()
	cfg.Plaintext = true
	if cfg.Kinds == nil {
		cfg.Kinds = []watcherv1.Kind{watcherv1.Kind_KIND_SERVICE}
	}
	c, err := New(cfg, nil, reg)
	if err != nil {
		t.Fatal(err)
	}
	if setup != nil {
		setup(c)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { c.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	return c
}
