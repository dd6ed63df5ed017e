package server

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"strconv"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/ipledger/ipledger/pkg/stream"
	watcherv1 "github.com/ipledger/ipledger/proto/ipledger/watcher/v1"
	watcherv1grpc "github.com/ipledger/ipledger/proto/ipledger/watcher/v1/watcherv1grpc"
	"github.com/ipledger/ipledger/services/ipam/internal/ledger"
)

const worldNS = "ipledger-system"

// allocatedWorldFree is an IP of pool "big" that allocatedWorld leaves free.
var allocatedWorldFree = netip.MustParseAddr("10.0.200.1")

// fakeWatcher serves a snapshot of its objects, SYNCED, then every upsert,
// so that the API reads a real stream.Store filled the way ipam's is.
type fakeWatcher struct {
	watcherv1grpc.UnimplementedWatcherServiceServer

	mu      sync.Mutex
	rev     uint64
	objects map[string]*watcherv1.Object
	subs    map[chan *watcherv1.WatchResponse]struct{}
}

func (f *fakeWatcher) Watch(_ *watcherv1.WatchRequest, st grpc.ServerStreamingServer[watcherv1.WatchResponse]) error {
	f.mu.Lock()
	ch := make(chan *watcherv1.WatchResponse, 1024)
	snap := make([]*watcherv1.WatchResponse, 0, len(f.objects)+1)
	for _, o := range f.objects {
		snap = append(snap, &watcherv1.WatchResponse{Type: watcherv1.EventType_EVENT_TYPE_UPSERT, Epoch: "e", Revision: f.rev, Object: o})
	}
	snap = append(snap, &watcherv1.WatchResponse{Type: watcherv1.EventType_EVENT_TYPE_SYNCED, Epoch: "e", Revision: f.rev, ResumeRevision: f.rev})
	f.subs[ch] = struct{}{}
	f.mu.Unlock()
	defer func() { f.mu.Lock(); delete(f.subs, ch); f.mu.Unlock() }()
	for _, r := range snap {
		if err := st.Send(r); err != nil {
			return err
		}
	}
	for {
		select {
		case <-st.Context().Done():
			return nil
		case r := <-ch:
			if err := st.Send(r); err != nil {
				return err
			}
		}
	}
}

// upsert stores o with the next resourceVersion and sends it to every stream.
func (f *fakeWatcher) upsert(o *watcherv1.Object) *watcherv1.Object {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.rev++
	o.Meta.ResourceVersion = strconv.FormatUint(f.rev, 10)
	f.objects[stream.Key(o)+"|"+o.GetKind().String()] = o
	for ch := range f.subs {
		ch <- &watcherv1.WatchResponse{Type: watcherv1.EventType_EVENT_TYPE_UPSERT, Epoch: "e", Revision: f.rev, ResumeRevision: f.rev, Object: o}
	}
	return o
}

// world is a stream.Store fed by a fakeWatcher over loopback gRPC.
type world struct {
	w      *fakeWatcher
	client *stream.Client
}

