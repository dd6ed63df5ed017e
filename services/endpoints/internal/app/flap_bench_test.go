package app_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"

	"github.com/ipledger/ipledger/lab/testenv"
	"github.com/ipledger/ipledger/pkg/cmdmain"
	"github.com/ipledger/ipledger/services/endpoints/internal/planner"
)

// BenchmarkReadyFlapMany flips every workload of IPLEDGER_BENCH_FLAP_SERVICES
// Services (default 50) × 20 workloads (1,000) from Ready to not Ready, and
// then back to Ready, with 16 client workers (UpdateStatus). Each wave is
// waited for with a watch on the binary's slices until every endpoint shows
// the wave's state: the flap ends in the state it started in, so without
// the wait in between nothing would tell a converged flap from one the
// binary never saw. The timer (ns/op) runs from the first flip of the first
// wave to the last endpoint Ready again. Reported per iteration (averaged):
//
//	flap-s          first flip → every endpoint Ready again (both waves)
//	flips-s         the 2 × 1,000 status updates themselves (the client's
//	                time, the same whatever the controller)
//	lag-s           per wave, the last flip's response → every endpoint in
//	                the wave's state; summed over both waves
//	floor-4workers-s  a plain client with 4 workers writing the same slices
//	                the binary wrote (same endpoints, same conditions, under
//	                other names) wave after wave: one update per slice per
//	                wave, in the same iteration on the same API server
//	x-floor         lag-s / floor-4workers-s
//	x-flips+floor   flap-s / (flips-s + floor-4workers-s)
//	writes/min      slice writes the flap caused, counted once the binary is
//	                quiet, / the minimum (one write per slice per wave; every
//	                slice changes in both waves)
func BenchmarkReadyFlapMany(b *testing.B) {
	nServices := 50
	if v, err := strconv.Atoi(os.Getenv("IPLEDGER_BENCH_FLAP_SERVICES")); err == nil && v > 0 {
		nServices = v
	}
	const perSvc = 20
	nWorkloads := nServices * perSvc
	env := testenv.Get(b)
	ctx := context.Background()
	ns := env.Namespace(b, nil)
	// Registered first, so run last (after the binary and the watcher have
	// stopped): leave no world to the next -count or benchmark.
	b.Cleanup(func() { clearNamespace(b, env, ns, nServices) })
	b.Logf("%d Services, %d workloads (%d per Service), all flapping", nServices, nWorkloads, perSvc)
	parallel(b, nServices, 16, func(i int) {
		createService(b, env, ns, fmt.Sprintf("svc-%04d", i), svcSpec{})
	})
	parallel(b, nWorkloads, 32, func(i int) {
		createWorkload(b, env, ns, fmt.Sprintf("vm-%05d", i), wlSpec{
			app: fmt.Sprintf("svc-%04d", i%nServices), ips: []string{workloadIP(i)}, ready: true,
		})
	})
	addr := startWatcher(b, env)
	_, ops := startBinary(b, env, addr, leaseName(b), "--kube-api-qps", "1000", "--kube-api-burst", "2000")
	waitEndpoints(b, env, ns, nWorkloads, 5*time.Minute)
	waitWritesQuiet(b, ops)

	ours := metav1.ListOptions{LabelSelector: discoveryv1.LabelManagedBy + "=" + planner.ManagedBy}
	list := func() []discoveryv1.EndpointSlice {
		l, err := env.Client.DiscoveryV1().EndpointSlices(ns).List(ctx, ours)
		if err != nil {
			b.Fatal(err)
		}
		return l.Items
	}
	nSlices := len(list())
	minWrites := 2 * nSlices

	res := env.Dynamic.Resource(workloadGVR).Namespace(ns)
	wl, err := res.List(ctx, metav1.ListOptions{})
	if err != nil {
		b.Fatal(err)
	}
	objs := make([]*unstructured.Unstructured, len(wl.Items))
	for i := range wl.Items {
		objs[i] = &wl.Items[i]
	}
	// flip sets every workload's Ready condition with 16 workers, keeping
	// each one's latest version for the next wave (no GETs).
	flip := func(ready bool) time.Duration {
		status := "False"
		if ready {
			status = "True"
		}
		start := time.Now()
		parallel(b, len(objs), 16, func(i int) {
			u := objs[i].DeepCopy()
			u.Object["status"] = map[string]any{"conditions": []any{map[string]any{
				"type": "Ready", "status": status, "reason": "Bench", "message": "flap",
				"lastTransitionTime": time.Now().UTC().Format(time.RFC3339),
			}}}
			out, err := res.UpdateStatus(ctx, u, metav1.UpdateOptions{})
			if err != nil {
				b.Errorf("status of %s: %v", u.GetName(), err)
				return
			}
			objs[i] = out
		})
		return time.Since(start)
	}

	// The waiter's client is the binary's (protobuf), as waitEndpoints'.
	typed, _ := cmdmain.ClientConfigs(env.Config)
	client, err := kubernetes.NewForConfig(typed)
	if err != nil {
		b.Fatal(err)
	}
	// wave flips every workload to ready and waits, with a watch started
	// before the first flip, until every endpoint of the binary's slices
	// shows it.
	wave := func(ready bool) (flips, lag time.Duration, after []discoveryv1.EndpointSlice) {
		wctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
		defer cancel()
		type result struct {
			at     time.Time
			slices []discoveryv1.EndpointSlice
			err    error
		}
		started, done := make(chan struct{}), make(chan result, 1)
		go func() {
			at, slices, err := watchSlicesUntil(wctx, client, ns, started, func(s *discoveryv1.EndpointSlice) int {
				n := 0
				for _, e := range s.Endpoints {
					if e.Conditions.Ready != nil && *e.Conditions.Ready == ready {
						n++
					}
				}
				return n
			}, nWorkloads)
			done <- result{at, slices, err}
		}()
		select {
		case <-started:
		case r := <-done: // an error, or the slices already in the wave's state
			b.Fatalf("watch before the flips: %v (%d slices)", r.err, len(r.slices))
		}
		flips = flip(ready)
		end := time.Now()
		r := <-done
		if r.err != nil {
			b.Fatalf("wave to ready=%v: %v", ready, r.err)
		}
		return flips, r.at.Sub(end), r.slices
	}

	// floor writes copies of the binary's slices, under other names and
	// outside every controller's selection, first as they were after the
	// first wave and then as after the second: one update per slice per
	// wave, 4 workers.
	floor := func(waves ...[]discoveryv1.EndpointSlice) time.Duration {
		api := env.Client.DiscoveryV1().EndpointSlices(ns)
		copies := make([]*discoveryv1.EndpointSlice, len(waves[0]))
		labels := map[string]string{discoveryv1.LabelManagedBy: "bench-floor", floorLabel: "true"}
		parallel(b, len(copies), 4, func(i int) {
			s := waves[len(waves)-1][i].DeepCopy()
			s.ObjectMeta = metav1.ObjectMeta{Name: "floor-" + s.Name, Labels: labels}
			out, err := api.Create(ctx, s, metav1.CreateOptions{})
			if err != nil {
				b.Error(err)
				return
			}
			copies[i] = out
		})
		byName := func(w []discoveryv1.EndpointSlice) map[string]*discoveryv1.EndpointSlice {
			m := map[string]*discoveryv1.EndpointSlice{}
			for i := range w {
				m["floor-"+w[i].Name] = &w[i]
			}
			return m
		}
		start := time.Now()
		for _, w := range waves {
			want := byName(w)
			parallel(b, len(copies), 4, func(i int) {
				s := copies[i].DeepCopy()
				src, ok := want[s.Name]
				if !ok {
					b.Errorf("slice %s missing from a wave", s.Name)
					return
				}
				s.Endpoints = src.Endpoints
				out, err := api.Update(ctx, s, metav1.UpdateOptions{})
				if err != nil {
					b.Error(err)
					return
				}
				copies[i] = out
			})
		}
		d := time.Since(start)
		if err := api.DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{LabelSelector: floorLabel + "=true"}); err != nil {
			b.Fatal(err)
		}
		return d
	}

	var flapS, flipsS, lagS, floorS, writes float64
	iteration := 0
	for b.Loop() {
		b.StopTimer()
		iteration++
		before := scrape(b, ops, "ipledger_endpoints_slice_writes_total")
		b.StartTimer()
		start := time.Now()
		fDown, lDown, down := wave(false)
		fUp, lUp, up := wave(true)
		flap := time.Since(start)
		b.StopTimer()
		w := waitWritesQuiet(b, ops) - before
		// The final state holds once the binary is quiet.
		for _, s := range list() {
			for _, e := range s.Endpoints {
				if e.Conditions.Ready == nil || !*e.Conditions.Ready {
					b.Fatalf("after the binary went quiet: %s in slice %s not Ready", e.Addresses, s.Name)
				}
			}
		}
		f := floor(down, up)
		flips, lag := fDown+fUp, lDown+lUp
		b.Logf("iteration %d: flap %s (flips %s + %s, lag after the last flip %s + %s) = %.2f× the 4-worker floor writing the same slices (%s) in lag, "+
			"%.2f× flips + floor; %v slice writes (minimum %d: %.2f×)",
			iteration, flap.Round(time.Millisecond), fDown.Round(time.Millisecond), fUp.Round(time.Millisecond),
			lDown.Round(time.Millisecond), lUp.Round(time.Millisecond), lag.Seconds()/f.Seconds(), f.Round(time.Millisecond),
			flap.Seconds()/(flips+f).Seconds(), w, minWrites, w/float64(minWrites))
		flapS += flap.Seconds()
		flipsS += flips.Seconds()
		lagS += lag.Seconds()
		floorS += f.Seconds()
		writes += w
		b.StartTimer()
	}
	n := float64(iteration)
	flapS, flipsS, lagS, floorS, writes = flapS/n, flipsS/n, lagS/n, floorS/n, writes/n
	b.ReportMetric(flapS, "flap-s")
	b.ReportMetric(flipsS, "flips-s")
	b.ReportMetric(lagS, "lag-s")
	b.ReportMetric(floorS, "floor-4workers-s")
	b.ReportMetric(lagS/floorS, "x-floor")
	b.ReportMetric(flapS/(flipsS+floorS), "x-flips+floor")
	b.ReportMetric(writes/float64(minWrites), "writes/min")
}

