package bench

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	watchtools "k8s.io/client-go/tools/watch"

	"github.com/ipledger/ipledger/lab/testenv"
	"github.com/ipledger/ipledger/services/ipam/internal/controller"
	"github.com/ipledger/ipledger/services/ipam/internal/ledger"
)

// BenchmarkSteadyState is the latency users feel every day (issue 31 §1):
// with N Services allocated (IPLEDGER_BENCH_N, default 1,000), M = N/5 more
// are created at IPLEDGER_BENCH_RATE per second (default 50) while M/4 of
// the first are deleted, and each new Service's time from its Create to an
// address in its status is measured: p50, p99, max. The floor, in the same
// run and on the same API server (ipam still running, the deletes going on
// the same way): a bare client that watches Services and, on each create,
// does what the contract requires of ipam — a compare-and-swap write of a
// ConfigMap the size of ipam's ledger shard, then the same status merge
// patch. IPLEDGER_BENCH_ROUNDS repeats both (new Services each round) for
// the spread. Then, under the same load, the pool's spec is edited
// (poolEditUnderLoad): how long new Services wait behind the re-decide.
// IPLEDGER_BENCH_PPROF: a CPU profile of ipam during the first round.
//
//	IPLEDGER_BENCH_N=10000 IPLEDGER_BENCH_ROUNDS=3 go test -run XXX -bench SteadyState -timeout 60m ./internal/bench/
func BenchmarkSteadyState(b *testing.B) {
	n := envInt("IPLEDGER_BENCH_N", 1000)
	m := max(n/5, 20)
	rate := envInt("IPLEDGER_BENCH_RATE", 50)
	rounds := envInt("IPLEDGER_BENCH_ROUNDS", 1)
	env := testenv.Get(b)
	ctx := context.Background()
	client := benchClient(env)
	ns := env.Namespace(b, nil)
	class := "bench.ipledger.io/lb"
	pool := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "ipledger.io/v1alpha1", "kind": "IPPool", "metadata": map[string]any{"name": "steady"},
		"spec": map[string]any{"addresses": []any{"10.96.0.0/15"}},
	}}
	if _, err := env.Dynamic.Resource(controller.PoolGVR).Create(ctx, pool, metav1.CreateOptions{}); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = env.Dynamic.Resource(controller.PoolGVR).Delete(ctx, "steady", metav1.DeleteOptions{}) })
	setupStart := time.Now()
	svcs := createServices(b, env, client, ns, class, n)

	watcherAddr, watcherOps, opsAddr := testenv.FreeAddr(b), testenv.FreeAddr(b), testenv.FreeAddr(b)
	testenv.StartProcess(b, "watcher", env.Binary(b, "watcher"), nil,
		"--kubeconfig", env.CP.KubeconfigPath, "--grpc-addr", watcherAddr, "--grpc-plaintext", "--namespace", ns,
		"--ops-addr", watcherOps, "--log-format", "text")
	vars := variants(b, env)
	tokenFile := env.TokenFile(b, testenv.SystemNamespace, "ipledger-ipam")
	startIPAM := func(v int, name string) *testenv.Process {
		return testenv.StartProcess(b, name, vars[v].bin, nil,
			"--kubeconfig", env.CP.KubeconfigPath, "--namespace", ns, "--lb-class", class, "--require-lb-class", "--log-format", "text", "--log-level", "warn",
			"--watcher-addr", watcherAddr, "--watcher-token-file", tokenFile, "--watcher-plaintext",
			"--grpc-addr", testenv.FreeAddr(b), "--grpc-plaintext", "--ops-addr", opsAddr, "--enable-pprof")
	}
	running := 0
	ipam := startIPAM(running, "ipam")
	testenv.Eventually(b, 30*time.Minute, func() error {
		if ipam.Exited() {
			return fmt.Errorf("ipam exited: %v", ipam.Err())
		}
		if v := scrape(ctx, opsAddr, `ipledger_ipam_status_writes_total{result="ok"}`); v < float64(n) {
			return fmt.Errorf("ipam wrote %v of %d statuses", v, n)
		}
		return nil
	})
	// And its history written (the 10,000 grants, after its first
	// passes), as switchIPAM waits for it: the first round must not
	// measure that write beside its creates.
	waitHistoryWritten(b, ctx, opsAddr)
	b.Logf("set-up: %d Services created and allocated in %s", n, time.Since(setupStart).Round(time.Second))
	shardBytes := ledgerShardBytes(b, client, ns)
	floor := startFloor(b, client, ns, floorClass, shardBytes)

	var ipamRuns, floorRuns []latencies
	var runVariant []int
	deleted := 0
	b.ResetTimer()
	// A batch is one variant's creates for ipam, then the floor's beside
	// it; a round is one batch of each variant, in the order A B, B A, …
	batches := rounds * len(vars)
	for i := range batches {
		r, v := i/len(vars), variantOf(i, len(vars))
		if v != running {
			ipam = switchIPAM(b, ctx, ipam, func(ops string) *testenv.Process {
				opsAddr = ops
				return startIPAM(v, fmt.Sprintf("ipam-%d", i))
			})
			running = v
		}
		load := loadavg()
		if path := os.Getenv("IPLEDGER_BENCH_PPROF"); path != "" && r == 0 {
			// The first round's creates for ipam: m at rate per second.
			go saveProfile(opsAddr, fmt.Sprintf("profile?seconds=%d", m/rate), path)
		}
		passes := passHistogram(ctx, opsAddr)
		decided := scrape(ctx, opsAddr, "ipledger_ipam_services_decided_total")
		gotIPAM, _ := createAtRate(b, client, ns, class, fmt.Sprintf("r%d-%d-ipam-", r, v), m, rate, func() { deleteOne(b, client, ns, svcs, &deleted) })
		b.Logf("round %d: ipam's passes meanwhile: %s; %.0f Services decided", r+1, passHistogram(ctx, opsAddr).since(passes),
			scrape(ctx, opsAddr, "ipledger_ipam_services_decided_total")-decided)
		gotFloor, _ := createAtRate(b, client, ns, floorClass, fmt.Sprintf("r%d-%d-floor-", r, v), m, rate, func() { deleteOne(b, client, ns, svcs, &deleted) })
		ipamRuns, floorRuns, runVariant = append(ipamRuns, gotIPAM), append(floorRuns, gotFloor), append(runVariant, v)
		b.Logf("round %d (%s): N=%d, %d creates at %d/s, %d deletes beside them; ipam p50 %s p99 %s max %s; floor (CAS of a %d-byte ConfigMap, then the patch) p50 %s p99 %s max %s; "+
			"ratios p50 %.2f× p99 %.2f×; load %s → %s",
			r+1, vars[v].name, n, m, rate, m/4, gotIPAM.p(50), gotIPAM.p(99), gotIPAM.p(100), shardBytes, gotFloor.p(50), gotFloor.p(99), gotFloor.p(100),
			ratio(gotIPAM.p(50), gotFloor.p(50)), ratio(gotIPAM.p(99), gotFloor.p(99)), load, loadavg())
	}
	b.StopTimer()
	floor.stop()
	poolEditUnderLoad(b, client, env, ns, class, m, rate)
	// The median round by p99 ratio.
	idx := make([]int, len(ipamRuns))
	for i := range idx {
		idx[i] = i
	}
	slices.SortFunc(idx, func(i, j int) int {
		return cmpFloat(ratio(ipamRuns[i].p(99), floorRuns[i].p(99)), ratio(ipamRuns[j].p(99), floorRuns[j].p(99)))
	})
	med := idx[len(idx)/2]
	var p50s, p99s []string
	for i := range ipamRuns {
		p50s = append(p50s, fmt.Sprintf("%.2f", ratio(ipamRuns[i].p(50), floorRuns[i].p(50))))
		p99s = append(p99s, fmt.Sprintf("%.2f", ratio(ipamRuns[i].p(99), floorRuns[i].p(99))))
	}
	b.ReportMetric(ipamRuns[med].p(50).Seconds()*1000, "ipam-p50-ms")
	b.ReportMetric(ipamRuns[med].p(99).Seconds()*1000, "ipam-p99-ms")
	b.ReportMetric(ipamRuns[med].p(100).Seconds()*1000, "ipam-max-ms")
	b.ReportMetric(floorRuns[med].p(50).Seconds()*1000, "floor-p50-ms")
	b.ReportMetric(floorRuns[med].p(99).Seconds()*1000, "floor-p99-ms")
	b.ReportMetric(ratio(ipamRuns[med].p(50), floorRuns[med].p(50)), "x-floor-p50")
	b.ReportMetric(ratio(ipamRuns[med].p(99), floorRuns[med].p(99)), "x-floor-p99")
	b.Logf("N=%d, %d rounds: × the floor at p50 %s, at p99 %s", n, rounds, strings.Join(p50s, " "), strings.Join(p99s, " "))
	if len(vars) > 1 {
		meds := make([][2]float64, len(vars))
		for v := range vars {
			var p50, p99 []float64
			for i := range ipamRuns {
				if runVariant[i] == v {
					p50 = append(p50, ratio(ipamRuns[i].p(50), floorRuns[i].p(50)))
					p99 = append(p99, ratio(ipamRuns[i].p(99), floorRuns[i].p(99)))
				}
			}
			meds[v] = [2]float64{median(p50), median(p99)}
			b.Logf("steady state, %s: × the floor at p50 %s (median %.2f), at p99 %s (median %.2f)",
				vars[v].name, floats(p50, "%.2f"), meds[v][0], floats(p99, "%.2f"), meds[v][1])
		}
		b.Logf("steady state, %s / %s (medians): × the floor at p50 %.2f, at p99 %.2f",
			vars[0].name, vars[1].name, meds[0][0]/meds[1][0], meds[0][1]/meds[1][1])
	}
}

