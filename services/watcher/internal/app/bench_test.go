package app

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"

	"github.com/ipledger/ipledger/lab/heapstat"
	"github.com/ipledger/ipledger/lab/testenv"
	watcherv1 "github.com/ipledger/ipledger/proto/ipledger/watcher/v1"
	watcherv1grpc "github.com/ipledger/ipledger/proto/ipledger/watcher/v1/watcherv1grpc"
)

// The process-level benchmark: the real ipledger-watcher binary over
// ExternalWorkloads created through the API server, each number beside a
// floor measured in the same run (see BENCHMARKS.md).
//
//	go test -count=1 -run XXX -bench Binary -benchtime 1x -timeout 40m ./internal/app/
//
// IPLEDGER_BENCH_OBJECTS (default 10000) sets the number of objects,
// IPLEDGER_BENCH_CHANGES (default 3000) the number of label patches made at
// IPLEDGER_BENCH_RATE (default 1000) changes/s for the delta latency.

var externalWorkloads = schema.GroupVersionResource{Group: "ipledger.io", Version: "v1alpha1", Resource: "externalworkloads"}

const (
	benchSubscribers = 50
	benchCreators    = 16
	benchWriters     = 32
)

func benchEnvInt(b *testing.B, name string, def int) int {
	b.Helper()
	s := os.Getenv(name)
	if s == "" {
		return def
	}
	n, err := strconv.Atoi(s)
	if err != nil || n <= 0 {
		b.Fatalf("%s=%q: want a positive integer", name, s)
	}
	return n
}

