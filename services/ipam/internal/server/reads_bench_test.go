package server

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	ipamv1 "github.com/ipledger/ipledger/proto/ipledger/ipam/v1"
	ipamv1grpc "github.com/ipledger/ipledger/proto/ipledger/ipam/v1/ipamv1grpc"
	watcherv1 "github.com/ipledger/ipledger/proto/ipledger/watcher/v1"
	"github.com/ipledger/ipledger/services/ipam/internal/allocator"
	"github.com/ipledger/ipledger/services/ipam/internal/ledger"
	"github.com/ipledger/ipledger/services/ipam/internal/objects"
	"github.com/ipledger/ipledger/services/ipam/internal/plan"
)

const benchCallers = 50

// BenchmarkReads runs 50 concurrent gRPC callers (loopback, one connection
// each) of ExplainService and ListPools against a replica whose stream holds
// IPLEDGER_BENCH_N (default 10,000) allocated Services, their ledger and 100
// pending Services, and reports the latency per call (p50, p99), the
// process CPU per call and the cores used. Beside the API as it is
// ("served") it measures, in the same run:
//   - idle: the process with the stream connected and nobody calling;
//   - floor: a handler answering the same pre-built responses (gRPC alone);
//   - rebuild-per-call: the reads as they were before issue 12 item 6, which
//     rebuilt the allocator from the stream on every call;
//   - served-ledger-change-10Hz: the API as it is while the ledger changes
//     ten times a second. Here one op is one ledger change followed by
//     100 ms of calls (ns/op is therefore ≈100 ms); the figures per call
//     and the rebuilds per change are what to read.
func BenchmarkReads(b *testing.B) {
	n := 10000
	if v, err := strconv.Atoi(os.Getenv("IPLEDGER_BENCH_N")); err == nil && v > 0 {
		n = v
	}
	w := newWorld(b, allocatedWorld(n, 100)...)
	reg := prometheus.NewRegistry()
	served, err := New(Config{Namespace: worldNS, Registerer: reg}, w.client.Store, nil, nil, slog.New(slog.DiscardHandler))
	if err != nil {
		b.Fatal(err)
	}

	// Callers ask about allocated and pending Services alike.
	var targets []*ipamv1.ServiceRef
	for i := range 10 {
		targets = append(targets,
			&ipamv1.ServiceRef{Namespace: fmt.Sprintf("ns-%d", (i*n/10)%50), Name: fmt.Sprintf("svc-%06d", i*n/10)},
			&ipamv1.ServiceRef{Namespace: fmt.Sprintf("ns-%d", i%50), Name: fmt.Sprintf("pending-%04d", i)})
	}
	ctx := context.Background()
	explainResp, err := served.ExplainService(ctx, &ipamv1.ExplainServiceRequest{Service: targets[1]})
	if err != nil {
		b.Fatal(err)
	}
	poolsResp, err := served.ListPools(ctx, &ipamv1.ListPoolsRequest{})
	if err != nil {
		b.Fatal(err)
	}

	impls := map[string]ipamv1grpc.IPAMServiceServer{
		"floor":            &canned{explain: explainResp, pools: poolsResp},
		"rebuild-per-call": &rebuildPerCall{Server: served},
		"served":           served,
	}
	calls := map[string]func(c ipamv1grpc.IPAMServiceClient, i int) error{
		"ExplainService": func(c ipamv1grpc.IPAMServiceClient, i int) error {
			_, err := c.ExplainService(ctx, &ipamv1.ExplainServiceRequest{Service: targets[i%len(targets)]})
			return err
		},
		"ListPools": func(c ipamv1grpc.IPAMServiceClient, _ int) error {
			_, err := c.ListPools(ctx, &ipamv1.ListPoolsRequest{})
			return err
		},
	}
	// rebuilds returns the count and the total seconds of the served API's
	// rebuilds.
	rebuilds := func() (n, seconds float64) {
		mfs, err := reg.Gather()
		if err != nil {
			b.Fatal(err)
		}
		for _, mf := range mfs {
			if mf.GetName() == "ipledger_ipam_api_rebuild_duration_seconds" {
				for _, m := range mf.GetMetric() {
					n += float64(m.GetHistogram().GetSampleCount())
					seconds += m.GetHistogram().GetSampleSum()
				}
			}
		}
		return n, seconds
	}

	b.Run("idle", func(b *testing.B) {
		cpu0, t0 := cpuTime(), time.Now()
		for b.Loop() {
			time.Sleep(10 * time.Millisecond) // nothing to do: what the process costs at rest
		}
		b.ReportMetric(float64(cpuTime()-cpu0)/float64(time.Since(t0)), "cores")
	})
	for _, method := range []string{"ExplainService", "ListPools"} {
		for _, impl := range []string{"floor", "rebuild-per-call", "served", "served-ledger-change-10Hz"} {
			b.Run(method+"/"+impl, func(b *testing.B) {
				name, changing := strings.CutSuffix(impl, "-ledger-change-10Hz")
				conns := dial(b, impls[name])
				var drive func(b *testing.B)
				if changing {
					drive = ledgerChanges(w, n)
				}
				n0, s0 := rebuilds()
				runCallers(b, conns, calls[method], drive)
				if name == "served" {
					n1, s1 := rebuilds()
					b.ReportMetric(n1-n0, "rebuilds")
					if n1 > n0 {
						b.ReportMetric((s1-s0)*1000/(n1-n0), "ms/rebuild")
					}
				}
			})
		}
	}
}