// switchIPAM stops running and starts another ipam (start, given its new
// ops address), and waits until the new one leads, has decided every
// Service, and — with the history — has written the history it owes: the
// state the first ipam was in when the rounds began.
func switchIPAM(b *testing.B, ctx context.Context, running *testenv.Process, start func(ops string) *testenv.Process) *testenv.Process {
	b.Helper()
	if err := running.Stop(30 * time.Second); err != nil {
		b.Logf("ipam exited: %v", err)
	}
	ops := testenv.FreeAddr(b)
	next := start(ops)
	testenv.Eventually(b, 5*time.Minute, func() error {
		if next.Exited() {
			return fmt.Errorf("ipam exited: %v", next.Err())
		}
		if scrape(ctx, ops, "ipledger_ipam_ledger_shards") == 0 {
			return fmt.Errorf("ipam's term has not opened the ledger")
		}
		if p := scrape(ctx, ops, "ipledger_ipam_pending_services"); p != 0 {
			return fmt.Errorf("%v Services pending", p)
		}
		if u := scrape(ctx, ops, "ipledger_ipam_history_unwritten_changes"); u != 0 {
			return fmt.Errorf("%v history changes unwritten", u)
		}
		return nil
	})
	return next
}

// latencies are the create-to-address times of one run, sorted.
type latencies []time.Duration

