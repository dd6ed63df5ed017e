package e2e

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ipledger/ipledger/lab/ec2test"
	"github.com/ipledger/ipledger/lab/testenv"
	"github.com/ipledger/ipledger/test/e2e/journey"
)

// The load of TestUnknownAnnotationsCostNoMemory: Services each created
// with unknownAnnotations annotations of unknownAnnotationBytes under
// ipledger.io/ that nothing in ipledger reads (200 KB a Service: created,
// not applied, whose last-applied copy would exceed the API server's
// 256 KiB), and how much each process's settled RSS may grow meanwhile:
// measured 1–9 MB (what 150 ordinary Services cost, and the pages the
// runtime has not yet returned after decoding 30 MB of annotations on a busy
// machine), against 52–77 MB when the annotations were streamed; and how
// much each process's Go heap in use, after a collection, may grow: what it
// keeps, which RSS only bounds from above — measured 0–4.2 MB (the
// watcher's informer cache and stream buffers for 150 more Services on a
// busy machine), against the 30 MB the annotations weigh, so a third of
// that.
const (
	unknownAnnotationServices    = 150
	unknownAnnotations           = 4
	unknownAnnotationBytes       = 50_000
	unknownAnnotationMaxGrowth   = 16 << 20
	unknownAnnotationMaxRetained = 10 << 20
)

// TestUnknownAnnotationsCostNoMemory: Services carrying 200 KB of
// ipledger.io/ annotations no consumer reads are allocated as any other,
// and grow no process's settled RSS (after a collection) by more than a few
// MB: the watcher drops the annotations before its informer caches the
// Service, so neither it nor any subscriber keeps them. Before, every
// annotation under ipledger.io/ was streamed and kept: the watcher's RSS grew
// by 77 MB, ipam's by 60 and endpoints' by 52.
func TestUnknownAnnotationsCostNoMemory(t *testing.T) {
	env := testenv.Get(t)
	moto := ec2test.Get(t)
	sys := StartSystem(t, SystemOptions{Watchers: 1, IPAM: 1, Endpoints: 1, EIPD: 1, EC2Endpoint: moto.URL, ClusterID: ec2test.ClusterID(t), Pprof: true})
	ns := env.Namespace(t, nil)
	journey.CreatePool(t, env.Dynamic, "bound", 24, ns)
	all := []*Service{sys.Watchers[0], sys.IPAM[0], sys.Endpoints[0], sys.EIPD[0]}

	// A few ordinary Services first, so that what the first allocation
	// sets up (the ledger, the status writer, the event recorder) is in the
	// baseline.
	for i := range 5 {
		journey.CreateLoadBalancer(t, env.Client, ns, fmt.Sprintf("warm-%d", i), nil, corev1.ProtocolTCP, 80)
	}
	waitAllocated(t, ns, 5)
	start := time.Now()
	before := settledRSSOf(t, all)
	heapBefore := heapInUse(t, all)
	t.Logf("settled in %s", time.Since(start).Round(time.Millisecond))

	start = time.Now()
	padding := strings.Repeat("x", unknownAnnotationBytes)
	for i := range unknownAnnotationServices {
		ann := map[string]string{}
		for j := range unknownAnnotations {
			ann[fmt.Sprintf("ipledger.io/unknown-%d", j)] = padding
		}
		journey.CreateLoadBalancer(t, env.Client, ns, fmt.Sprintf("padded-%03d", i), ann, corev1.ProtocolTCP, 80)
	}
	waitAllocated(t, ns, 5+unknownAnnotationServices)
	testenv.Eventually(t, 30*time.Second, func() error {
		if got := sys.Watchers[0].Metric(t, "ipledger_watcher_objects", `kind="KIND_SERVICE"`); got < 5+unknownAnnotationServices {
			return fmt.Errorf("the watcher holds %v Services", got)
		}
		return nil
	})

	t.Logf("created and allocated in %s", time.Since(start).Round(time.Millisecond))
	start = time.Now()
	after := settledRSSOf(t, all)
	heapAfter := heapInUse(t, all)
	t.Logf("settled in %s", time.Since(start).Round(time.Millisecond))
	for i, svc := range all {
		growth, retained := after[i]-before[i], heapAfter[i]-heapBefore[i]
		t.Logf("%s: Go heap in use after a collection %.1f → %.1f MB (%+.1f MB), settled RSS %.1f → %.1f MB (%+.1f MB, %.0f B per Service) after %d Services of %d KB of unknown annotations",
			svc.Component, heapBefore[i]/(1<<20), heapAfter[i]/(1<<20), retained/(1<<20), before[i]/(1<<20), after[i]/(1<<20),
			growth/(1<<20), growth/unknownAnnotationServices, unknownAnnotationServices, unknownAnnotations*unknownAnnotationBytes/1000)
		if retained > unknownAnnotationMaxRetained {
			t.Errorf("%s keeps %.1f MB more of Go heap, want at most %d MB: it keeps annotations nothing reads",
				svc.Component, retained/(1<<20), unknownAnnotationMaxRetained>>20)
		}
		if growth > unknownAnnotationMaxGrowth {
			t.Errorf("%s's settled RSS grew by %.1f MB, want at most %d MB: it keeps annotations nothing reads",
				svc.Component, growth/(1<<20), unknownAnnotationMaxGrowth>>20)
		}
	}
}