// runCallers runs benchCallers goroutines, one connection each, calling in a
// closed loop: b.N calls in all, or, with drive, until drive returns. It
// reports latency percentiles and CPU per call and in cores.
func runCallers(b *testing.B, conns []ipamv1grpc.IPAMServiceClient, call func(ipamv1grpc.IPAMServiceClient, int) error, drive func(*testing.B)) {
	var next atomic.Int64
	var stop atomic.Bool
	lat := make([][]time.Duration, len(conns))
	var wg sync.WaitGroup
	var failed atomic.Value
	b.ResetTimer()
	cpu0, t0 := cpuTime(), time.Now()
	for c := range conns {
		wg.Go(func() {
			for !stop.Load() {
				i := next.Add(1)
				if drive == nil && i > int64(b.N) {
					return
				}
				start := time.Now()
				if err := call(conns[c], int(i)); err != nil {
					failed.Store(err)
					stop.Store(true)
					return
				}
				lat[c] = append(lat[c], time.Since(start))
			}
		})
	}
	if drive != nil {
		drive(b)
		stop.Store(true)
	}
	wg.Wait()
	wall, cpu := time.Since(t0), cpuTime()-cpu0
	b.StopTimer()
	if err, _ := failed.Load().(error); err != nil {
		b.Fatal(err)
	}
	all := slices.Concat(lat...)
	slices.Sort(all)
	pct := func(p float64) float64 { return float64(all[int(p*float64(len(all)-1))]) / float64(time.Millisecond) }
	b.ReportMetric(pct(0.50), "p50-ms")
	b.ReportMetric(pct(0.99), "p99-ms")
	b.ReportMetric(float64(cpu)/float64(time.Millisecond)/float64(len(all)), "cpu-ms/call")
	b.ReportMetric(float64(cpu)/float64(wall), "cores")
	b.ReportMetric(float64(len(all))/wall.Seconds(), "calls/s")
}

// cpuTime is the process's user plus system CPU time.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		panic(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// dial serves impl on loopback and opens benchCallers connections to it.
func dial(b *testing.B, impl ipamv1grpc.IPAMServiceServer) []ipamv1grpc.IPAMServiceClient {
	b.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	srv := grpc.NewServer()
	ipamv1grpc.RegisterIPAMServiceServer(srv, impl)
	go srv.Serve(ln)
	b.Cleanup(srv.Stop)
	out := make([]ipamv1grpc.IPAMServiceClient, benchCallers)
	for i := range out {
		cc, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { cc.Close() })
		out[i] = ipamv1grpc.NewIPAMServiceClient(cc)
	}
	return out
}

// ledgerChanges returns a driver that changes the ledger b.N times, ten
// times a second (one allocation comes and goes), as a busy leader would.
func ledgerChanges(w *world, n int) func(*testing.B) {
	var base []ledger.Allocation
	for _, o := range allocatedWorld(n, 0) {
		if o.GetKind() == watcherv1.Kind_KIND_LEDGER_CONFIG_MAP {
			st, _, err := ledger.Parse(map[string]map[string]string{ledger.HeadName: o.GetConfigMap().GetData()})
			if err != nil {
				panic(err)
			}
			base = st.Allocations
		}
	}
	with := ledgerObj(slices.Concat(base, []ledger.Allocation{{IP: allocatedWorldFree, Pool: "big",
		Service: ledger.ServiceRef{Namespace: "ns-0", Name: "pending-0000", UID: "uid-ns-0-pending-0000"}}}))
	without := ledgerObj(base)
	return func(b *testing.B) {
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		for i := range b.N {
			o := without
			if i%2 == 0 {
				o = with
			}
			// A new object each time: the store holds the last one.
			w.w.upsert(&watcherv1.Object{Kind: o.GetKind(), Meta: &watcherv1.ObjectMeta{Namespace: worldNS, Name: o.GetMeta().GetName(),
				Uid: o.GetMeta().GetUid(), Labels: o.GetMeta().GetLabels()}, Body: o.GetBody()})
			<-t.C
		}
	}
}