// p is the q-th percentile (100: the maximum).
func (l latencies) p(q int) time.Duration {
	if len(l) == 0 {
		return 0
	}
	i := min(len(l)-1, (len(l)*q+99)/100-1)
	return l[max(i, 0)].Round(time.Millisecond)
}

func ratio(a, b time.Duration) float64 {
	if b <= 0 {
		return 0
	}
	return a.Seconds() / b.Seconds()
}

// createAtRate creates m LoadBalancer Services of class named prefix+i, rate
// per second (each after the previous Create returned, and on the ticker),
// calling between() after every fourth; it returns each one's time from its
// Create's return to a status address, seen by a watch opened before:
// sorted, and in the order of the creates.
func createAtRate(b *testing.B, client kubernetes.Interface, ns, class, prefix string, m, rate int, between func()) (sorted latencies, inOrder []time.Duration) {
	b.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	w, err := client.CoreV1().Services(ns).Watch(ctx, metav1.ListOptions{})
	if err != nil {
		b.Fatal(err)
	}
	defer w.Stop()
	var mu sync.Mutex
	created, addressed := map[string]time.Time{}, map[string]time.Time{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ev := range w.ResultChan() {
			s, ok := ev.Object.(*corev1.Service)
			if !ok || ev.Type == watch.Deleted || !strings.HasPrefix(s.Name, prefix) || len(s.Status.LoadBalancer.Ingress) == 0 {
				continue
			}
			mu.Lock()
			if _, seen := addressed[s.Name]; !seen {
				addressed[s.Name] = time.Now()
			}
			finished := len(addressed) == m
			mu.Unlock()
			if finished {
				return
			}
		}
	}()
	tick := time.NewTicker(time.Second / time.Duration(rate))
	defer tick.Stop()
	for i := range m {
		<-tick.C
		name := fmt.Sprintf("%s%05d", prefix, i)
		if err := retryLoaded(func() error {
			_, err := client.CoreV1().Services(ns).Create(ctx, lbService(ns, name, class), metav1.CreateOptions{})
			return err
		}); err != nil {
			b.Fatal(err)
		}
		mu.Lock()
		created[name] = time.Now()
		mu.Unlock()
		if i%4 == 3 {
			between()
		}
	}
	select {
	case <-done:
	case <-time.After(10 * time.Minute):
		mu.Lock()
		defer mu.Unlock()
		b.Fatalf("%s: %d of %d Services got an address within 10 minutes of the last create", prefix, len(addressed), m)
	}
	mu.Lock()
	defer mu.Unlock()
	for i := range m {
		name := fmt.Sprintf("%s%05d", prefix, i)
		// A watch event can beat the Create's return: never negative.
		inOrder = append(inOrder, max(addressed[name].Sub(created[name]), 0))
	}
	sorted = slices.Clone(inOrder)
	slices.Sort(sorted)
	return sorted, inOrder
}

