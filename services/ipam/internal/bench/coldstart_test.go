// Package bench measures ipam's headline benchmark (BENCHMARKS.md): N
// LoadBalancer Services with empty status, ipam started cold, time until
// every Service has an IP — against two floors measured in the same run on
// the same API server: N status writes from one client worker and from 32.
// Then the restart: ipam started again over the N allocated Services, time
// to its first new allocation.
//
//	go test -run XXX -bench ColdStart ./internal/bench/                          # N = 1,000
//	IPLEDGER_BENCH_N=10000 IPLEDGER_BENCH_ROUNDS=3 go test -run XXX -bench ColdStart -timeout 60m ./internal/bench/
//
// IPLEDGER_BENCH_RESTARTS (5) repeats the restart (each with
// one new Service), with the milestones of each. IPLEDGER_BENCH_ROUNDS repeats floors and cold start over the same
// Services (statuses, annotations and ledger wiped in between), so that
// one set-up gives the spread of several runs. IPLEDGER_BENCH_ARGS adds
// ipam flags, IPLEDGER_BENCH_IPAM_ENV ipam's environment (GOMEMLIMIT=…),
// IPLEDGER_BENCH_PPROF a CPU profile's path (of the first round), IPLEDGER_BENCH_HEAP
// the path of a heap profile taken after the first cold start (of each
// variant: variant.profilePath) once its history is written, its log beside
// it (saveHeap),
// IPLEDGER_BENCH_RESTART_HEAP a prefix for heap profiles after each restart,
// IPLEDGER_BENCH_RESTART_PPROF a prefix for CPU profiles of each restart's
// first IPLEDGER_BENCH_RESTART_PPROF_SECONDS (1), IPLEDGER_BENCH_APISERVER_PPROF a prefix for the API server's CPU profiles
// of the first round's phases, IPLEDGER_BENCH_SKIP_FLOOR1 (non-empty) leaves the
// 1-worker floor out (7 minutes at 100,000 Services), IPLEDGER_BENCH_SETUP
// how the Services are made (createServices).
package bench

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/ipledger/ipledger/lab/testenv"
	"github.com/ipledger/ipledger/services/ipam/internal/allocator"
	"github.com/ipledger/ipledger/services/ipam/internal/controller"
	"github.com/ipledger/ipledger/services/ipam/internal/history"
	"github.com/ipledger/ipledger/services/ipam/internal/ledger"
)

// TestMain starts a control plane only when benchmarks run: the package
// holds no tests, and `make test` should not pay for an API server here.
func TestMain(m *testing.M) {
	flag.Parse()
	if flag.Lookup("test.bench").Value.String() == "" {
		os.Exit(m.Run())
	}
	testenv.Main(m)
}

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