func BenchmarkBinarySnapshotAndDeltaLatency(b *testing.B) {
	env := testenv.Get(b)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	objects := benchEnvInt(b, "IPLEDGER_BENCH_OBJECTS", 10000)
	changes := benchEnvInt(b, "IPLEDGER_BENCH_CHANGES", 3000)
	rate := benchEnvInt(b, "IPLEDGER_BENCH_RATE", 1000)

	ns := env.Namespace(b, nil)
	ews := env.Dynamic.Resource(externalWorkloads).Namespace(ns)
	// Registered first, so it runs last: after the watcher and the
	// subscribers are gone (no namespace controller runs to do it).
	b.Cleanup(func() { deleteAllExternalWorkloads(b, ews) })

	// The watcher binary with its own ServiceAccount.
	bin := env.Binary(b, "watcher")
	token, err := env.ServiceAccountToken(ctx, testenv.SystemNamespace, "ipledger-watcher")
	if err != nil {
		b.Fatal(err)
	}
	grpcAddr, opsAddr := testenv.FreeAddr(b), testenv.FreeAddr(b)
	// The 50 subscribers share one ServiceAccount: lift the per-identity limit.
	proc := testenv.StartProcess(b, "watcher", bin, nil, "--kubeconfig", env.KubeconfigFor(b, token), "--grpc-plaintext",
		"--grpc-addr", grpcAddr, "--ops-addr", opsAddr, "--log-format", "text",
		fmt.Sprintf("--grpc-max-streams-per-identity=%d", benchSubscribers))
	ops := "http://" + opsAddr
	testenv.Eventually(b, 60*time.Second, func() error {
		_, err := httpGet(ops + "/readyz")
		return err
	})
	pid := proc.PID()
	rss0 := procStatusKB(b, pid, "VmRSS")

	// N objects through the API server.
	start := time.Now()
	createExternalWorkloadsFrom(b, ctx, ews, 0, objects)
	createSecs := time.Since(start).Seconds()
	testenv.Eventually(b, 10*time.Minute, func() error {
		n, err := metricValue(ops, `ipledger_watcher_objects{kind="KIND_EXTERNAL_WORKLOAD"}`)
		if err != nil {
			return err
		}
		if int(n) != objects {
			return fmt.Errorf("watcher holds %v ExternalWorkloads, want %d", n, objects)
		}
		return nil
	})
	rss1 := procStatusKB(b, pid, "VmRSS")
	heap1, _ := metricValue(ops, "go_memstats_heap_inuse_bytes")

	// 50 subscribers to SYNCED, with the CPU the watcher and the API server
	// (+ etcd) spend on it.
	subToken := env.TokenFile(b, testenv.SystemNamespace, "ipledger-ipam")
	apiPIDs := []int{env.CP.APIServerPID(), env.CP.EtcdPID()}
	apiCPU0, watcherCPU0 := cpuSeconds(b, apiPIDs...), cpuSeconds(b, pid)
	subs := make([]*benchSubscriber, benchSubscribers)
	syncStart := time.Now()
	for i := range subs {
		subs[i] = startBenchSubscriber(b, ctx, grpcAddr, subToken, ns)
	}
	var slowest time.Duration
	var snapBytes int64
	for _, s := range subs {
		select {
		case <-s.synced:
		case err := <-s.err:
			b.Fatalf("subscriber ended before SYNCED: %v", err)
		case <-time.After(10 * time.Minute):
			b.Fatal("a subscriber got no SYNCED within 10 minutes")
		}
		if s.upserts != objects {
			b.Fatalf("snapshot of %d UPSERTs, want %d", s.upserts, objects)
		}
		slowest = max(slowest, s.syncedAt.Sub(syncStart))
		snapBytes += s.bytes
	}
	syncSecs := slowest.Seconds()
	apiCPUSync, watcherCPUSync := cpuSeconds(b, apiPIDs...)-apiCPU0, cpuSeconds(b, pid)-watcherCPU0
	rss2 := procStatusKB(b, pid, "VmRSS")
	hwm := procStatusKB(b, pid, "VmHWM")

	// Floor: the same 50 clients each LISTing the objects from the API
	// server, as 50 informers would at start (each on its own connection).
	apiCPU0 = cpuSeconds(b, apiPIDs...)
	var listBytes atomic.Int64
	listStart := time.Now()
	var wg sync.WaitGroup
	listRVs := make([]string, benchSubscribers)
	listErrs := make([]error, benchSubscribers)
	for i := range benchSubscribers {
		wg.Go(func() {
			c, err := dynamic.NewForConfig(countingConfig(env.Config, &listBytes))
			if err != nil {
				listErrs[i] = err
				return
			}
			// In pages of 500, as a reflector lists; each page is decoded
			// and dropped (an informer would keep them: see heapOfOneList).
			opts, n := metav1.ListOptions{Limit: 500}, 0
			for {
				l, err := c.Resource(externalWorkloads).Namespace(ns).List(ctx, opts)
				if err != nil {
					listErrs[i] = err
					return
				}
				n += len(l.Items)
				if opts.Continue = l.GetContinue(); opts.Continue == "" {
					listRVs[i] = l.GetResourceVersion()
					break
				}
			}
			if n != objects {
				listErrs[i] = fmt.Errorf("LIST of %d objects, want %d", n, objects)
			}
		})
	}
	wg.Wait()
	listSecs := time.Since(listStart).Seconds()
	apiCPUList := cpuSeconds(b, apiPIDs...) - apiCPU0
	for _, err := range listErrs {
		if err != nil {
			b.Fatal(err)
		}
	}
	cacheBytes := heapOfOneList(b, ctx, env.Dynamic, ns)

	// Delta latency: a plain client-go watch from the last LIST's
	// resourceVersion is the floor.
	floorClient, err := dynamic.NewForConfig(countingConfig(env.Config, new(atomic.Int64)))
	if err != nil {
		b.Fatal(err)
	}
	floor := startFloorWatch(b, ctx, floorClient, ns, slices.Max(listRVs))
	writes, writeSecs := patchAtRate(b, ctx, ews, objects, changes, rate)
	// Poll until every receiver has every write (bounded by a deadline).
	deadline := time.Now().Add(2 * time.Minute)
	for _, r := range append([]*receipts{floor}, subsReceipts(subs)...) {
		for r.missing(writes) > 0 && time.Now().Before(deadline) {
			time.Sleep(20 * time.Millisecond)
		}
	}
	var lat, latIssue []float64
	missing := 0
	for _, s := range subs {
		l, li, m := s.rec.latencies(writes)
		lat, latIssue = append(lat, l...), append(latIssue, li...)
		missing += m
	}
	floorLat, floorIssue, floorMissing := floor.latencies(writes)
	if len(lat) == 0 || len(floorLat) == 0 {
		b.Fatalf("no deliveries measured (watcher missing %d, floor missing %d)", missing, floorMissing)
	}
	for _, l := range [][]float64{lat, latIssue, floorLat, floorIssue} {
		slices.Sort(l)
	}
	floor.mu.Lock()
	restarts, ended := floor.restarts, floor.ended
	floor.mu.Unlock()
	cancel()
	if ended != "" {
		b.Logf("floor watch ended %d times; last: %s", restarts, ended)
	}

	mb := func(kb int64) float64 { return float64(kb) / 1024 }
	perTenK := mb(rss1-rss0) / float64(objects) * 10000
	b.ReportMetric(float64(objects), "objects")
	b.ReportMetric(mb(rss1), "watcher-RSS-MB")
	b.ReportMetric(mb(rss2), "watcher-RSS-after-sync-MB")
	b.ReportMetric(perTenK, "RSS-MB/10k-objects")
	b.ReportMetric(syncSecs, "sync50-s")
	b.ReportMetric(listSecs, "list50-floor-s")
	b.ReportMetric(apiCPUSync, "apiserver-cpu-s-sync50")
	b.ReportMetric(apiCPUList, "apiserver-cpu-s-list50")
	b.ReportMetric(pct(lat, 50), "delta-p50-ms")
	b.ReportMetric(pct(lat, 99), "delta-p99-ms")
	b.ReportMetric(pct(floorLat, 50), "floor-p50-ms")
	b.ReportMetric(pct(floorLat, 99), "floor-p99-ms")
	b.ReportMetric(pct(latIssue, 50), "delta-from-issue-p50-ms")
	b.ReportMetric(pct(latIssue, 99), "delta-from-issue-p99-ms")
	b.ReportMetric(pct(floorIssue, 50), "floor-from-issue-p50-ms")
	b.ReportMetric(pct(floorIssue, 99), "floor-from-issue-p99-ms")
	b.ReportMetric(float64(len(writes))/writeSecs, "changes/s")
	b.ReportMetric(pct(lat, 50)-pct(floorLat, 50), "added-p50-ms")
	b.ReportMetric(pct(lat, 99)-pct(floorLat, 99), "added-p99-ms")
	b.Logf("%d ExternalWorkloads created by %d clients in %.1fs (%.0f/s)", objects, benchCreators, createSecs, float64(objects)/createSecs)
	b.Logf("watcher RSS: %.1f MB empty, %.1f MB with the objects (Go heap in use %.1f MB), %.1f MB after 50 snapshots, peak %.1f MB; %.1f MB per 10,000 objects",
		mb(rss0), mb(rss1), heap1/(1<<20), mb(rss2), mb(hwm), perTenK)
	b.Logf("50 subscribers to SYNCED: %.2fs, %.1f MB of messages, watcher CPU %.2fs, API server+etcd CPU %.2fs", syncSecs, float64(snapBytes)/(1<<20), watcherCPUSync, apiCPUSync)
	b.Logf("floor, 50 client-go LISTs: %.2fs, %.1f MB of responses, API server+etcd CPU %.2fs; one LIST held as unstructured objects: %.1f MB of heap (x50 = %.0f MB)",
		listSecs, float64(listBytes.Load())/(1<<20), apiCPUList, float64(cacheBytes)/(1<<20), 50*float64(cacheBytes)/(1<<20))
	b.Logf("delta latency, %d changes in %.2fs (%.0f/s) to %d subscribers: p50 %.2f ms p99 %.2f ms (%d samples, %d missing); floor (one client-go watch): p50 %.2f ms p99 %.2f ms (%d missing, %d restarts); ratio p50 %.2fx p99 %.2fx",
		len(writes), writeSecs, float64(len(writes))/writeSecs, benchSubscribers, pct(lat, 50), pct(lat, 99), len(lat), missing,
		pct(floorLat, 50), pct(floorLat, 99), floorMissing, restarts, pct(lat, 50)/pct(floorLat, 50), pct(lat, 99)/pct(floorLat, 99))
	b.Logf("the same from when each write was issued: watcher p50 %.2f ms p99 %.2f ms; floor p50 %.2f ms p99 %.2f ms; ratio p50 %.2fx p99 %.2fx",
		pct(latIssue, 50), pct(latIssue, 99), pct(floorIssue, 50), pct(floorIssue, 99), pct(latIssue, 50)/pct(floorIssue, 50), pct(latIssue, 99)/pct(floorIssue, 99))
}