// deleteOne deletes the next of the set-up's Services.
func deleteOne(b *testing.B, client kubernetes.Interface, ns string, svcs *lbServices, deleted *int) {
	b.Helper()
	if *deleted >= len(svcs.objs) {
		return
	}
	name := svcs.objs[*deleted].Name
	*deleted++
	if err := client.CoreV1().Services(ns).Delete(context.Background(), name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		b.Fatal(err)
	}
}

// ledgerShardBytes is the size of the data of ipam's largest ledger shard.
func ledgerShardBytes(b *testing.B, client kubernetes.Interface, ns string) int {
	b.Helper()
	cms, err := client.CoreV1().ConfigMaps(ns).List(context.Background(), metav1.ListOptions{LabelSelector: ledger.LabelKey + "=true"})
	if err != nil {
		b.Fatal(err)
	}
	most := 0
	for _, cm := range cms.Items {
		size := 0
		for k, v := range cm.Data {
			size += len(k) + len(v)
		}
		most = max(most, size)
	}
	return most
}

// floorClass is the loadBalancerClass of the steady-state floor's Services.
const floorClass = "floor.bench.ipledger.io/lb"

// floorController is the steady-state floor: one worker that, for each
// Service of its class created (a watch's ADDED), replaces a ConfigMap of
// the ledger's size under a resourceVersion precondition (re-reading it on
// a conflict), then writes ipam's status merge patch.
type floorController struct {
	cancel context.CancelFunc
	done   chan struct{}
}

func startFloor(b *testing.B, client kubernetes.Interface, ns, class string, shardBytes int) *floorController {
	b.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	cms := client.CoreV1().ConfigMaps(ns)
	cm, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "floor-ledger"},
		Data: map[string]string{"entries": strings.Repeat("x", max(shardBytes, 1))}}, metav1.CreateOptions{})
	if err != nil {
		b.Fatal(err)
	}
	// A watch the API server ends (after 30–60 minutes: its
	// --min-request-timeout) is opened again where it stopped: the floor
	// of a long run's last rounds went deaf, and the run waited for it.
	list, err := client.CoreV1().Services(ns).List(ctx, metav1.ListOptions{Limit: 1})
	if err != nil {
		b.Fatal(err)
	}
	w, err := watchtools.NewRetryWatcherWithContext(ctx, list.ResourceVersion, &cache.ListWatch{
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			return client.CoreV1().Services(ns).Watch(ctx, o)
		}})
	if err != nil {
		b.Fatal(err)
	}
	f := &floorController{cancel: cancel, done: make(chan struct{})}
	next := 0
	go func() {
		defer close(f.done)
		for ev := range w.ResultChan() {
			s, ok := ev.Object.(*corev1.Service)
			if !ok || ev.Type != watch.Added || s.Spec.LoadBalancerClass == nil || *s.Spec.LoadBalancerClass != class {
				continue
			}
			ip := fmt.Sprintf("10.98.%d.%d", next/250, next%250+1)
			next++
			// The ledger's compare-and-swap: the entry changes, the size
			// stays.
			for {
				cm.Data["entries"] = ip + cm.Data["entries"][len(ip):]
				out, err := cms.Update(ctx, cm, metav1.UpdateOptions{})
				if err == nil {
					cm = out
					break
				}
				if ctx.Err() != nil {
					return
				}
				if !apierrors.IsConflict(err) {
					b.Errorf("floor: ledger write: %v", err)
					return
				}
				if cm, err = cms.Get(ctx, "floor-ledger", metav1.GetOptions{}); err != nil {
					b.Errorf("floor: ledger read: %v", err)
					return
				}
			}
			body := ipamStatusPatch(s.ResourceVersion, s.Generation, ip, "steady")
			if _, err := client.CoreV1().Services(ns).Patch(ctx, s.Name, types.MergePatchType, body,
				metav1.PatchOptions{FieldManager: "ipledger-ipam"}, "status"); err != nil && ctx.Err() == nil {
				b.Errorf("floor: status of %s: %v", s.Name, err)
			}
		}
	}()
	return f
}