// parallel runs fn(i) for i in [0, n) on workers goroutines.
func parallel(n, workers int, fn func(i int) error) error {
	var next atomic.Int64
	var first error
	var mu sync.Mutex
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				if err := fn(i); err != nil {
					mu.Lock()
					if first == nil {
						first = err
					}
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	return first
}

// round is one cold start and the floors measured just before it.
type round struct {
	floor1, floor32, patch32, ipam time.Duration
	rssMB                          float64
	load                           string
	variant                        int
}

func BenchmarkColdStart(b *testing.B) {
	n := envInt("IPLEDGER_BENCH_N", 1000)
	rounds := envInt("IPLEDGER_BENCH_ROUNDS", 1)
	env := testenv.Get(b)
	ctx := context.Background()
	client := benchClient(env)
	ns := env.Namespace(b, nil)
	class := "bench.ipledger.io/lb"

	pool := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "ipledger.io/v1alpha1", "kind": "IPPool", "metadata": map[string]any{"name": "bench"},
		"spec": map[string]any{"addresses": []any{poolFor(n)}},
	}}
	if _, err := env.Dynamic.Resource(controller.PoolGVR).Create(ctx, pool, metav1.CreateOptions{}); err != nil {
		b.Fatal(err)
	}
	svcs := createServices(b, env, client, ns, class, n)
	b.Logf("set-up load %s", loadavg())
	// The floors' addresses: 10.base.0.0 on, 65,536 to each second octet
	// (so base, base+1 for N up to 131,072).
	ipOf := func(base int) func(i int) string {
		return func(i int) string { return fmt.Sprintf("10.%d.%d.%d", base+i>>16, i>>8&255, i&255) }
	}
	// The watcher runs during the floors too: it is part of every ipledger
	// installation, and its informers load the same API server.
	watcherAddr, watcherOps := testenv.FreeAddr(b), testenv.FreeAddr(b)
	watcher := testenv.StartProcess(b, "watcher", env.Binary(b, "watcher"), nil,
		"--kubeconfig", env.CP.KubeconfigPath, "--grpc-addr", watcherAddr, "--grpc-plaintext", "--namespace", ns,
		"--ops-addr", watcherOps, "--log-format", "text")
	testenv.Eventually(b, time.Minute, func() error {
		if scrape(ctx, watcherOps, `ipledger_watcher_objects{kind="KIND_SERVICE"}`) < float64(n) {
			return fmt.Errorf("the watcher does not hold the %d Services yet", n)
		}
		return nil
	})
	cpu := newCPUUse()
	cpu.add("apiserver", env.CP.APIServerPID())
	cpu.add("etcd", env.CP.EtcdPID())
	cpu.add("watcher", watcher.PID())
	cpu.add("bench", os.Getpid())

	tokenFile := env.TokenFile(b, testenv.SystemNamespace, "ipledger-ipam")
	vars := variants(b, env)
	args := strings.Fields(os.Getenv("IPLEDGER_BENCH_ARGS"))
	// Environment for ipam alone, e.g. IPLEDGER_BENCH_IPAM_ENV="GOMEMLIMIT=64MiB".
	ipamEnv := strings.Fields(os.Getenv("IPLEDGER_BENCH_IPAM_ENV"))
	startIPAM := func(v int, name, opsAddr string, extra ...string) *testenv.Process {
		return testenv.StartProcess(b, name, vars[v].bin, ipamEnv, slices.Concat(args, []string{
			"--kubeconfig", env.CP.KubeconfigPath, "--namespace", ns, "--lb-class", class, "--log-format", "text", "--log-level", "warn",
			"--watcher-addr", watcherAddr, "--watcher-token-file", tokenFile, "--watcher-plaintext",
			"--grpc-addr", testenv.FreeAddr(b), "--grpc-plaintext", "--ops-addr", opsAddr, "--enable-pprof"}, extra)...)
	}

	var results []round
	var ipam *testenv.Process
	var opsAddr string
	b.ResetTimer()
	b.StopTimer()
	for r := range rounds {
		if r > 0 {
			if err := ipam.Stop(30 * time.Second); err != nil {
				b.Logf("ipam exited: %v", err)
			}
			if err := client.CoreV1().ConfigMaps(ns).DeleteCollection(ctx, metav1.DeleteOptions{},
				metav1.ListOptions{LabelSelector: ledger.LabelKey + "=true"}); err != nil {
				b.Fatal(err)
			}
			// Alternating ipam with and without the history, every cold
			// start is a first install's: the history goes with the
			// ledger, so that each round with it writes the same 10,000
			// grants to an empty history.
			if len(vars) > 1 {
				if err := client.CoreV1().ConfigMaps(ns).DeleteCollection(ctx, metav1.DeleteOptions{},
					metav1.ListOptions{LabelSelector: history.LabelKey + "=true"}); err != nil {
					b.Fatal(err)
				}
			}
			svcs.reread(b)
		}
		load := loadavg()
		var floor1 time.Duration // IPLEDGER_BENCH_SKIP_FLOOR1: 7 minutes at 100,000 Services
		if os.Getenv("IPLEDGER_BENCH_SKIP_FLOOR1") == "" {
			floor1 = svcs.setStatus(b, 1, ipOf(200))
		}
		apiProfile := os.Getenv("IPLEDGER_BENCH_APISERVER_PPROF")
		if apiProfile != "" && r == 0 {
			go profileAPIServer(client, apiProfile+".floor32")
		}
		cpu.begin()
		floor32 := svcs.setStatus(b, 32, ipOf(210))
		floorCPU := cpu.since()
		// Beside the floors, not instead of them: the same 32 workers
		// writing what ipam writes, the way ipam must (a merge patch of the
		// status subresource, conditional on the resourceVersion, with
		// the condition and the annotation). What it costs over the
		// 32-worker floor is the price of the patch, not of ipam.
		if apiProfile != "" && r == 0 {
			go profileAPIServer(client, apiProfile+".patch32")
		}
		cpu.begin()
		patch32 := patchStatus(ctx, b, client, svcs.objs, ipOf(220))
		patchCPU := cpu.since()
		svcs.setStatus(b, 32, func(int) string { return "" })
		b.Logf("round %d floors: 1 worker %s, 32 workers %s, 32 workers writing ipam's merge patch %s; CPU s during the 32-worker floor: %s; during the patch floor: %s",
			r+1, floor1.Round(time.Millisecond), floor32.Round(time.Millisecond), patch32.Round(time.Millisecond),
			cpu.format(floorCPU), cpu.format(patchCPU))

		// ipam, cold.
		opsAddr = testenv.FreeAddr(b)
		writesBefore := apiWrites(b, client)
		b.StartTimer()
		start := time.Now()
		v := variantOf(r, len(vars))
		ipam = startIPAM(v, fmt.Sprintf("ipam-%d", r+1), opsAddr)
		cpu.add("ipam", ipam.PID())
		cpu.begin()
		if path := os.Getenv("IPLEDGER_BENCH_PPROF"); path != "" && r == 0 {
			go profile(opsAddr, path)
		}
		if apiProfile != "" && r == 0 {
			go profileAPIServer(client, apiProfile+".ipam")
		}
		// Done is when ipam's n-th status write has returned, as a floor is
		// done when its last write has: ipam's counter is polled (cheap),
		// not the API server, which a LIST of N Services every 50 ms would
		// load during ipam's run and not during the floors'. Checked below
		// against the API server: every Service has an IP, with exactly n
		// writes.
		var firstWrite time.Duration
		testenv.Eventually(b, 30*time.Minute, func() error {
			if ipam.Exited() {
				return fmt.Errorf("ipam exited: %v", ipam.Err())
			}
			v := scrape(ctx, opsAddr, `ipledger_ipam_status_writes_total{result="ok"}`)
			if v > 0 && firstWrite == 0 {
				firstWrite = time.Since(start)
			}
			if v < float64(n) {
				return fmt.Errorf("ipam wrote %v of %d statuses", v, n)
			}
			return nil
		})
		took := time.Since(start)
		b.StopTimer()
		ipamCPU := cpu.since()
		b.Logf("round %d API writes during ipam's cold start: %s", r+1, writesSince(writesBefore, apiWrites(b, client)))
		rss := processPeakRSS(b, ipam.PID()) / 1e6
		b.Logf("round %d resident memory of ipam at the end: %s", r+1, residentSplit(ipam.PID()))
		results = append(results, round{floor1: floor1, floor32: floor32, patch32: patch32, ipam: took, rssMB: rss, load: load + " → " + loadavg(), variant: v})
		if path := os.Getenv("IPLEDGER_BENCH_HEAP"); path != "" && r < len(vars) {
			// After the RSS peak is read: waiting for the history's write
			// would move where that peak is taken.
			waitHistoryWritten(b, ctx, opsAddr)
			saveHeap(b, opsAddr, ipam, vars[v].profilePath(path))
		}
		verify(ctx, b, client, ns, n)
		writes := scrape(ctx, opsAddr, `ipledger_ipam_status_writes_total{result="ok"}`)
		if writes != float64(n) {
			b.Fatalf("ipam made %v status writes for %d Services, want exactly one each", writes, n)
		}
		passes := scrape(ctx, opsAddr, "ipledger_ipam_reconcile_duration_seconds_count")
		shards := scrape(ctx, opsAddr, "ipledger_ipam_ledger_shards")
		b.Logf("round %d (%s): N=%d ipam %s = %.2f× the 32-worker floor, %.2f× the 1-worker floor, %.2f× the patch floor (first write after %s); RSS peak %.0f MB; "+
			"%v ledger writes, %v passes of %.0f ms on average (decide, commit, launch the writes); ledger %v shards, %.0f KB each on average; load %s",
			r+1, vars[v].name, n, took.Round(time.Millisecond), took.Seconds()/floor32.Seconds(), took.Seconds()/floor1.Seconds(), took.Seconds()/patch32.Seconds(),
			firstWrite.Round(time.Millisecond), rss,
			scrape(ctx, opsAddr, `ipledger_ipam_ledger_writes_total{result="ok"}`), passes,
			1000*scrape(ctx, opsAddr, "ipledger_ipam_reconcile_duration_seconds_sum")/passes,
			shards, scrape(ctx, opsAddr, "ipledger_ipam_ledger_bytes")/shards/1000, results[r].load)
		// CPU is what contention on a shared machine cannot blur: the
		// work all the processes did for ipam's cold start, against the
		// work they did for each floor.
		b.Logf("round %d (%s) CPU s during ipam's cold start: %s (API server %.2f ms per status write, floors %.2f and %.2f with the patch; "+
			"all processes %.1f s = %.2f× the 32-worker floor's, %.2f× the patch floor's)", r+1, vars[v].name, cpu.format(ipamCPU),
			1000*ipamCPU["apiserver"]/float64(n), 1000*floorCPU["apiserver"]/float64(n), 1000*patchCPU["apiserver"]/float64(n),
			sum(ipamCPU), sum(ipamCPU)/sum(floorCPU), sum(ipamCPU)/sum(patchCPU))
	}

	// Restart with N ledger entries, IPLEDGER_BENCH_RESTARTS times (5):
	// time from process start to the first new allocation, against the
	// restart floor, and how many status writes the new process makes.
	floorSvc, err := client.CoreV1().Services(ns).Create(ctx, lbService(ns, "restart-floor", "floor.bench.ipledger.io/none"), metav1.CreateOptions{})
	if err != nil {
		b.Fatal(err)
	}
	measureRestarts(b, ctx, client, ns, class, n, envInt("IPLEDGER_BENCH_RESTARTS", 5), ipam, vars, startIPAM, func(i int) time.Duration {
		return restartFloor(b, ctx, client, watcherAddr, tokenFile, ns, floorSvc, i)
	})

	// The figures of the median round (by ratio to the 32-worker floor),
	// the worst RSS of all.
	slices.SortFunc(results, func(a, b round) int {
		return cmpFloat(a.ipam.Seconds()/a.floor32.Seconds(), b.ipam.Seconds()/b.floor32.Seconds())
	})
	med := results[len(results)/2]
	var rss float64
	var ratios []string
	for _, r := range results {
		rss = max(rss, r.rssMB)
		ratios = append(ratios, fmt.Sprintf("%.2f", r.ipam.Seconds()/r.floor32.Seconds()))
	}
	b.ReportMetric(med.ipam.Seconds(), "ipam-s")
	b.ReportMetric(med.floor1.Seconds(), "floor1-s")
	b.ReportMetric(med.floor32.Seconds(), "floor32-s")
	b.ReportMetric(med.ipam.Seconds()/med.floor32.Seconds(), "x-floor32")
	if med.floor1 > 0 {
		b.ReportMetric(med.ipam.Seconds()/med.floor1.Seconds(), "x-floor1")
	}
	b.ReportMetric(med.ipam.Seconds()/med.patch32.Seconds(), "x-patch32")
	b.ReportMetric(rss, "rss-MB")
	b.Logf("N=%d, %d rounds: × the 32-worker floor %s (median %.2f), RSS peak at most %.0f MB",
		n, len(results), strings.Join(ratios, " "), med.ipam.Seconds()/med.floor32.Seconds(), rss)
	if len(vars) > 1 {
		coldStartByVariant(b, vars, results)
	}
}