// deleteAllExternalWorkloads empties the benchmark's namespace. A
// DeleteCollection of 50,000 objects outlives the API server's request
// timeout (and goes on): it is repeated until none is left, within a deadline.
func deleteAllExternalWorkloads(b *testing.B, ews dynamic.ResourceInterface) {
	deadline := time.Now().Add(5 * time.Minute)
	for {
		err := ews.DeleteCollection(context.Background(), metav1.DeleteOptions{}, metav1.ListOptions{})
		l, lerr := ews.List(context.Background(), metav1.ListOptions{Limit: 1})
		if err == nil && lerr == nil && len(l.Items) == 0 {
			return
		}
		if time.Now().After(deadline) {
			b.Errorf("delete the benchmark's ExternalWorkloads: %v, %v", err, lerr)
			return
		}
		time.Sleep(time.Second) // polling the deletion, not synchronising
	}
}

// createExternalWorkloadsFrom creates ew-<from> … ew-<n-1> with 16 clients.
func createExternalWorkloadsFrom(b *testing.B, ctx context.Context, ews dynamic.ResourceInterface, from, n int) {
	b.Helper()
	next := atomic.Int64{}
	next.Store(int64(from))
	errs := make(chan error, benchCreators)
	var wg sync.WaitGroup
	for range benchCreators {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				if _, err := ews.Create(ctx, externalWorkload(i), metav1.CreateOptions{}); err != nil {
					errs <- fmt.Errorf("create ExternalWorkload %d: %w", i, err)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		b.Fatal(err)
	}
}

func externalWorkload(i int) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "ipledger.io/v1alpha1",
		"kind":       "ExternalWorkload",
		"metadata":   map[string]any{"name": fmt.Sprintf("ew-%d", i), "labels": map[string]any{"app": "bench"}},
		"spec": map[string]any{
			"workloadIPs": []any{map[string]any{"ip": fmt.Sprintf("10.%d.%d.%d", i>>16&255, i>>8&255, i&255)}},
			"ports":       []any{map[string]any{"name": "http", "port": int64(8080), "protocol": "TCP"}},
		},
	}}
}