func (f *floorController) stop() {
	f.cancel()
	<-f.done
}

// poolEditUnderLoad creates m more Services at rate per second and, after a
// quarter of them, edits the pool's spec (a range added), which makes ipam
// decide every Service again (issue 31 §1: the re-decide must not stall new
// allocations). It reports the creates' latencies before the edit and
// after it, the worst of them the longest a new Service waited behind the
// re-decide.
func poolEditUnderLoad(b *testing.B, client kubernetes.Interface, env *testenv.Env, ns, class string, m, rate int) {
	editAfter := max(m/16, 1) * 4 // a quarter, at a call of between (every fourth create)
	calls := 0
	var editedAt time.Time
	edit := func() {
		calls++
		if calls*4 != editAfter {
			return
		}
		patch := []byte(`{"spec":{"addresses":["10.96.0.0/15","10.200.0.0/24"]}}`)
		if _, err := env.Dynamic.Resource(controller.PoolGVR).Patch(context.Background(), "steady", types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
			b.Fatal(err)
		}
		editedAt = time.Now()
	}
	load := loadavg()
	sorted, inOrder := createAtRate(b, client, ns, class, "edit-", m, rate, edit)
	if editedAt.IsZero() {
		b.Fatalf("the pool was not edited (%d creates, edit after %d)", m, editAfter)
	}
	before, after := slices.Clone(inOrder[:editAfter]), slices.Clone(inOrder[editAfter:])
	slices.Sort(before)
	slices.Sort(after)
	b.ReportMetric(latencies(after).p(100).Seconds()*1000, "edit-worst-ms")
	b.Logf("pool edit under load: %d creates at %d/s, the pool's spec edited after %d; before the edit p50 %s p99 %s max %s; "+
		"after it p50 %s p99 %s max %s (the worst wait behind the re-decide); all p99 %s; load %s → %s",
		m, rate, editAfter, latencies(before).p(50), latencies(before).p(99), latencies(before).p(100),
		latencies(after).p(50), latencies(after).p(99), latencies(after).p(100), sorted.p(99), load, loadavg())
}

// passes is ipam's pass-duration histogram: how many passes took at most
// each bound (cumulative, as Prometheus keeps it).
type passes map[string]float64

// passBounds are the histogram's bounds the benchmark reports (seconds).
var passBounds = []string{"0.004", "0.016", "0.064", "0.256", "+Inf"}

func passHistogram(ctx context.Context, opsAddr string) passes {
	out := passes{}
	for _, le := range passBounds {
		out[le] = scrape(ctx, opsAddr, `ipledger_ipam_reconcile_duration_seconds_bucket{le="`+le+`"}`)
	}
	return out
}

// since says how many passes took how long since before.
func (p passes) since(before passes) string {
	var parts []string
	prev := 0.0
	for _, le := range passBounds {
		n := p[le] - before[le]
		parts = append(parts, fmt.Sprintf("%.0f ≤ %s s", n-prev, le))
		prev = n
	}
	return fmt.Sprintf("%.0f passes: %s", p["+Inf"]-before["+Inf"], strings.Join(parts, ", "))
}
