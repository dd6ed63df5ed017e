package controller

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/ipledger/ipledger/pkg/leader"
	"github.com/ipledger/ipledger/pkg/stream"
	watcherv1 "github.com/ipledger/ipledger/proto/ipledger/watcher/v1"
	watcherv1grpc "github.com/ipledger/ipledger/proto/ipledger/watcher/v1/watcherv1grpc"
	"github.com/ipledger/ipledger/services/ipam/internal/ledger"
	"github.com/ipledger/ipledger/services/ipam/internal/objects"
	"github.com/ipledger/ipledger/services/ipam/internal/plan"
)

// Unit tests of the worker's I/O paths with fakes for its I/O: the stream
// (a watcher serving a fixed snapshot over loopback gRPC, read by the real
// stream client), the API server's IPPools (client-go's fake dynamic
// client, whose patches are recorded and may be refused), and a term with
// no Lease (leader.NewTerm).

// snapshotWatcher serves its objects, then SYNCED, then nothing more.
type snapshotWatcher struct {
	watcherv1grpc.UnimplementedWatcherServiceServer
	objs []*watcherv1.Object
}

func (f *snapshotWatcher) Watch(_ *watcherv1.WatchRequest, st grpc.ServerStreamingServer[watcherv1.WatchResponse]) error {
	n := uint64(len(f.objs))
	for i, o := range f.objs {
		if err := st.Send(&watcherv1.WatchResponse{Type: watcherv1.EventType_EVENT_TYPE_UPSERT, Epoch: "e", Revision: uint64(i + 1), Object: o}); err != nil {
			return err
		}
	}
	if err := st.Send(&watcherv1.WatchResponse{Type: watcherv1.EventType_EVENT_TYPE_SYNCED, Epoch: "e", Revision: n, ResumeRevision: n}); err != nil {
		return err
	}
	<-st.Context().Done()
	return nil
}

