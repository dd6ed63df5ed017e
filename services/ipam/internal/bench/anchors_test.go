package bench

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"

	"github.com/ipledger/ipledger/lab/controlplane"
	"github.com/ipledger/ipledger/lab/testenv"
	"github.com/ipledger/ipledger/services/ipam/internal/controller"
)

// metallbPoolGVR is MetalLB's IPAddressPool, served once its CRDs are applied.
var metallbPoolGVR = schema.GroupVersionResource{Group: "metallb.io", Version: "v1beta1", Resource: "ipaddresspools"}

// anchorRun is one controller's cold start over the benchmark's Services.
type anchorRun struct {
	name           string
	took           time.Duration
	peakRSS        float64 // bytes, VmHWM
	writes, refuse float64 // Service status writes the API server accepted / refused
}

// BenchmarkAnchors runs two cold starts on one API server over the same N
// LoadBalancer Services with empty status: ipam first, then — statuses
// wiped, ipam and the watcher stopped — MetalLB's controller at the release
// pinned in hack/tools/metallb, with its CRDs applied, webhooks off, one
// IPAddressPool equal to ipam's IPPool and --lb-class set to the
// benchmark's class. Both are reported against the floors of the same run
// (N UpdateStatus calls from 1 and from 32 workers), with the peak RSS of
// each process (VmHWM) and the Service status writes each made, counted by
// the API server itself. Each controller, once it has allocated the N, then
// serves BenchmarkSteadyState's load (steadyCreates: N/5 creates at
// IPLEDGER_BENCH_RATE per second, a quarter of them deleted meanwhile),
// against the steady-state floor run in ipam's turn:
//
//	go test -run XXX -bench Anchors -benchtime 1x ./internal/bench/                          # N = 1,000
//	IPLEDGER_BENCH_N=10000 go test -run XXX -bench Anchors -benchtime 1x -timeout 60m ./internal/bench/
//
// IPLEDGER_METALLB_DIR is the folder hack/build-metallb.sh prints; unset,
// the benchmark runs the script (about 4 minutes the first time).
func BenchmarkAnchors(b *testing.B) {
	n := benchN()
	metallb := metallbDir(b)
	env := testenv.Get(b)
	ctx := context.Background()
	client := benchClient(env)
	ns := env.Namespace(b, nil)
	const class = "bench.ipledger.io/lb"
	pool := netip.MustParsePrefix("10.96.0.0/16")

	// ipam's pool has the benchmark's own name: BenchmarkColdStart's "bench"
	// may be in the same API server.
	poolName := ns
	ippool := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "ipledger.io/v1alpha1", "kind": "IPPool", "metadata": map[string]any{"name": poolName},
		"spec": map[string]any{"addresses": []any{pool.String()}},
	}}
	if _, err := env.Dynamic.Resource(controller.PoolGVR).Create(ctx, ippool, metav1.CreateOptions{}); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = env.Dynamic.Resource(controller.PoolGVR).Delete(ctx, poolName, metav1.DeleteOptions{}) })

	svcs := createServices(b, env, client, ns, class, n)
	watcherAddr := testenv.FreeAddr(b)
	watcher := testenv.StartProcess(b, "watcher", env.Binary(b, "watcher"), nil,
		"--kubeconfig", env.CP.KubeconfigPath, "--grpc-addr", watcherAddr, "--grpc-plaintext", "--namespace", ns,
		"--ops-addr", testenv.FreeAddr(b), "--log-format", "text")
	floor1, floor32 := svcs.floors(b)
	b.Logf("floors: 1 worker %s, 32 workers %s", floor1.Round(time.Millisecond), floor32.Round(time.Millisecond))

	tokenFile := env.TokenFile(b, testenv.SystemNamespace, "ipledger-ipam")
	ipamBin := env.Binary(b, "ipam")
	// The steady state of each controller once it has allocated the N
	// (issue 31 §1): m more Services at rate per second, and the floor of
	// BenchmarkSteadyState in ipam's turn (ipam still running).
	m, rate := max(n/5, 20), envInt("IPLEDGER_BENCH_RATE", 50)
	var ipamSteady, floorSteady, mlbSteady latencies
	b.ResetTimer()
	ipam := coldStart(b, client, ns, n, pool, "ipam", func() *testenv.Process {
		return testenv.StartProcess(b, "ipam", ipamBin, nil,
			"--kubeconfig", env.CP.KubeconfigPath, "--namespace", ns, "--lb-class", class, "--log-format", "text", "--log-level", "warn",
			"--watcher-addr", watcherAddr, "--watcher-token-file", tokenFile, "--watcher-plaintext",
			"--grpc-addr", testenv.FreeAddr(b), "--grpc-plaintext", "--ops-addr", testenv.FreeAddr(b))
	}, func() {
		ipamSteady = steadyCreates(b, client, ns, class, "ipam-steady-", m, rate)
		floor := startFloor(b, client, ns, floorClass, ledgerShardBytes(b, client, ns))
		floorSteady = steadyCreates(b, client, ns, floorClass, "floor-steady-", m, rate)
		floor.stop()
	})
	// ipam reads the world from the watcher, which is part of every
	// ipledger installation: its memory is reported beside ipam's. MetalLB
	// needs no watcher: stop it, so that it loads the API server during
	// ipam's run only.
	watcherRSS := processPeakRSS(b, watcher.PID())
	if err := watcher.Stop(30 * time.Second); err != nil {
		b.Logf("watcher exited: %v", err)
	}
	svcs.wipe(b)

	mlbNS := installMetalLB(b, env, metallb, pool)
	version, err := os.ReadFile(filepath.Join(metallb, "version"))
	if err != nil {
		b.Fatal(err)
	}
	mlb := coldStart(b, client, ns, n, pool, "MetalLB "+strings.TrimSpace(string(version)), func() *testenv.Process {
		return testenv.StartProcess(b, "metallb-controller", filepath.Join(metallb, "metallb-controller"),
			[]string{"KUBECONFIG=" + env.CP.KubeconfigPath},
			"--namespace", mlbNS, "--pod-name", "controller", "--lb-class", class, "--webhook-mode", "disabled",
			"--port", port(b), "--health-probe-port", port(b), "--log-level", "warn")
	}, func() {
		mlbSteady = steadyCreates(b, client, ns, class, "metallb-steady-", m, rate)
	})
	b.StopTimer()

	b.ReportMetric(floor1.Seconds(), "floor1-s")
	b.ReportMetric(floor32.Seconds(), "floor32-s")
	b.ReportMetric(watcherRSS/1e6, "watcher-rss-MB")
	for _, r := range []struct {
		prefix string
		run    anchorRun
	}{{"ipam", ipam}, {"metallb", mlb}} {
		b.ReportMetric(r.run.took.Seconds(), r.prefix+"-s")
		b.ReportMetric(r.run.took.Seconds()/floor32.Seconds(), r.prefix+"-x-floor32")
		b.ReportMetric(r.run.took.Seconds()/floor1.Seconds(), r.prefix+"-x-floor1")
		b.ReportMetric(r.run.peakRSS/1e6, r.prefix+"-rss-MB")
		b.ReportMetric(r.run.writes, r.prefix+"-status-writes")
	}
	// One line per Log call: hack/bench.sh keeps the lines that start with
	// this file's name.
	b.Logf("N=%d, floors of this run: 1 worker %s, 32 workers %s", n, floor1.Round(time.Millisecond), floor32.Round(time.Millisecond))
	b.Log("| controller | all N have an IP | × 32-worker floor | × 1-worker floor | peak RSS | status writes (refused) |")
	for _, r := range []anchorRun{ipam, mlb} {
		b.Logf("| %s | %.1f s | %.2f× | %.2f× | %.0f MB | %.0f (%.0f) |", r.name, r.took.Seconds(),
			r.took.Seconds()/floor32.Seconds(), r.took.Seconds()/floor1.Seconds(), r.peakRSS/1e6, r.writes, r.refuse)
	}
	b.Logf("ipam's watcher (the stream ipam reads the world from; it ran through the floors and ipam's run): peak RSS %.0f MB", watcherRSS/1e6)
	b.Logf("steady state, N=%d allocated, %d creates at %d/s (and %d of them deleted meanwhile): create → address p50 / p99 / max", n, m, rate, m/4)
	b.Log("| controller | p50 | p99 | max | × floor p50 | × floor p99 |")
	for _, r := range []struct {
		name string
		l    latencies
	}{{"floor (CAS of a ledger-shard-sized ConfigMap, then ipam's patch)", floorSteady}, {"ipam", ipamSteady}, {mlb.name, mlbSteady}} {
		b.Logf("| %s | %s | %s | %s | %.2f× | %.2f× |", r.name, r.l.p(50), r.l.p(99), r.l.p(100),
			ratio(r.l.p(50), floorSteady.p(50)), ratio(r.l.p(99), floorSteady.p(99)))
	}
	b.ReportMetric(ratio(ipamSteady.p(50), floorSteady.p(50)), "ipam-steady-x-floor-p50")
	b.ReportMetric(ratio(ipamSteady.p(99), floorSteady.p(99)), "ipam-steady-x-floor-p99")
	b.ReportMetric(ratio(mlbSteady.p(50), floorSteady.p(50)), "metallb-steady-x-floor-p50")
	b.ReportMetric(ratio(mlbSteady.p(99), floorSteady.p(99)), "metallb-steady-x-floor-p99")
}

