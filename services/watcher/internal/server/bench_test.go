package server

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/ipledger/ipledger/lab/heapstat"
	"github.com/ipledger/ipledger/pkg/convert"
	watcherv1 "github.com/ipledger/ipledger/proto/ipledger/watcher/v1"
	watcherv1grpc "github.com/ipledger/ipledger/proto/ipledger/watcher/v1/watcherv1grpc"
	"github.com/ipledger/ipledger/services/watcher/internal/store"
)

// The benchmarks measure the watcher's own work: objects are put straight into
// the store (creating them through an API server would measure the API
// server), streams go over loopback gRPC without TLS or authorization.
const benchSubscribers = 50

// benchObjects is the store size; -bench-objects=50000 for the large case.
var benchObjects = 10000

func init() {
	flag.IntVar(&benchObjects, "bench-objects", benchObjects, "objects in the store for the fan-out and latency benchmarks")
}

func benchPod(i, rv int, sent int64) *watcherv1.Object {
	return &watcherv1.Object{Kind: watcherv1.Kind_KIND_POD,
		Meta: &watcherv1.ObjectMeta{Namespace: fmt.Sprintf("ns-%d", i%100), Name: fmt.Sprintf("pod-%d", i), Uid: fmt.Sprintf("uid-%d", i),
			ResourceVersion: strconv.Itoa(rv), Labels: map[string]string{"app": "bench", "ipledger.io/externalip": "192.0.2.1"},
			Annotations: map[string]string{"ipledger.io/sent": strconv.FormatInt(sent, 10)}},
		Body: &watcherv1.Object_Pod{Pod: &watcherv1.Pod{NodeName: "node-1", Phase: "Running", PodIps: []string{"10.0.0.1"}}}}
}

func benchServer(b *testing.B) (*store.Store, watcherv1grpc.WatcherServiceClient) {
	b.Helper()
	st := store.New("bench", 100000)
	for i := range benchObjects {
		st.Upsert(store.Encode(benchPod(i, 1, 0)))
	}
	srv := New(Config{HeartbeatInterval: time.Minute, QueueSize: 100000}, st, nil, slog.New(slog.DiscardHandler), nil)
	return st, serve(b, srv)
}

func serve(b *testing.B, impl watcherv1grpc.WatcherServiceServer) watcherv1grpc.WatcherServiceClient {
	gs := grpc.NewServer()
	watcherv1grpc.RegisterWatcherServiceServer(gs, impl)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	go gs.Serve(ln)
	b.Cleanup(gs.Stop)
	conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { conn.Close() })
	return watcherv1grpc.NewWatcherServiceClient(conn)
}

var benchReq = &watcherv1.WatchRequest{Kinds: []watcherv1.Kind{watcherv1.Kind_KIND_POD}}

// BenchmarkSnapshotFanout: one op = 50 subscribers each receive a snapshot of
// 10,000 objects up to SYNCED. The floor is the same 50 streams served by a
// bare gRPC handler sending the same responses, already built, with no store,
// filter or queue: what the transport and the clients' decoding cost alone.
func BenchmarkSnapshotFanout(b *testing.B) {
	b.Run("watcher", func(b *testing.B) {
		_, client := benchServer(b)
		fanout(b, client)
	})
	b.Run("floor", func(b *testing.B) {
		var resps []*watcherv1.WatchResponse
		for i := range benchObjects {
			resps = append(resps, &watcherv1.WatchResponse{Type: watcherv1.EventType_EVENT_TYPE_UPSERT, Epoch: "floor", Revision: 1, Object: benchPod(i, 1, 0)})
		}
		resps = append(resps, &watcherv1.WatchResponse{Type: watcherv1.EventType_EVENT_TYPE_SYNCED, Epoch: "floor", Revision: 1})
		fanout(b, serve(b, floorServer{resps: resps}))
	})
}

type floorServer struct {
	watcherv1grpc.UnimplementedWatcherServiceServer
	resps []*watcherv1.WatchResponse
}

func (f floorServer) Watch(_ *watcherv1.WatchRequest, s grpc.ServerStreamingServer[watcherv1.WatchResponse]) error {
	for _, r := range f.resps {
		if err := s.Send(r); err != nil {
			return err
		}
	}
	<-s.Context().Done()
	return nil
}