// snapshotStream is a synced stream client showing objs.
func snapshotStream(t *testing.T, objs ...*watcherv1.Object) *stream.Client {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	watcherv1grpc.RegisterWatcherServiceServer(srv, &snapshotWatcher{objs: objs})
	go srv.Serve(ln)
	t.Cleanup(srv.Stop)
	c, err := stream.New(stream.Config{Target: ln.Addr().String(), Plaintext: true,
		Kinds: []watcherv1.Kind{watcherv1.Kind_KIND_SERVICE, watcherv1.Kind_KIND_IP_POOL}}, slog.New(slog.DiscardHandler), nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { c.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	wctx, wcancel := context.WithTimeout(ctx, time.Minute)
	defer wcancel()
	if err := c.WaitForSync(wctx); err != nil {
		t.Fatal(err)
	}
	return c
}

// fakePools is the API server's IPPools: every patch is recorded, and
// answered with refuse[pool] when set.
type fakePools struct {
	*dynamicfake.FakeDynamicClient
	mu     sync.Mutex
	refuse map[string]error
}

func newFakePools() *fakePools {
	f := &fakePools{FakeDynamicClient: dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
		map[schema.GroupVersionResource]string{PoolGVR: "IPPoolList"}), refuse: map[string]error{}}
	f.PrependReactor("patch", "ippools", func(a k8stesting.Action) (bool, runtime.Object, error) {
		name := a.(k8stesting.PatchAction).GetName()
		f.mu.Lock()
		defer f.mu.Unlock()
		if err := f.refuse[name]; err != nil {
			return true, nil, err
		}
		u := &unstructured.Unstructured{}
		u.SetName(name)
		return true, u, nil
	})
	return f
}

func (f *fakePools) setRefuse(pool string, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.refuse[pool] = err
}

// patches renders the patches sent since the last call, one per line:
// "pool/subresource body".
func (f *fakePools) patches() []string {
	var out []string
	for _, a := range f.Actions() {
		if p, ok := a.(k8stesting.PatchAction); ok {
			out = append(out, fmt.Sprintf("%s/%s %s", p.GetName(), p.GetSubresource(), p.GetPatch()))
		}
	}
	f.ClearActions()
	return out
}

func testPool(name, cidr string, finalizers ...string) *watcherv1.Object {
	return &watcherv1.Object{Kind: watcherv1.Kind_KIND_IP_POOL,
		Meta: &watcherv1.ObjectMeta{Name: name, Uid: "uid-" + name, CreationTimestamp: int64(time.Second), Generation: 1,
			ResourceVersion: "3", Finalizers: finalizers},
		Body: &watcherv1.Object_IpPool{IpPool: &watcherv1.IPPool{Addresses: []string{cidr}, AutoAssign: true}}}
}

// newTestWorker is a term's worker over a stream showing objs and the
// fake IPPools; withAlloc gives it an allocator rebuilt from objs and an
// empty ledger (a serving term's), else it has none (an opening one's).
func newTestWorker(t *testing.T, withAlloc bool, objs ...*watcherv1.Object) (*worker, *fakePools) {
	t.Helper()
	pools := newFakePools()
	c, err := New(Config{Namespace: "ipledger-system"}, nil, pools, snapshotStream(t, objs...), slog.New(slog.DiscardHandler), prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	term, stop, end := leader.NewTerm(context.Background(), "test", "term-1")
	t.Cleanup(func() { stop(); end() })
	w := newWorker(c, term)
	if withAlloc {
		ps, invalid := c.pools.Parse(w.store().List(watcherv1.Kind_KIND_IP_POOL))
		w.alloc, w.invalidPools = plan.Rebuild(plan.Inputs{Pools: ps, LBClass: objects.DefaultLBClass}).Alloc, invalid
	}
	return w, pools
}

// A corrupt ledger owes every pool its status: the phase transition writes
// nothing, the loop's next step writes each pool's once, and a pass with
// nothing changed writes nothing more.
func TestWorkerWritesTheStatusesACorruptLedgerOwes(t *testing.T) {
	w, pools := newTestWorker(t, false, testPool("p", "10.0.0.0/30"), testPool("q", "10.0.1.0/30"))
	ctx := context.Background()
	w.enter(fmt.Errorf("open: %w", &ledger.CorruptError{Shard: "ipledger-ledger", Err: errors.New("bad entry")}), true)
	if got := pools.patches(); len(got) != 0 || w.phase != corrupt || !w.statusesOwed || !w.ready() {
		t.Fatalf("enter(corrupt): patches %v, phase %v, owed %t, ready %t; want none, corrupt, true, true", got, w.phase, w.statusesOwed, w.ready())
	}
	w.step(ctx)
	got := pools.patches()
	if len(got) != 2 || !strings.HasPrefix(got[0], "p/status ") || !strings.HasPrefix(got[1], "q/status ") {
		t.Fatalf("step wrote %q; want the status of p, then q", got)
	}
	for _, p := range got {
		if !strings.Contains(p, `"reason":"LedgerUnreadable","status":"False","type":"Ready"`) {
			t.Fatalf("status patch %s does not say LedgerUnreadable", p)
		}
	}
	if w.statusesOwed || len(w.poolStatuses.written) != 2 {
		t.Fatalf("after the step: owed %t, %d statuses remembered; want false, 2", w.statusesOwed, len(w.poolStatuses.written))
	}
	w.writePoolStatuses(ctx, nil)
	if got := pools.patches(); len(got) != 0 {
		t.Fatalf("nothing changed, yet %q were written", got)
	}
}

// A status write the API server refuses is not remembered: the next pass
// writes it again, and only it.
func TestWorkerRemembersOnlyTheStatusesWritten(t *testing.T) {
	w, pools := newTestWorker(t, true, testPool("p", "10.0.0.0/30"), testPool("q", "10.0.1.0/30"))
	ctx := context.Background()
	pools.setRefuse("p", apierrors.NewForbidden(PoolGVR.GroupResource(), "p", errors.New("denied")))
	w.writePoolStatuses(ctx, nil)
	if got := pools.patches(); len(got) != 2 {
		t.Fatalf("first pass sent %q; want both pools' statuses", got)
	}
	if _, ok := w.poolStatuses.written["p"]; ok || len(w.poolStatuses.written) != 1 {
		t.Fatalf("remembered %v; want q only", w.poolStatuses.written)
	}
	pools.setRefuse("p", nil)
	w.writePoolStatuses(ctx, nil)
	if got := pools.patches(); len(got) != 1 || !strings.HasPrefix(got[0], "p/status ") || !strings.Contains(got[0], `"reason":"Serving"`) {
		t.Fatalf("second pass sent %q; want p's status alone", got)
	}
}

// A change of counts alone soon after a write is deferred to the end of
// the interval, not written.
func TestWorkerDefersACountsOnlyStatusChange(t *testing.T) {
	w, pools := newTestWorker(t, true, testPool("p", "10.0.0.0/30"))
	ctx := context.Background()
	w.writePoolStatuses(ctx, nil)
	pools.patches()
	last := w.poolStatuses.written["p"]
	before := *last.Status.IPv4
	before.Used++
	last.Status.IPv4, last.At = &before, time.Now()
	w.poolStatuses.written["p"] = last
	w.writePoolStatuses(ctx, nil)
	if got := pools.patches(); len(got) != 0 {
		t.Fatalf("a counts-only change was written at once: %q", got)
	}
	if due := w.poolStatuses.due; due.Before(last.At) || due.After(last.At.Add(time.Second)) {
		t.Fatalf("deferred write due %v; want within a second of %v", due, last.At)
	}
}

// Finalizers: a new pool gets ours, a Terminating pool no Service holds
// loses it; a refused patch is retried after the finalizers' backoff, and a
// success ends the run of failures.
func TestWorkerSyncsPoolFinalizers(t *testing.T) {
	gone := testPool("gone", "10.0.1.0/30", objects.PoolFinalizer)
	gone.Meta.DeletionTimestamp = int64(time.Hour)
	w, pools := newTestWorker(t, true, testPool("p", "10.0.0.0/30"), gone, testPool("kept", "10.0.2.0/30", objects.PoolFinalizer))
	ctx := context.Background()
	pools.setRefuse("p", apierrors.NewConflict(PoolGVR.GroupResource(), "p", errors.New("changed")))
	w.syncPoolFinalizers(ctx, w.holders())
	want := []string{ // in the store's order
		`gone/ {"metadata":{"finalizers":[],"resourceVersion":"3"}}`,
		`p/ {"metadata":{"finalizers":["` + objects.PoolFinalizer + `"],"resourceVersion":"3"}}`,
	}
	if got := pools.patches(); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("patches =\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if n := w.retries[finalizersKey]; n != 1 {
		t.Fatalf("after a refused patch, %d finalizer failures counted; want 1", n)
	}
	w.syncPoolFinalizers(ctx, w.holders())
	if n := w.retries[finalizersKey]; n != 2 {
		t.Fatalf("after a second refusal, %d failures; want 2", n)
	}
	pools.setRefuse("p", nil)
	pools.patches()
	w.syncPoolFinalizers(ctx, w.holders())
	if _, ok := w.retries[finalizersKey]; ok {
		t.Fatalf("a pass with every patch written still counts failures: %v", w.retries)
	}
}
