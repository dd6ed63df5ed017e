package app_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/ipledger/ipledger/pkg/testenv"
	"github.com/ipledger/ipledger/services/endpoints/internal/planner"
)

// The benchmarks run only with IPLEDGER_BENCH=1 (make bench); sizes can be
// changed with IPLEDGER_BENCH_SERVICES and IPLEDGER_BENCH_WORKLOADS.
func benchSize(t *testing.T) (services, workloads int) {
	if os.Getenv("IPLEDGER_BENCH") != "1" {
		t.Skip("set IPLEDGER_BENCH=1 to run")
	}
	services, workloads = 500, 10000
	if v, err := strconv.Atoi(os.Getenv("IPLEDGER_BENCH_SERVICES")); err == nil && v > 0 {
		services = v
	}
	if v, err := strconv.Atoi(os.Getenv("IPLEDGER_BENCH_WORKLOADS")); err == nil && v > 0 {
		workloads = v
	}
	return services, workloads
}

// parallel runs f(i) for i in [0,n) on k workers.
func parallel(n, k int, f func(i int)) {
	var wg sync.WaitGroup
	ch := make(chan int)
	for range k {
		wg.Go(func() {
			for i := range ch {
				f(i)
			}
		})
	}
	for i := range n {
		ch <- i
	}
	close(ch)
	wg.Wait()
}

// startBinary runs ipledger-endpoints as a process and returns its ops address.
func startBinary(t *testing.T, env *testenv.Env, watcherAddr, lease string, extra ...string) (*testenv.Process, string) {
	t.Helper()
	tokenFile := env.TokenFile(t, system, "ipledger-endpoints")
	token, err := os.ReadFile(tokenFile)
	if err != nil {
		t.Fatal(err)
	}
	ops := freeAddr(t)
	args := append([]string{
		"--kubeconfig", env.KubeconfigFor(t, string(token)),
		"--watcher-addr", watcherAddr, "--watcher-plaintext", "--watcher-token-file", tokenFile,
		"--leader-elect-lease-name", lease, "--leader-elect-identity", "bench",
		"--ops-addr", ops, "--log-format", "text", "--log-level", "warn",
	}, extra...)
	return testenv.StartProcess(t, "endpoints", env.Binary(t, "endpoints"), nil, args...), ops
}

// scrape sums the samples of a metric (all label values) from /metrics.
func scrape(t *testing.T, ops, metric string) float64 {
	t.Helper()
	resp, err := http.Get("http://" + ops + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sum := 0.0
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, metric+" ") && !strings.HasPrefix(line, metric+"{") {
			continue
		}
		if strings.Contains(line, `result="error"`) {
			continue
		}
		f := strings.Fields(line)
		v, _ := strconv.ParseFloat(f[len(f)-1], 64)
		sum += v
	}
	return sum
}