// waitAllocated waits until n Services of ns have an address.
func waitAllocated(t *testing.T, ns string, n int) {
	t.Helper()
	env := testenv.Get(t)
	testenv.Eventually(t, 60*time.Second, func() error {
		list, err := env.Client.CoreV1().Services(ns).List(context.Background(), metav1.ListOptions{})
		if err != nil {
			return err
		}
		allocated := 0
		for _, svc := range list.Items {
			if len(svc.Status.LoadBalancer.Ingress) > 0 {
				allocated++
			}
		}
		if allocated < n {
			return fmt.Errorf("%d of %d Services of %s allocated", allocated, n, ns)
		}
		return nil
	})
}

// heapInUse is each replica's Go heap in use, read right after settledRSSOf
// (which collected the garbage).
func heapInUse(t *testing.T, replicas []*Service) []float64 {
	t.Helper()
	out := make([]float64, len(replicas))
	for i, svc := range replicas {
		out[i] = svc.Metric(t, "go_memstats_heap_inuse_bytes")
	}
	return out
}

// settledRSSOf is settledRSS of each replica, read at once.
func settledRSSOf(t *testing.T, replicas []*Service) []float64 {
	t.Helper()
	out := make([]float64, len(replicas))
	errs := make([]error, len(replicas))
	var wg sync.WaitGroup
	for i, svc := range replicas {
		wg.Go(func() { out[i], errs[i] = settledRSS(svc) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	return out
}

// settledRSS is the RSS of a replica once it has collected its garbage (a
// heap profile with gc=1, served with --enable-pprof) and its RSS has stopped
// moving: what it keeps, not what it last decoded.
func settledRSS(svc *Service) (float64, error) {
	resp, err := http.Get("http://" + svc.OpsAddr + "/debug/pprof/heap?gc=1")
	if err != nil {
		return 0, fmt.Errorf("%s: collect garbage: %w", svc.Component, err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	// Readings a second apart until two agree within 64 KB: the runtime
	// returns freed pages to the system in the background.
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	deadline := time.Now().Add(30 * time.Second)
	last := -1.0
	for {
		rss, err := testenv.ProcStatusBytes(svc.PID(), "VmRSS")
		if err != nil {
			return 0, fmt.Errorf("%s: %w", svc.Component, err)
		}
		if d := rss - last; d <= 64<<10 && d >= -64<<10 {
			return rss, nil
		}
		if time.Now().After(deadline) {
			return 0, fmt.Errorf("%s's RSS did not settle in 30s: %.1f MB, then %.1f MB", svc.Component, last/(1<<20), rss/(1<<20))
		}
		last = rss
		<-tick.C
	}
}