// coldStartByVariant logs each variant's cold starts, in round order: the
// ratios to each floor and the RSS peaks, with their medians, and the
// ratio of the medians (the first variant's over the second's).
func coldStartByVariant(b *testing.B, vars []variant, results []round) {
	slices.SortStableFunc(results, func(a, b round) int { return cmpFloat(float64(a.variant), float64(b.variant)) })
	meds := make([][3]float64, len(vars))
	for v := range vars {
		var p32, f32, rss []float64
		for _, r := range results {
			if r.variant == v {
				p32 = append(p32, r.ipam.Seconds()/r.patch32.Seconds())
				f32 = append(f32, r.ipam.Seconds()/r.floor32.Seconds())
				rss = append(rss, r.rssMB)
			}
		}
		meds[v] = [3]float64{median(p32), median(f32), median(rss)}
		b.Logf("cold start, %s: × the patch floor %s (median %.2f); × the 32-worker floor %s (median %.2f); RSS peak %s MB (median %.0f)",
			vars[v].name, floats(p32, "%.2f"), meds[v][0], floats(f32, "%.2f"), meds[v][1], floats(rss, "%.0f"), meds[v][2])
	}
	b.Logf("cold start, %s / %s (medians): × the patch floor %.2f, × the 32-worker floor %.2f, RSS peak %.2f",
		vars[0].name, vars[1].name, meds[0][0]/meds[1][0], meds[0][1]/meds[1][1], meds[0][2]/meds[1][2])
}