// steadyCreates is BenchmarkSteadyState's load for a controller that has
// allocated the N: m Services created at rate per second, one in four of
// them deleted meanwhile (the oldest that has an address; the N must stay
// for the next controller's cold start), then every one of them deleted
// and gone. It returns their create → address latencies.
func steadyCreates(b *testing.B, client kubernetes.Interface, ns, class, prefix string, m, rate int) latencies {
	b.Helper()
	ctx := context.Background()
	next := 0
	deleteOldest := func() {
		name := fmt.Sprintf("%s%05d", prefix, next)
		s, err := client.CoreV1().Services(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil || len(s.Status.LoadBalancer.Ingress) == 0 {
			return // not addressed yet: deleted at a later call
		}
		if err := client.CoreV1().Services(ns).Delete(ctx, name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			b.Fatal(err)
		}
		next++
	}
	got, _ := createAtRate(b, client, ns, class, prefix, m, rate, deleteOldest)
	for i := next; i < m; i++ {
		if err := client.CoreV1().Services(ns).Delete(ctx, fmt.Sprintf("%s%05d", prefix, i), metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			b.Fatal(err)
		}
	}
	testenv.Eventually(b, 5*time.Minute, func() error {
		list, err := client.CoreV1().Services(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		for _, s := range list.Items {
			if strings.HasPrefix(s.Name, prefix) {
				return fmt.Errorf("Service %s is not gone yet", s.Name)
			}
		}
		return nil
	})
	return got
}

// coldStart starts a controller with start and measures its cold start over
// the n Services of ns: the time from process start until every one has an
// IP, its peak RSS, and the Service status writes the API server saw from
// then until they stopped. It checks that every IP is in pool and on one
// Service only, and stops the process.
func coldStart(b *testing.B, client kubernetes.Interface, ns string, n int, pool netip.Prefix, name string, start func() *testenv.Process, running func()) anchorRun {
	b.Helper()
	ctx := context.Background()
	okBefore, refusedBefore := apiStatusWrites(b, client)
	begin := time.Now()
	p := start()
	waitAllAssigned(b, client, ns, n, p)
	r := anchorRun{name: name, took: time.Since(begin)}
	// Writes that land after the last IP (a controller re-deciding what it
	// has done) count too: wait until the count stops moving.
	var last float64 = -1
	stable := time.Now()
	testenv.Eventually(b, 2*time.Minute, func() error {
		ok, refused := apiStatusWrites(b, client)
		if ok != last {
			last, stable = ok, time.Now()
		}
		r.writes, r.refuse = ok-okBefore, refused-refusedBefore
		if time.Since(stable) < 2*time.Second {
			return fmt.Errorf("%s: %v status writes so far, still moving", name, r.writes)
		}
		return nil
	})
	r.peakRSS = processPeakRSS(b, p.PID())
	if running != nil {
		running()
	}
	if err := p.Stop(30 * time.Second); err != nil {
		b.Logf("%s exited: %v", name, err)
	}

	list, err := client.CoreV1().Services(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		b.Fatal(err)
	}
	seen := map[netip.Addr]string{}
	for _, s := range list.Items {
		ip, err := netip.ParseAddr(s.Status.LoadBalancer.Ingress[0].IP)
		if err != nil || !pool.Contains(ip) {
			b.Fatalf("%s gave %s/%s the IP %q, outside the pool %s", name, ns, s.Name, s.Status.LoadBalancer.Ingress[0].IP, pool)
		}
		if other, dup := seen[ip]; dup {
			b.Fatalf("%s gave %s to both %s and %s", name, ip, other, s.Name)
		}
		seen[ip] = s.Name
	}
	b.Logf("%s: every one of %d Services has an IP after %s; %v status writes (%v refused), peak RSS %.0f MB",
		name, n, r.took.Round(time.Millisecond), r.writes, r.refuse, r.peakRSS/1e6)
	return r
}

// waitAllAssigned watches the Services of ns until all n have an IP. A
// watch costs the API server one encoding per change, where polling LISTs
// of N Services would load it with work neither controller asked for.
func waitAllAssigned(b *testing.B, client kubernetes.Interface, ns string, n int, p *testenv.Process) {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	assigned := map[string]bool{}
	list, err := client.CoreV1().Services(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		b.Fatal(err)
	}
	for _, s := range list.Items {
		assigned[s.Name] = len(s.Status.LoadBalancer.Ingress) > 0
	}
	rv := list.ResourceVersion
	count := func() int {
		c := 0
		for _, ok := range assigned {
			if ok {
				c++
			}
		}
		return c
	}
	for count() < n {
		w, err := client.CoreV1().Services(ns).Watch(ctx, metav1.ListOptions{ResourceVersion: rv, AllowWatchBookmarks: true})
		if err != nil {
			b.Fatalf("watch Services of %s: %v", ns, err)
		}
	events:
		for {
			select {
			case <-p.Done():
				w.Stop()
				b.Fatalf("%s exited before every Service had an IP (%d of %d): %v", p.Name, count(), n, p.Err())
			case <-ctx.Done():
				w.Stop()
				b.Fatalf("%d of %d Services have an IP after 30 minutes", count(), n)
			case ev, open := <-w.ResultChan():
				if !open {
					break events
				}
				s, ok := ev.Object.(*corev1.Service)
				if !ok {
					if ev.Type == watch.Error {
						// An expired resourceVersion: start over from a LIST.
						w.Stop()
						waitAllAssigned(b, client, ns, n, p)
						return
					}
					continue
				}
				rv = s.ResourceVersion
				if ev.Type == watch.Bookmark {
					continue
				}
				assigned[s.Name] = ev.Type != watch.Deleted && len(s.Status.LoadBalancer.Ingress) > 0
				if count() >= n {
					w.Stop()
					return
				}
			}
		}
	}
}

// installMetalLB applies the CRDs of the MetalLB release in dir (without
// the conversion-webhook patch: webhooks are off), and creates the
// namespace MetalLB reads its configuration from, one IPAddressPool holding
// pool, and the Pod object the controller looks itself up by (it owns the
// ConfigurationState it writes; no kubelet runs it). It returns the
// namespace.
func installMetalLB(b *testing.B, env *testenv.Env, dir string, pool netip.Prefix) string {
	b.Helper()
	ctx := context.Background()
	crds := filepath.Join(dir, "crd")
	if _, err := env.Kubectl(ctx, "apply", "--server-side", "-f", crds); err != nil {
		b.Fatal(err)
	}
	if _, err := testenv.WaitEstablished(ctx, env.Kubectl, time.Minute, "-f", crds); err != nil {
		b.Fatal(err)
	}
	ns := env.Namespace(b, map[string]string{"app": "metallb"})
	if _, err := env.Client.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "controller", Labels: map[string]string{"app": "metallb", "component": "controller"}},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "controller", Image: "quay.io/metallb/controller"}}},
	}, metav1.CreateOptions{}); err != nil {
		b.Fatal(err)
	}
	ipPool := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "metallb.io/v1beta1", "kind": "IPAddressPool", "metadata": map[string]any{"name": "bench", "namespace": ns},
		"spec": map[string]any{"addresses": []any{pool.String()}},
	}}
	if _, err := env.Dynamic.Resource(metallbPoolGVR).Namespace(ns).Create(ctx, ipPool, metav1.CreateOptions{}); err != nil {
		b.Fatal(err)
	}
	return ns
}

// metallbDir is the folder of MetalLB's controller and CRDs:
// $IPLEDGER_METALLB_DIR, else what hack/build-metallb.sh prints.
func metallbDir(b *testing.B) string {
	b.Helper()
	if dir := os.Getenv("IPLEDGER_METALLB_DIR"); dir != "" {
		return dir
	}
	root, err := controlplane.RepoRoot()
	if err != nil {
		b.Fatal(err)
	}
	cmd := exec.Command(filepath.Join(root, "hack", "build-metallb.sh"))
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		b.Fatalf("hack/build-metallb.sh: %v", err)
	}
	return strings.TrimSpace(string(out))
}

// benchN is IPLEDGER_BENCH_N, 1,000 when unset.
func benchN() int {
	if v, err := strconv.Atoi(os.Getenv("IPLEDGER_BENCH_N")); err == nil && v > 0 {
		return v
	}
	return 1000
}

// port is a free loopback port number, for flags that take a number.
func port(b *testing.B) string {
	_, p, _ := strings.Cut(testenv.FreeAddr(b), ":")
	return p
}