// patchAtRate changes a label of `changes` objects (round robin) at
// rate per second and returns when each write's API call returned,
// by name@resourceVersion.
func patchAtRate(b *testing.B, ctx context.Context, ews dynamic.ResourceInterface, objects, changes, rate int) (map[string]benchWrite, float64) {
	b.Helper()
	jobs := make(chan int)
	var mu sync.Mutex
	writes := make(map[string]benchWrite, changes)
	var firstErr error
	var wg sync.WaitGroup
	for range benchWriters {
		wg.Go(func() {
			for i := range jobs {
				patch := fmt.Appendf(nil, `{"metadata":{"labels":{"bench-change":"%d"}}}`, i)
				issued := time.Now()
				o, err := ews.Patch(ctx, fmt.Sprintf("ew-%d", i%objects), types.MergePatchType, patch, metav1.PatchOptions{})
				at := time.Now()
				mu.Lock()
				if err != nil && firstErr == nil {
					firstErr = err
				} else if err == nil {
					writes[o.GetName()+"@"+o.GetResourceVersion()] = benchWrite{issued: issued, returned: at}
				}
				mu.Unlock()
			}
		})
	}
	start := time.Now()
	interval := time.Second / time.Duration(rate)
	for i := range changes {
		// Pacing, not synchronisation: change i is due at start + i*interval.
		if d := time.Until(start.Add(time.Duration(i) * interval)); d > 0 {
			time.Sleep(d)
		}
		jobs <- i
	}
	close(jobs)
	wg.Wait()
	secs := time.Since(start).Seconds()
	if firstErr != nil {
		b.Fatalf("patch: %v", firstErr)
	}
	return writes, secs
}