// canned answers the pre-built responses: the cost of gRPC alone.
type canned struct {
	ipamv1grpc.UnimplementedIPAMServiceServer
	explain *ipamv1.ExplainServiceResponse
	pools   *ipamv1.ListPoolsResponse
}

func (c *canned) ExplainService(context.Context, *ipamv1.ExplainServiceRequest) (*ipamv1.ExplainServiceResponse, error) {
	return c.explain, nil
}

func (c *canned) ListPools(context.Context, *ipamv1.ListPoolsRequest) (*ipamv1.ListPoolsResponse, error) {
	return c.pools, nil
}

// rebuildPerCall answers ExplainService and ListPools the way the API did
// before issue 12 item 6 (commit 84664e6): the whole allocator rebuilt from
// the stream on every call. Kept only as the benchmark's "before".
type rebuildPerCall struct{ *Server }

func (s *rebuildPerCall) world() (plan.Rebuilt, error) {
	st, _, err := s.ledgerState()
	if err != nil {
		return plan.Rebuilt{}, err
	}
	pools, _ := (&objects.PoolSet{}).Parse(s.store().List(watcherv1.Kind_KIND_IP_POOL))
	nss := objects.NewIndex(s.store().List(watcherv1.Kind_KIND_NAMESPACE)...)
	return plan.Rebuild(plan.Inputs{Ledger: st, Pools: pools, Env: objects.Env{Objects: nss}, LBClass: s.cfg.LBClass,
		Services: s.store().All(watcherv1.Kind_KIND_SERVICE)}), nil
}

func (s *rebuildPerCall) ListPools(ctx context.Context, req *ipamv1.ListPoolsRequest) (*ipamv1.ListPoolsResponse, error) {
	st, _, err := s.ledgerState()
	if err != nil {
		return nil, err
	}
	poolObjs := s.store().List(watcherv1.Kind_KIND_IP_POOL)
	pools, _ := (&objects.PoolSet{}).Parse(poolObjs)
	r := plan.Rebuild(plan.Inputs{Ledger: st, Pools: pools, LBClass: s.cfg.LBClass})
	slices.SortFunc(poolObjs, func(a, b *watcherv1.Object) int { return strings.Compare(a.GetMeta().GetName(), b.GetMeta().GetName()) })
	resp := &ipamv1.ListPoolsResponse{}
	for _, o := range poolObjs {
		p := o.GetIpPool()
		out := &ipamv1.Pool{
			Name: o.GetMeta().GetName(), Addresses: p.GetAddresses(), AutoAssign: p.GetAutoAssign(),
			Priority: p.GetAllocation().GetPriority(),
			Ipv4:     &ipamv1.FamilyUsage{Total: "0", Used: "0"}, Ipv6: &ipamv1.FamilyUsage{Total: "0", Used: "0"},
		}
		if u, ok := r.Alloc.Usage(out.Name); ok {
			out.Ipv4 = &ipamv1.FamilyUsage{Total: u.IPv4.Total.String(), Used: u.IPv4.Used.String()}
			out.Ipv6 = &ipamv1.FamilyUsage{Total: u.IPv6.Total.String(), Used: u.IPv6.Used.String()}
		}
		for _, c := range p.GetConditions() {
			out.Conditions = append(out.Conditions, &ipamv1.PoolCondition{Type: c.GetType(), Status: c.GetStatus(), Reason: c.GetReason(), Message: c.GetMessage()})
		}
		resp.Pools = append(resp.Pools, out)
	}
	return resp, nil
}

func (s *rebuildPerCall) ExplainService(ctx context.Context, req *ipamv1.ExplainServiceRequest) (*ipamv1.ExplainServiceResponse, error) {
	ns, name := req.GetService().GetNamespace(), req.GetService().GetName()
	obj, ok := s.store().Get(watcherv1.Kind_KIND_SERVICE, ns, name)
	if !ok {
		return nil, status.Errorf(codes.NotFound, "Service %s/%s does not exist", ns, name)
	}
	r, err := s.world()
	if err != nil {
		return nil, err
	}
	areq, perr := objects.Request(obj, s.env())
	resp := &ipamv1.ExplainServiceResponse{}
	if perr != nil {
		resp.Reason = string(allocator.ReasonInvalidRequest)
		return resp, nil
	}
	x := r.Alloc.Explain(areq)
	resp.Reason, resp.Decision = string(x.Reason), x.Decision
	for _, ip := range x.IPs {
		resp.Ips = append(resp.Ips, ip.String())
	}
	for _, v := range x.Verdicts {
		resp.Verdicts = append(resp.Verdicts, &ipamv1.PoolVerdict{Pool: v.Pool, Eligible: v.Eligible, Reason: string(v.Reason), Message: v.Message})
	}
	return resp, nil
}