func TestBenchColdStart(t *testing.T) {
	nServices, nWorkloads := benchSize(t)
	env := testenv.Get(t)
	ctx := context.Background()
	ns := env.Namespace(t, nil)
	perSvc := nWorkloads / nServices

	start := time.Now()
	parallel(nServices, 16, func(i int) {
		createService(t, env, ns, fmt.Sprintf("svc-%04d", i), svcSpec{})
	})
	parallel(nWorkloads, 32, func(i int) {
		createWorkload(t, env, ns, fmt.Sprintf("vm-%05d", i), wlSpec{
			app: fmt.Sprintf("svc-%04d", i%nServices),
			ips: []string{fmt.Sprintf("10.%d.%d.%d", 100+i/65536, (i/256)%256, i%256)}, ready: true,
		})
	})
	t.Logf("setup: %d Services, %d workloads created in %s", nServices, nWorkloads, time.Since(start).Round(time.Millisecond))

	// Floor: the same slices written straight to the API, with 1 and with 4
	// workers (the controller's default --workers).
	floor := func(workers int) time.Duration {
		start := time.Now()
		parallel(nServices, workers, func(i int) {
			eps := make([]discoveryv1.Endpoint, 0, perSvc)
			for j := range perSvc {
				n := i + j*nServices
				eps = append(eps, discoveryv1.Endpoint{Addresses: []string{fmt.Sprintf("10.%d.%d.%d", 100+n/65536, (n/256)%256, n%256)}})
			}
			_, err := env.Client.DiscoveryV1().EndpointSlices(ns).Create(ctx, &discoveryv1.EndpointSlice{
				ObjectMeta:  metav1.ObjectMeta{Name: fmt.Sprintf("floor-%d-%04d", workers, i), Labels: map[string]string{discoveryv1.LabelManagedBy: "bench-floor"}},
				AddressType: discoveryv1.AddressTypeIPv4,
				Ports:       []discoveryv1.EndpointPort{{Name: ptr("http"), Port: ptr(int32(8080)), Protocol: ptr(corev1.ProtocolTCP)}},
				Endpoints:   eps,
			}, metav1.CreateOptions{})
			if err != nil {
				t.Error(err)
			}
		})
		d := time.Since(start)
		if err := env.Client.DiscoveryV1().EndpointSlices(ns).DeleteCollection(ctx, metav1.DeleteOptions{},
			metav1.ListOptions{LabelSelector: discoveryv1.LabelManagedBy + "=bench-floor"}); err != nil {
			t.Fatal(err)
		}
		return d
	}
	floor1, floor4 := floor(1), floor(4)

	addr := startWatcher(t, env)
	start = time.Now()
	lease := leaseName(t)
	_, ops := startBinary(t, env, addr, lease, "--kube-api-qps", "1000", "--kube-api-burst", "2000")
	if path := os.Getenv("IPLEDGER_BENCH_PROFILE"); path != "" {
		// A CPU profile of the first 30s of the binary, for go tool pprof.
		go func() {
			testenv.Eventually(t, time.Minute, func() error {
				_, err := http.Get("http://" + ops + "/healthz")
				return err
			})
			resp, err := http.Get("http://" + ops + "/debug/pprof/profile?seconds=30")
			if err != nil {
				return
			}
			defer resp.Body.Close()
			if f, err := os.Create(path); err == nil {
				_, _ = io.Copy(f, resp.Body)
				f.Close()
			}
		}()
	}
	testenv.Eventually(t, 10*time.Minute, func() error {
		list, err := env.Client.DiscoveryV1().EndpointSlices(ns).List(ctx, metav1.ListOptions{
			LabelSelector: discoveryv1.LabelManagedBy + "=" + planner.ManagedBy})
		if err != nil {
			return err
		}
		if n := endpointCount(list.Items); n != nWorkloads {
			return fmt.Errorf("%d of %d endpoints in %d slices", n, nWorkloads, len(list.Items))
		}
		return nil
	})
	converged := time.Now()
	total := converged.Sub(start)
	l, err := env.Client.CoordinationV1().Leases(system).Get(ctx, lease, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	converge := converged.Sub(l.Spec.AcquireTime.Time)
	writes := scrape(t, ops, "ipledger_endpoints_slice_writes_total")
	rss := scrape(t, ops, "process_resident_memory_bytes")
	t.Logf("BENCH cold start: process start to converged %s", total.Round(time.Millisecond))
	t.Logf("BENCH cold start: %d Services, %d workloads: Lease acquired to converged %s; floor 1 worker %s (%.2fx), 4 workers %s (%.2fx); writes %v vs minimum %d slices (%.2fx); RSS %.1f MB",
		nServices, nWorkloads, converge.Round(time.Millisecond), floor1.Round(time.Millisecond), converge.Seconds()/floor1.Seconds(),
		floor4.Round(time.Millisecond), converge.Seconds()/floor4.Seconds(), writes, nServices, writes/float64(nServices), rss/1e6)
}

func TestBenchReadyFlap(t *testing.T) {
	benchSize(t)
	env := testenv.Get(t)
	ctx := context.Background()
	ns := env.Namespace(t, nil)
	createService(t, env, ns, "flap", svcSpec{ports: []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromInt32(8080)}}})
	for i := range 20 {
		createWorkload(t, env, ns, fmt.Sprintf("vm-%02d", i), wlSpec{app: "flap", ips: []string{fmt.Sprintf("192.0.2.%d", i+1)}, ready: true})
	}
	addr := startWatcher(t, env)
	_, ops := startBinary(t, env, addr, leaseName(t), "--kube-api-qps", "1000", "--kube-api-burst", "2000")
	waitSlices(t, env, ns, "flap", 1, 20)
	before := scrape(t, ops, "ipledger_endpoints_slice_writes_total")

	res := env.Dynamic.Resource(workloadGVR).Namespace(ns)
	start := time.Now()
	for i := range 100 {
		u, err := res.Get(ctx, "vm-00", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		setReady(t, env, u, i%2 == 1) // ends Ready after 100 flips
	}
	flips := time.Since(start)
	testenv.Eventually(t, 60*time.Second, func() error {
		ss, err := ourSlices(env, ns, "flap")
		if err != nil || len(ss) != 1 {
			return fmt.Errorf("%d slices: %v", len(ss), err)
		}
		for _, e := range ss[0].Endpoints {
			if e.TargetRef.Name == "vm-00" && *e.Conditions.Ready {
				return nil
			}
		}
		return fmt.Errorf("vm-00 not ready in its slice")
	})
	writes := scrape(t, ops, "ipledger_endpoints_slice_writes_total") - before
	t.Logf("BENCH ready flap: 100 Ready flips in %s -> %v slice writes (upper bound 100); final state correct", flips.Round(time.Millisecond), writes)
}

func ptr[T any](v T) *T { return &v }