// receipts records when each name@resourceVersion arrived.
type receipts struct {
	mu       sync.Mutex
	at       map[string]time.Time
	restarts int    // floor watch only: times the API server ended it
	ended    string // floor watch only: the last error
}

func newReceipts() *receipts { return &receipts{at: map[string]time.Time{}} }

func (r *receipts) add(name, rv string, at time.Time) {
	r.mu.Lock()
	r.at[name+"@"+rv] = at
	r.mu.Unlock()
}

func (r *receipts) missing(writes map[string]benchWrite) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for k := range writes {
		if _, ok := r.at[k]; !ok {
			n++
		}
	}
	return n
}

// benchWrite is when one write's API call was made and when it returned.
type benchWrite struct{ issued, returned time.Time }

// latencies returns receipt minus write-return in ms for each write received
// (negative when the event arrived before the write's response), receipt
// minus write-issue, and how many writes were not received.
func (r *receipts) latencies(writes map[string]benchWrite) ([]float64, []float64, int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var fromReturn, fromIssue []float64
	missing := 0
	for k, w := range writes {
		at, ok := r.at[k]
		if !ok {
			missing++
			continue
		}
		fromReturn = append(fromReturn, float64(at.Sub(w.returned).Microseconds())/1000)
		fromIssue = append(fromIssue, float64(at.Sub(w.issued).Microseconds())/1000)
	}
	return fromReturn, fromIssue, missing
}

// benchSubscriber is one plain gRPC Watch client on its own connection.
type benchSubscriber struct {
	synced   chan struct{}
	err      chan error
	upserts  int // snapshot UPSERTs, set before synced is closed
	bytes    int64
	syncedAt time.Time
	rec      *receipts
}

func subsReceipts(subs []*benchSubscriber) []*receipts {
	out := make([]*receipts, len(subs))
	for i, s := range subs {
		out[i] = s.rec
	}
	return out
}

func startBenchSubscriber(b *testing.B, ctx context.Context, addr, tokenFile, ns string) *benchSubscriber {
	b.Helper()
	conn := testenv.Dial(b, addr, tokenFile)
	s := &benchSubscriber{synced: make(chan struct{}), err: make(chan error, 1), rec: newReceipts()}
	go func() {
		stream, err := watcherv1grpc.NewWatcherServiceClient(conn).Watch(ctx, &watcherv1.WatchRequest{
			Kinds: []watcherv1.Kind{watcherv1.Kind_KIND_EXTERNAL_WORKLOAD}, Namespaces: []string{ns}})
		if err != nil {
			s.err <- err
			return
		}
		synced := false
		for {
			ev, err := stream.Recv()
			if err != nil {
				s.err <- err
				return
			}
			now := time.Now()
			switch {
			case !synced && ev.GetType() == watcherv1.EventType_EVENT_TYPE_UPSERT:
				s.upserts++
				s.bytes += int64(proto.Size(ev))
			case !synced && ev.GetType() == watcherv1.EventType_EVENT_TYPE_SYNCED:
				synced = true
				s.syncedAt = now
				close(s.synced)
			case synced && ev.GetType() == watcherv1.EventType_EVENT_TYPE_UPSERT:
				m := ev.GetObject().GetMeta()
				s.rec.add(m.GetName(), m.GetResourceVersion(), now)
			}
		}
	}()
	return s
}