// median is the middle of xs (the mean of the two middle ones for an even
// count); xs is not changed.
func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// floats formats xs with format, space-separated.
func floats(xs []float64, format string) string {
	parts := make([]string, len(xs))
	for i, x := range xs {
		parts[i] = fmt.Sprintf(format, x)
	}
	return strings.Join(parts, " ")
}

func sum(m map[string]float64) float64 {
	var t float64
	for _, v := range m {
		t += v
	}
	return t
}

func cmpFloat(a, b float64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// patchStatus writes every Service's status with 32 workers as ipam does:
// one JSON merge patch of the status subresource carrying the ingress,
// ipam's condition and the allocated-from-pool annotation, conditional on
// the resourceVersion.
func patchStatus(ctx context.Context, b *testing.B, client kubernetes.Interface, objs []*corev1.Service, ip func(i int) string) time.Duration {
	b.Helper()
	start := time.Now()
	if err := parallel(len(objs), 32, func(i int) error {
		s := objs[i]
		body := ipamStatusPatch(s.ResourceVersion, s.Generation, ip(i), "bench")
		out, err := client.CoreV1().Services(s.Namespace).Patch(ctx, s.Name, types.MergePatchType, body,
			metav1.PatchOptions{FieldManager: "ipledger-ipam"}, "status")
		if err == nil {
			objs[i] = out
		}
		return err
	}); err != nil {
		b.Fatal(err)
	}
	return time.Since(start)
}

// verify checks the cold start against the API server: every Service has
// one IP and the allocated-from-pool annotation, no IP is on two Services,
// and the ledger holds exactly the statuses.
func verify(ctx context.Context, b *testing.B, client kubernetes.Interface, ns string, n int) {
	b.Helper()
	list, err := client.CoreV1().Services(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		b.Fatal(err)
	}
	seen := map[string]string{}
	for _, s := range list.Items {
		if len(s.Status.LoadBalancer.Ingress) != 1 {
			b.Fatalf("%s has %d IPs after ipam's %d writes, want 1", s.Name, len(s.Status.LoadBalancer.Ingress), n)
		}
		ip := s.Status.LoadBalancer.Ingress[0].IP
		if pool := s.Annotations[allocator.AnnotationAllocatedFromPool]; pool != "bench" {
			b.Fatalf("%s has an IP but allocated-from-pool %q, want bench (it is written with the status)", s.Name, pool)
		}
		if other, dup := seen[ip]; dup {
			b.Fatalf("%s on %s and %s", ip, other, s.Name)
		}
		seen[ip] = s.Name
	}
	st, err := ledger.Read(ctx, client, ns)
	if err != nil {
		b.Fatal(err)
	}
	for _, a := range st.Allocations {
		if seen[a.IP.String()] != a.Service.Name {
			b.Fatalf("ledger %s=%s, status says %q", a.IP, a.Service.Name, seen[a.IP.String()])
		}
	}
	if len(st.Allocations) != n {
		b.Fatalf("ledger holds %d allocations, want %d", len(st.Allocations), n)
	}
}

// profile saves a CPU profile of ipam while it allocates, for go tool
// pprof: IPLEDGER_BENCH_PPROF_SECONDS long (8 s unless set), from 1 s after
// its start.
func profile(opsAddr, path string) {
	time.Sleep(time.Second)
	saveProfile(opsAddr, fmt.Sprintf("profile?seconds=%d", envInt("IPLEDGER_BENCH_PPROF_SECONDS", 8)), path)
}

// profileAPIServer saves a 5-second CPU profile of the API server to path
// (IPLEDGER_BENCH_APISERVER_PPROF=prefix: prefix.floor32, .patch32 and
// .ipam, each started with its phase of the first round), so that what a
// phase costs the API server can be taken apart.
func profileAPIServer(client kubernetes.Interface, path string) {
	raw, err := client.CoreV1().RESTClient().Get().AbsPath("/debug/pprof/profile").Param("seconds", "5").DoRaw(context.Background())
	if err == nil {
		_ = os.WriteFile(path, raw, 0o644)
	}
}

func saveProfile(opsAddr, which, path string) {
	resp, err := http.Get("http://" + opsAddr + "/debug/pprof/" + which)
	if err != nil {
		return
	}
	defer resp.Body.Close()
	f, err := os.Create(path)
	if err != nil {
		return
	}
	defer f.Close()
	_, _ = io.Copy(f, resp.Body)
}

// saveHeap saves the heap profile of the process p at opsAddr to path, and
// its log so far beside it (path.log: with IPLEDGER_BENCH_IPAM_ENV=
// GODEBUG=gctrace=1, every GC's heap before and after, and its goal).
func saveHeap(b *testing.B, opsAddr string, p *testenv.Process, path string) {
	b.Helper()
	saveProfile(opsAddr, "heap", path)
	log, err := os.ReadFile(p.LogPath)
	if err == nil {
		err = os.WriteFile(path+".log", log, 0o644)
	}
	if err != nil {
		b.Logf("keeping %s's log beside its heap profile: %v", p.Name, err)
	}
}

// poolFor is the benchmark pool's range: the /16 of every earlier run up to
// 65,000 Services, a /14 beyond (issue 31's 100,000).
func poolFor(n int) string {
	if n <= 65000 {
		return "10.96.0.0/16"
	}
	return "10.96.0.0/14"
}