func fanout(b *testing.B, client watcherv1grpc.WatcherServiceClient) {
	b.ResetTimer()
	for range b.N {
		var wg sync.WaitGroup
		errs := make(chan error, benchSubscribers)
		for range benchSubscribers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				s, err := client.Watch(ctx, benchReq)
				if err != nil {
					errs <- err
					return
				}
				n := 0
				for {
					ev, err := s.Recv()
					if err != nil {
						errs <- err
						return
					}
					if ev.GetType() == watcherv1.EventType_EVENT_TYPE_SYNCED {
						if n != benchObjects {
							errs <- fmt.Errorf("snapshot of %d, want %d", n, benchObjects)
						}
						return
					}
					n++
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(benchObjects*benchSubscribers*b.N)/b.Elapsed().Seconds(), "objects/s")
}

// BenchmarkDeltaLatency: 50 synced subscribers; one op = one change, made at
// 1,000 changes/s; reports the latency from the store write to each
// subscriber's receipt.
func BenchmarkDeltaLatency(b *testing.B) {
	st, client := benchServer(b)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var (
		mu       sync.Mutex
		lat      []time.Duration
		wg       sync.WaitGroup
		received atomic.Int64
	)
	ready := make(chan struct{}, benchSubscribers)
	for range benchSubscribers {
		s, err := client.Watch(ctx, benchReq)
		if err != nil {
			b.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			var mine []time.Duration
			defer func() { mu.Lock(); lat = append(lat, mine...); mu.Unlock() }()
			for {
				ev, err := s.Recv()
				if err != nil {
					return
				}
				switch ev.GetType() {
				case watcherv1.EventType_EVENT_TYPE_SYNCED:
					ready <- struct{}{}
				case watcherv1.EventType_EVENT_TYPE_UPSERT:
					if ev.GetOldObject() == nil {
						continue
					}
					sent, _ := strconv.ParseInt(ev.GetObject().GetMeta().GetAnnotations()["ipledger.io/sent"], 10, 64)
					mine = append(mine, time.Duration(time.Now().UnixNano()-sent))
					received.Add(1)
				}
			}
		}()
	}
	for range benchSubscribers {
		<-ready
	}
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	b.ResetTimer()
	for i := range b.N {
		<-tick.C
		st.Upsert(store.Encode(benchPod(i%benchObjects, i+2, time.Now().UnixNano())))
	}
	// Let the last changes arrive (coalescing may deliver fewer), then stop.
	for deadline := time.Now().Add(5 * time.Second); received.Load() < int64(b.N*benchSubscribers) && time.Now().Before(deadline); {
		time.Sleep(5 * time.Millisecond)
	}
	b.StopTimer()
	cancel()
	wg.Wait()
	if len(lat) == 0 {
		b.Fatal("no deltas received")
	}
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
	b.ReportMetric(float64(len(lat))/float64(b.N*benchSubscribers), "delivered/sent")
}

// BenchmarkStoreMemory reports the heap held per object by the watcher's
// compact store, beside the heap of the same Services as typed client-go
// objects (what each consumer's own informer cache would hold), measured in
// the same run.
func BenchmarkStoreMemory(b *testing.B) {
	for range b.N {
		compact := heapDelta(func() any {
			st := store.New("mem", 0)
			for i := range benchObjects {
				st.Upsert(store.Encode(convert.Service(benchService(i))))
			}
			return st
		})
		typed := heapDelta(func() any {
			objs := make([]*corev1.Service, benchObjects)
			for i := range objs {
				objs[i] = benchService(i)
			}
			return objs
		})
		b.ReportMetric(compact/float64(benchObjects), "compact-B/obj")
		b.ReportMetric(typed/float64(benchObjects), "typed-B/obj")
	}
}

var keep any

func heapDelta(build func() any) float64 {
	before := heapstat.Live()
	keep = build()
	after := heapstat.Live()
	keep = nil
	return float64(after) - float64(before)
}

// benchService is a typical LoadBalancer Service as the API server returns it
// (managedFields stripped, as the watcher's informers do).
func benchService(i int) *corev1.Service {
	ipv4 := corev1.IPv4Protocol
	single := corev1.IPFamilyPolicySingleStack
	vip := corev1.LoadBalancerIPModeVIP
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: fmt.Sprintf("ns-%d", i%100), Name: fmt.Sprintf("svc-%d", i), UID: types.UID(fmt.Sprintf("3f2a9c1e-0000-4000-8000-%012d", i)),
			ResourceVersion: strconv.Itoa(100000 + i), Generation: 1, CreationTimestamp: metav1.Now(),
			Labels:      map[string]string{"app": fmt.Sprintf("app-%d", i), "team": "payments"},
			Annotations: map[string]string{"ipledger.io/allocated-from-pool": "default", "kubectl.kubernetes.io/last-applied-configuration": strings.Repeat("x", 400)}},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, ClusterIP: "10.96.0.10", ClusterIPs: []string{"10.96.0.10"},
			IPFamilies: []corev1.IPFamily{ipv4}, IPFamilyPolicy: &single, Selector: map[string]string{"app": fmt.Sprintf("app-%d", i)},
			Ports:                 []corev1.ServicePort{{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80, TargetPort: intstr.FromInt32(8080), NodePort: 30080}},
			ExternalTrafficPolicy: corev1.ServiceExternalTrafficPolicyCluster, SessionAffinity: corev1.ServiceAffinityNone},
		Status: corev1.ServiceStatus{LoadBalancer: corev1.LoadBalancerStatus{Ingress: []corev1.LoadBalancerIngress{{IP: "192.0.2.10", IPMode: &vip}}}},
	}
}