// watchSlicesUntil watches the slices ipledger manages in ns until count
// summed over them reaches want, and returns when the watch showed it and
// the slices then. It closes started once its first LIST has answered, so
// that the caller changes nothing the watch could miss. It returns errors
// rather than failing the benchmark: it runs on its own goroutine.
func watchSlicesUntil(ctx context.Context, client kubernetes.Interface, ns string, started chan<- struct{},
	count func(*discoveryv1.EndpointSlice) int, want int,
) (time.Time, []discoveryv1.EndpointSlice, error) {
	api := client.DiscoveryV1().EndpointSlices(ns)
	selector := discoveryv1.LabelManagedBy + "=" + planner.ManagedBy
	cur := map[string]*discoveryv1.EndpointSlice{}
	reached := func() (bool, []discoveryv1.EndpointSlice) {
		n := 0
		for _, s := range cur {
			n += count(s)
		}
		if n != want {
			return false, nil
		}
		out := make([]discoveryv1.EndpointSlice, 0, len(cur))
		for _, s := range cur {
			out = append(out, *s)
		}
		return true, out
	}
	for {
		l, err := api.List(ctx, metav1.ListOptions{LabelSelector: selector})
		if err != nil {
			return time.Time{}, nil, fmt.Errorf("list EndpointSlices of %s: %w", ns, err)
		}
		clear(cur)
		for i := range l.Items {
			cur[l.Items[i].Name] = &l.Items[i]
		}
		if started != nil {
			close(started)
			started = nil
		}
		if ok, out := reached(); ok {
			return time.Now(), out, nil
		}
		w, err := api.Watch(ctx, metav1.ListOptions{LabelSelector: selector, ResourceVersion: l.ResourceVersion})
		if err != nil {
			return time.Time{}, nil, fmt.Errorf("watch EndpointSlices of %s: %w", ns, err)
		}
		for ev := range w.ResultChan() {
			s, ok := ev.Object.(*discoveryv1.EndpointSlice)
			if !ok {
				break // an error (expired resourceVersion): LIST again
			}
			if ev.Type == watch.Deleted {
				delete(cur, s.Name)
			} else {
				cur[s.Name] = s
			}
			if ok, out := reached(); ok {
				w.Stop()
				return time.Now(), out, nil
			}
		}
		w.Stop()
		if ctx.Err() != nil {
			return time.Time{}, nil, fmt.Errorf("%w waiting for the slices of %s", ctx.Err(), ns)
		}
	}
}
