// Package bench measures ipam's headline benchmark (BENCHMARKS.md): N
// LoadBalancer Services with empty status, ipam started cold, time until
// every Service has an IP — against two floors measured in the same run on
// the same API server: N status writes from one client worker and from 32.
//
//	go test -run XXX -bench ColdStart ./internal/bench/                          # N = 1,000
//	IPLEDGER_BENCH_N=10000 go test -run XXX -bench ColdStart -timeout 60m ./internal/bench/
//
// IPLEDGER_BENCH_ARGS adds ipam flags, IPLEDGER_BENCH_IPAM_ENV ipam's
// environment (GOMEMLIMIT=…), IPLEDGER_BENCH_PPROF a CPU profile's path,
// IPLEDGER_BENCH_HEAP the path of a heap profile taken after the cold start.
package bench

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/ipledger/ipledger/pkg/testenv"
	"github.com/ipledger/ipledger/services/ipam/internal/controller"
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

func freePort(b testing.TB) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
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

func BenchmarkColdStart(b *testing.B) {
	n := 1000
	if v, err := strconv.Atoi(os.Getenv("IPLEDGER_BENCH_N")); err == nil && v > 0 {
		n = v
	}
	env := testenv.Get(b)
	ctx := context.Background()
	// The benchmark's own client: rate limits raised like ipam's.
	cfg := rest.CopyConfig(env.Config)
	cfg.QPS, cfg.Burst = 5000, 10000
	client := kubernetes.NewForConfigOrDie(cfg)
	ns := env.Namespace(b, nil)
	class := "bench.ipledger.io/lb"
	name := func(i int) string { return fmt.Sprintf("s%05d", i) }

	pool := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "ipledger.io/v1alpha1", "kind": "IPPool", "metadata": map[string]any{"name": "bench"},
		"spec": map[string]any{"addresses": []any{"10.96.0.0/16"}},
	}}
	if _, err := env.Dynamic.Resource(controller.PoolGVR).Create(ctx, pool, metav1.CreateOptions{}); err != nil {
		b.Fatal(err)
	}
	t0 := time.Now()
	objs := make([]*corev1.Service, n)
	if err := parallel(n, 32, func(i int) error {
		s := &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Name: name(i), Namespace: ns},
			Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, LoadBalancerClass: &class, AllocateLoadBalancerNodePorts: new(false),
				Ports: []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(80)}}},
		}
		out, err := client.CoreV1().Services(ns).Create(ctx, s, metav1.CreateOptions{})
		objs[i] = out
		return err
	}); err != nil {
		b.Fatal(err)
	}
	b.Logf("created %d Services in %s", n, time.Since(t0).Round(time.Millisecond))

	setStatus := func(workers int, ip func(i int) string) time.Duration {
		start := time.Now()
		if err := parallel(n, workers, func(i int) error {
			s := objs[i]
			s.Status.LoadBalancer.Ingress = nil
			if v := ip(i); v != "" {
				vip := corev1.LoadBalancerIPModeVIP
				s.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: v, IPMode: &vip}}
			}
			out, err := client.CoreV1().Services(ns).UpdateStatus(ctx, s, metav1.UpdateOptions{})
			if err == nil {
				objs[i] = out
			}
			return err
		}); err != nil {
			b.Fatal(err)
		}
		return time.Since(start)
	}
	ipOf := func(base byte) func(i int) string {
		return func(i int) string { return fmt.Sprintf("10.%d.%d.%d", base, i/250, i%250+1) }
	}
	// The watcher runs during the floors too: it is part of every ipledger
	// installation, and its informers load the same API server.
	watcherAddr := freePort(b)
	testenv.StartProcess(b, "watcher", env.Binary(b, "watcher"), nil,
		"--kubeconfig", env.CP.KubeconfigPath, "--grpc-addr", watcherAddr, "--grpc-plaintext", "--namespace", ns,
		"--ops-addr", freePort(b), "--log-format", "text")
	// Floors: one UpdateStatus per Service (the object kept from the last
	// write, so no read), as a plain loop would do.
	floor1 := setStatus(1, ipOf(200))
	floor32 := setStatus(32, ipOf(201))
	setStatus(32, func(int) string { return "" })
	b.Logf("floors: 1 worker %s, 32 workers %s", floor1.Round(time.Millisecond), floor32.Round(time.Millisecond))

	// ipam, cold.
	tokenFile := env.TokenFile(b, testenv.SystemNamespace, "ipledger-ipam")
	opsAddr := freePort(b)
	bin := env.Binary(b, "ipam")
	b.ResetTimer()
	start := time.Now()
	args := strings.Fields(os.Getenv("IPLEDGER_BENCH_ARGS"))
	// Environment for ipam alone, e.g. IPLEDGER_BENCH_IPAM_ENV="GOMEMLIMIT=64MiB".
	ipamEnv := strings.Fields(os.Getenv("IPLEDGER_BENCH_IPAM_ENV"))
	startIPAM := func(name, opsAddr string) *testenv.Process {
		return testenv.StartProcess(b, name, bin, ipamEnv, append(args,
			"--kubeconfig", env.CP.KubeconfigPath, "--namespace", ns, "--lb-class", class, "--log-format", "text", "--log-level", "warn",
			"--watcher-addr", watcherAddr, "--watcher-token-file", tokenFile, "--watcher-plaintext",
			"--grpc-addr", freePort(b), "--grpc-plaintext", "--ops-addr", opsAddr, "--enable-pprof")...)
	}
	first := startIPAM("ipam", opsAddr)
	if path := os.Getenv("IPLEDGER_BENCH_PPROF"); path != "" {
		// A CPU profile of ipam while it allocates, for go tool pprof.
		go func() {
			time.Sleep(time.Second)
			resp, err := http.Get("http://" + opsAddr + "/debug/pprof/profile?seconds=8")
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
		}()
	}
	var rssMax float64
	testenv.Eventually(b, 30*time.Minute, func() error {
		if v := scrape(opsAddr, "process_resident_memory_bytes"); v > rssMax {
			rssMax = v
		}
		list, err := client.CoreV1().Services(ns).List(ctx, metav1.ListOptions{ResourceVersion: "0"})
		if err != nil {
			return err
		}
		done := 0
		for _, s := range list.Items {
			if len(s.Status.LoadBalancer.Ingress) > 0 {
				done++
			}
		}
		if done < n {
			return fmt.Errorf("%d of %d Services have an IP", done, n)
		}
		return nil
	})
	ipam := time.Since(start)
	b.StopTimer()
	if path := os.Getenv("IPLEDGER_BENCH_HEAP"); path != "" {
		// ipam's heap right after the cold start, for go tool pprof.
		if resp, err := http.Get("http://" + opsAddr + "/debug/pprof/heap"); err == nil {
			if f, err := os.Create(path); err == nil {
				_, _ = io.Copy(f, resp.Body)
				f.Close()
			}
			resp.Body.Close()
		}
	}

	// Verify: no IP twice, the ledger equals the statuses.
	list, err := client.CoreV1().Services(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		b.Fatal(err)
	}
	seen := map[string]string{}
	for _, s := range list.Items {
		ip := s.Status.LoadBalancer.Ingress[0].IP
		if pool := s.Annotations["ipledger.io/allocated-from-pool"]; pool != "bench" {
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
	writes := scrape(opsAddr, `ipledger_ipam_ledger_writes_total{result="ok"}`)
	coldStatusWrites := scrape(opsAddr, `ipledger_ipam_status_writes_total{result="ok"}`)
	b.ReportMetric(coldStatusWrites, "status-writes")
	b.Logf("cold start: %v status writes for %d Services, %v passes", coldStatusWrites, n, scrape(opsAddr, "ipledger_ipam_reconcile_duration_seconds_count"))

	// Restart with N ledger entries: time from process start to the first
	// new allocation, and how many status writes the new process makes
	// (exactly one — the new Service's — when nothing is re-decided).
	if err := first.Stop(30 * time.Second); err != nil {
		b.Logf("first ipam exited: %v", err)
	}
	if _, err := client.CoreV1().Services(ns).Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "after-restart", Namespace: ns},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, LoadBalancerClass: &class, AllocateLoadBalancerNodePorts: new(false),
			Ports: []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(80)}}},
	}, metav1.CreateOptions{}); err != nil {
		b.Fatal(err)
	}
	ops2 := freePort(b)
	restartBegin := time.Now()
	startIPAM("ipam-restarted", ops2)
	testenv.Eventually(b, 10*time.Minute, func() error {
		s, err := client.CoreV1().Services(ns).Get(ctx, "after-restart", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if len(s.Status.LoadBalancer.Ingress) == 0 {
			return fmt.Errorf("no IP yet")
		}
		return nil
	})
	restart := time.Since(restartBegin)
	// Let the restarted process finish its first passes, then count.
	var statusWrites float64
	testenv.Eventually(b, time.Minute, func() error {
		statusWrites = scrape(ops2, `ipledger_ipam_status_writes_total{result="ok"}`)
		if statusWrites < 1 || scrape(ops2, "ipledger_ipam_pending_services") != 0 {
			return fmt.Errorf("the new Service's write is not counted yet")
		}
		return nil
	})
	b.ReportMetric(restart.Seconds(), "restart-first-alloc-s")
	b.ReportMetric(statusWrites-1, "restart-redundant-writes")
	b.Logf("restart with %d ledger entries: first new allocation after %s; %v status writes besides the new Service's",
		n, restart.Round(time.Millisecond), statusWrites-1)
	b.ReportMetric(ipam.Seconds(), "ipam-s")
	b.ReportMetric(floor1.Seconds(), "floor1-s")
	b.ReportMetric(floor32.Seconds(), "floor32-s")
	b.ReportMetric(ipam.Seconds()/floor32.Seconds(), "x-floor32")
	b.ReportMetric(ipam.Seconds()/floor1.Seconds(), "x-floor1")
	b.ReportMetric(rssMax/1e6, "rss-MB")
	b.ReportMetric(writes, "ledger-writes")
	b.Logf("N=%d ipam %s = %.2f× the 32-worker floor (%s), %.2f× the 1-worker floor (%s); RSS max %.0f MB; %v ledger writes",
		n, ipam.Round(time.Millisecond), ipam.Seconds()/floor32.Seconds(), floor32.Round(time.Millisecond),
		ipam.Seconds()/floor1.Seconds(), floor1.Round(time.Millisecond), rssMax/1e6, writes)
}

// scrape reads one sample from a Prometheus text endpoint (0 if absent).
func scrape(addr, metric string) float64 {
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		return 0
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 0, 64*1024), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, metric+" ") {
			v, _ := strconv.ParseFloat(strings.TrimSpace(strings.TrimPrefix(line, metric)), 64)
			return v
		}
	}
	return 0
}