func newWorld(tb testing.TB, objs ...*watcherv1.Object) *world {
	tb.Helper()
	f := &fakeWatcher{objects: map[string]*watcherv1.Object{}, subs: map[chan *watcherv1.WatchResponse]struct{}{}}
	for _, o := range objs {
		f.upsert(o)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	srv := grpc.NewServer()
	watcherv1grpc.RegisterWatcherServiceServer(srv, f)
	go srv.Serve(ln)
	tb.Cleanup(srv.Stop)

	c, err := stream.New(stream.Config{Target: ln.Addr().String(), Plaintext: true, Kinds: []watcherv1.Kind{
		watcherv1.Kind_KIND_SERVICE, watcherv1.Kind_KIND_NAMESPACE, watcherv1.Kind_KIND_IP_POOL, watcherv1.Kind_KIND_LEDGER_CONFIG_MAP,
	}}, slog.New(slog.DiscardHandler), nil)
	if err != nil {
		tb.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { c.Run(ctx); close(done) }()
	tb.Cleanup(func() { cancel(); <-done })
	wctx, wcancel := context.WithTimeout(ctx, time.Minute)
	defer wcancel()
	if err := c.WaitForSync(wctx); err != nil {
		tb.Fatal(err)
	}
	return &world{w: f, client: c}
}

// put upserts o and waits until the store shows it.
func (w *world) put(tb testing.TB, o *watcherv1.Object) {
	tb.Helper()
	o = w.w.upsert(o)
	deadline := time.Now().Add(30 * time.Second)
	for {
		got, ok := w.client.Store().Get(o.GetKind(), o.GetMeta().GetNamespace(), o.GetMeta().GetName())
		if ok && got.GetMeta().GetResourceVersion() == o.GetMeta().GetResourceVersion() {
			return
		}
		if time.Now().After(deadline) {
			tb.Fatalf("the store never showed %s %s@%s", o.GetKind(), stream.Key(o), o.GetMeta().GetResourceVersion())
		}
		time.Sleep(time.Millisecond) // polling for a condition, with a deadline
	}
}

func (w *world) server() *Server {
	s, err := New(Config{Namespace: worldNS}, w.client.Store, nil, nil, slog.New(slog.DiscardHandler))
	if err != nil {
		panic(err) // no registry: nothing to fail on
	}
	return s
}

func poolObj(name string, addrs ...string) *watcherv1.Object {
	return &watcherv1.Object{Kind: watcherv1.Kind_KIND_IP_POOL,
		Meta: &watcherv1.ObjectMeta{Name: name, Uid: "uid-" + name, CreationTimestamp: 1},
		Body: &watcherv1.Object_IpPool{IpPool: &watcherv1.IPPool{Addresses: addrs, AutoAssign: true}}}
}

func namespaceObj(name string, labels map[string]string) *watcherv1.Object {
	return &watcherv1.Object{Kind: watcherv1.Kind_KIND_NAMESPACE,
		Meta: &watcherv1.ObjectMeta{Name: name, Uid: "uid-ns-" + name, Labels: labels},
		Body: &watcherv1.Object_Namespace{Namespace: &watcherv1.Namespace{Phase: "Active"}}}
}

// serviceObj is a LoadBalancer Service showing ips in its status.
func serviceObj(ns, name string, created int64, ips ...netip.Addr) *watcherv1.Object {
	svc := &watcherv1.Service{Type: "LoadBalancer", IpFamilyPolicy: "SingleStack", IpFamilies: []string{"IPv4"},
		Ports: []*watcherv1.ServicePort{{Name: "http", Protocol: "TCP", Port: 80}}}
	for _, ip := range ips {
		svc.Ingress = append(svc.Ingress, &watcherv1.LoadBalancerIngress{Ip: ip.String(), IpMode: "VIP"})
	}
	return &watcherv1.Object{Kind: watcherv1.Kind_KIND_SERVICE,
		Meta: &watcherv1.ObjectMeta{Namespace: ns, Name: name, Uid: "uid-" + ns + "-" + name, CreationTimestamp: created},
		Body: &watcherv1.Object_Service{Service: svc}}
}

// ledgerObj is the head shard holding allocs.
func ledgerObj(allocs []ledger.Allocation, reservations ...ledger.Reservation) *watcherv1.Object {
	data := ledger.Encode(ledger.Shard{Name: ledger.HeadName, Term: "bench-1", Allocations: allocs, Reservations: reservations})
	return &watcherv1.Object{Kind: watcherv1.Kind_KIND_LEDGER_CONFIG_MAP,
		Meta: &watcherv1.ObjectMeta{Namespace: worldNS, Name: ledger.HeadName, Uid: "uid-ledger-0", Labels: map[string]string{ledger.LabelKey: "true"}},
		Body: &watcherv1.Object_ConfigMap{ConfigMap: &watcherv1.ConfigMap{Data: data}}}
}

// allocatedWorld is n Services in 50 namespaces, each holding one IP of pool
// "big" (10.0.0.0/16) in the ledger and in its status, and pending more
// Services that hold nothing.
func allocatedWorld(n, pending int) []*watcherv1.Object {
	objs := []*watcherv1.Object{poolObj("big", "10.0.0.0/16"), poolObj("small", "192.168.0.0/28")}
	for i := range 50 {
		objs = append(objs, namespaceObj(fmt.Sprintf("ns-%d", i), map[string]string{"team": fmt.Sprint(i % 5)}))
	}
	allocs := make([]ledger.Allocation, n)
	for i := range n {
		ns, name := fmt.Sprintf("ns-%d", i%50), fmt.Sprintf("svc-%06d", i)
		ip := netip.AddrFrom4([4]byte{10, 0, byte(i >> 8), byte(i)})
		allocs[i] = ledger.Allocation{IP: ip, Pool: "big", Service: ledger.ServiceRef{Namespace: ns, Name: name, UID: "uid-" + ns + "-" + name},
			AllocatedAt: time.Unix(1_700_000_000, 0)}
		objs = append(objs, serviceObj(ns, name, int64(i+1), ip))
	}
	for i := range pending {
		objs = append(objs, serviceObj(fmt.Sprintf("ns-%d", i%50), fmt.Sprintf("pending-%04d", i), int64(n+i+1)))
	}
	return append(objs, ledgerObj(allocs))
}