// startFloorWatch is a plain client-go watch of the namespace's
// ExternalWorkloads from resourceVersion rv.
func startFloorWatch(b *testing.B, ctx context.Context, dyn dynamic.Interface, ns, rv string) *receipts {
	b.Helper()
	w, err := dyn.Resource(externalWorkloads).Namespace(ns).Watch(ctx, metav1.ListOptions{ResourceVersion: rv})
	if err != nil {
		b.Fatal(err)
	}
	r := newReceipts()
	go func() {
		// Like a reflector, resume from the last resourceVersion seen when
		// the API server ends the watch, until the benchmark ends.
		for {
			for ev := range w.ResultChan() {
				now := time.Now()
				if o, ok := ev.Object.(*unstructured.Unstructured); ok {
					r.add(o.GetName(), o.GetResourceVersion(), now)
					rv = o.GetResourceVersion()
				} else {
					r.mu.Lock()
					r.ended = fmt.Sprintf("%v event %v", ev.Type, ev.Object)
					r.mu.Unlock()
				}
			}
			if ctx.Err() != nil {
				return
			}
			r.mu.Lock()
			r.restarts++
			r.mu.Unlock()
			nw, err := dyn.Resource(externalWorkloads).Namespace(ns).Watch(ctx, metav1.ListOptions{ResourceVersion: rv})
			if err != nil {
				r.mu.Lock()
				r.ended = err.Error()
				r.mu.Unlock()
				return
			}
			w = nw
		}
	}()
	return r
}

// countingConfig is a copy of cfg on a connection of its own (a custom
// dialer keeps client-go from sharing the cached transport) that counts the
// response bytes read.
func countingConfig(cfg *rest.Config, n *atomic.Int64) *rest.Config {
	c := rest.CopyConfig(cfg)
	c.Dial = (&net.Dialer{}).DialContext
	c.WrapTransport = func(rt http.RoundTripper) http.RoundTripper {
		return testenv.RoundTripFunc(func(req *http.Request) (*http.Response, error) {
			resp, err := rt.RoundTrip(req)
			if err == nil {
				resp.Body = &countingBody{ReadCloser: resp.Body, n: n}
			}
			return resp, err
		})
	}
	return c
}

type countingBody struct {
	io.ReadCloser
	n *atomic.Int64
}

func (c *countingBody) Read(p []byte) (int, error) {
	k, err := c.ReadCloser.Read(p)
	c.n.Add(int64(k))
	return k, err
}

// heapOfOneList is the Go heap one LIST of the namespace's objects holds as
// unstructured objects: about what one informer's cache costs its process.
func heapOfOneList(b *testing.B, ctx context.Context, dyn dynamic.Interface, ns string) uint64 {
	b.Helper()
	before := heapstat.Live()
	l, err := dyn.Resource(externalWorkloads).Namespace(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		b.Fatal(err)
	}
	after := heapstat.Live()
	runtime.KeepAlive(l)
	if len(l.Items) == 0 || after < before {
		return 0
	}
	return after - before
}

func pct(sorted []float64, p int) float64 {
	return sorted[min(len(sorted)-1, len(sorted)*p/100)]
}

func httpGet(url string) ([]byte, error) {
	resp, err := http.Get(url)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return body, nil
}

// metricValue reads one sample (name with its labels, as exposed) from the
// ops server's /metrics.
func metricValue(ops, sample string) (float64, error) {
	body, err := httpGet(ops + "/metrics")
	if err != nil {
		return 0, err
	}
	sc := bufio.NewScanner(strings.NewReader(string(body)))
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), sample+" "); ok {
			return strconv.ParseFloat(strings.TrimSpace(v), 64)
		}
	}
	return 0, fmt.Errorf("no %s in /metrics yet", sample)
}

// cpuSeconds is the user+system CPU time the processes have used.
func cpuSeconds(b *testing.B, pids ...int) float64 {
	b.Helper()
	var total float64
	for _, pid := range pids {
		s, ok := testenv.ProcCPUSeconds(pid)
		if !ok {
			b.Fatalf("no /proc/%d/stat", pid)
		}
		total += s
	}
	return total
}

// procStatusKB reads a kB field (VmRSS, VmHWM) of /proc/<pid>/status.
func procStatusKB(b *testing.B, pid int, field string) int64 {
	b.Helper()
	v, err := testenv.ProcStatusBytes(pid, field)
	if err != nil {
		b.Fatal(err)
	}
	return int64(v / 1024)
}
