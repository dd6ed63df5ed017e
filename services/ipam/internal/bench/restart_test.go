package bench

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"

	"github.com/ipledger/ipledger/lab/testenv"
	watcherv1 "github.com/ipledger/ipledger/proto/ipledger/watcher/v1"
	watcherv1grpc "github.com/ipledger/ipledger/proto/ipledger/watcher/v1/watcherv1grpc"
	"github.com/ipledger/ipledger/services/ipam/internal/ledger"
)

// restartSample is one restart of ipam over N allocated Services: when,
// after the process started, each milestone of its first term was reached,
// and the restart floor measured just before it.
type restartSample struct {
	synced, leading, termStarted, firstAlloc time.Duration
	floor                                    time.Duration
	read, parse, fence                       float64
	redundantWrites                          float64
	rssMB                                    float64
	load                                     string
	variant, index                           int
}

// restartMilestones are the log lines (their msg) that mark a term's start,
// in order: the stream synced, the Lease won, the ledger fenced and rebuilt.
var restartMilestones = []string{
	"Watcher stream synced; campaigning for the Lease",
	"Started leading",
	"Term started: ledger fenced and allocations rebuilt",
}

// measureRestarts stops ipam and starts it again `restarts` times over the
// N allocated Services, each time with one new Service waiting, and reports
// the time to that Service's address with the milestones before it, beside
// the restart floor (floor) measured while ipam is stopped. start must start
// ipam with extra flags appended and its ops address.
func measureRestarts(b *testing.B, ctx context.Context, client kubernetes.Interface, ns, class string, n, restarts int,
	running *testenv.Process, vars []variant, start func(v int, name, opsAddr string, extra ...string) *testenv.Process, floor func(i int) time.Duration) {
	var samples []restartSample
	for i := range restarts {
		if err := running.Stop(30 * time.Second); err != nil {
			b.Logf("ipam exited: %v", err)
		}
		floorTook := floor(i)
		name := fmt.Sprintf("after-restart-%d", i)
		created, err := client.CoreV1().Services(ns).Create(ctx, lbService(ns, name, class), metav1.CreateOptions{})
		if err != nil {
			b.Fatal(err)
		}
		// Watched, not polled: a poll every 50 ms would blur a restart of
		// half a second by up to a tenth.
		w, err := client.CoreV1().Services(ns).Watch(ctx, metav1.ListOptions{
			FieldSelector: "metadata.name=" + name, ResourceVersion: created.ResourceVersion})
		if err != nil {
			b.Fatal(err)
		}
		ops := testenv.FreeAddr(b)
		load := loadavg()
		begin := time.Now()
		v := variantOf(i, len(vars))
		running = start(v, fmt.Sprintf("ipam-restarted-%d", i), ops, "--log-level", "info")
		if path := os.Getenv("IPLEDGER_BENCH_RESTART_PPROF"); path != "" {
			go profileFromStart(ops, fmt.Sprintf("%s.%d", path, i))
		}
		waitForAddress(b, w, name)
		sample := restartSample{firstAlloc: time.Since(begin), floor: floorTook, variant: v, index: i}
		// Let the restarted process finish its first passes, then count:
		// exactly one status write (the new Service's) when nothing held
		// is re-decided.
		testenv.Eventually(b, time.Minute, func() error {
			sample.redundantWrites = scrape(ctx, ops, `ipledger_ipam_status_writes_total{result="ok"}`) - 1
			if sample.redundantWrites < 0 || scrape(ctx, ops, "ipledger_ipam_pending_services") != 0 {
				return fmt.Errorf("the new Service's write is not counted yet")
			}
			return nil
		})
		// And its history writer has read the history, compared it with
		// the ledger and written what changed: the peak RSS below then
		// includes that, wherever in the term it happens.
		waitHistoryWritten(b, ctx, ops)
		if prefix := os.Getenv("IPLEDGER_BENCH_RESTART_HEAP"); prefix != "" {
			saveHeap(b, ops, running, vars[v].profilePath(fmt.Sprintf("%s.%d", prefix, i)))
		}
		step := func(s string) float64 {
			return scrape(ctx, ops, `ipledger_ipam_ledger_open_duration_seconds_sum{step="`+s+`"}`)
		}
		sample.read, sample.parse, sample.fence = step("read"), step("parse"), step("fence")
		at := milestones(b, running.LogPath, begin)
		sample.synced, sample.leading, sample.termStarted = at[0], at[1], at[2]
		sample.rssMB = processPeakRSS(b, running.PID()) / 1e6
		sample.load = load + " → " + loadavg()
		samples = append(samples, sample)
		b.Logf("restart %d (%s) with %d ledger entries: first new allocation after %s = %.2f× the restart floor (%s; stream synced %s, leading %s, term started %s; "+
			"ledger read %.3f s, parse %.3f s, fence %.3f s); %v status writes besides the new Service's; RSS peak %.0f MB; load %s",
			i+1, vars[v].name, n, ms(sample.firstAlloc), sample.ratio(), ms(sample.floor), ms(sample.synced), ms(sample.leading), ms(sample.termStarted),
			sample.read, sample.parse, sample.fence, sample.redundantWrites, sample.rssMB, sample.load)
	}
	slices.SortFunc(samples, func(a, b restartSample) int { return int(a.firstAlloc - b.firstAlloc) })
	med := samples[len(samples)/2]
	var redundant, rss float64
	var all, ratios []string
	for _, s := range samples {
		redundant, rss = max(redundant, s.redundantWrites), max(rss, s.rssMB)
		all = append(all, ms(s.firstAlloc))
	}
	byRatio := slices.SortedFunc(slices.Values(samples), func(a, b restartSample) int { return cmpFloat(a.ratio(), b.ratio()) })
	for _, s := range byRatio {
		ratios = append(ratios, fmt.Sprintf("%.2f", s.ratio()))
	}
	b.ReportMetric(med.firstAlloc.Seconds(), "restart-first-alloc-s")
	b.ReportMetric(byRatio[len(byRatio)/2].ratio(), "restart-x-floor")
	b.ReportMetric(redundant, "restart-redundant-writes")
	b.ReportMetric(med.parse, "restart-ledger-parse-s")
	b.ReportMetric(med.fence, "restart-ledger-fence-s")
	b.Logf("restart with %d ledger entries, %d times: first new allocation after %s (median %s; its milestones: stream synced %s, "+
		"leading %s, term started %s) = %s× the restart floor; at most %v redundant status writes; restart RSS peak at most %.0f MB",
		n, len(samples), strings.Join(all, " "), ms(med.firstAlloc), ms(med.synced), ms(med.leading), ms(med.termStarted),
		strings.Join(ratios, " "), redundant, rss)
	if len(vars) > 1 {
		restartsByVariant(b, vars, samples)
	}
}

// restartsByVariant logs each variant's restarts, in the order they ran
// (the time to the first new allocation over its floor, the RSS peak),
// their medians, and the ratio of the medians (the first variant's over
// the second's).
func restartsByVariant(b *testing.B, vars []variant, samples []restartSample) {
	slices.SortFunc(samples, func(a, b restartSample) int { return a.index - b.index })
	meds := make([][2]float64, len(vars))
	for v := range vars {
		var ratios, rss []float64
		for _, s := range samples {
			if s.variant == v {
				ratios, rss = append(ratios, s.ratio()), append(rss, s.rssMB)
			}
		}
		meds[v] = [2]float64{median(ratios), median(rss)}
		b.Logf("restart, %s: first new allocation × the restart floor %s (median %.2f); RSS peak %s MB (median %.0f)",
			vars[v].name, floats(ratios, "%.2f"), meds[v][0], floats(rss, "%.0f"), meds[v][1])
	}
	b.Logf("restart, %s / %s (medians): first new allocation × the floor %.2f, RSS peak %.2f",
		vars[0].name, vars[1].name, meds[0][0]/meds[1][0], meds[0][1]/meds[1][1])
}

// waitHistoryWritten waits until the ipam at ops has written every history
// change it was told of.
func waitHistoryWritten(b *testing.B, ctx context.Context, ops string) {
	b.Helper()
	testenv.Eventually(b, time.Minute, func() error {
		if n := scrape(ctx, ops, "ipledger_ipam_history_unwritten_changes"); n != 0 {
			return fmt.Errorf("%v history changes unwritten", n)
		}
		return nil
	})
}

// ratio is the restart's time to its first allocation over its floor's.
func (s restartSample) ratio() float64 { return s.firstAlloc.Seconds() / s.floor.Seconds() }

// restartFloor is the least any restart must do, by a bare client in the
// bench's process with ipam stopped: read the world from the watcher (a
// stream of ipam's kinds to SYNCED, every response decoded), then the
// ledger (a LIST of its ConfigMaps), then write one status patch (of svc,
// of a class ipam does not serve, with the i-th test address). A restart
// over its floor is what ipam adds: its process start, the Lease, the
// fence, the rebuild and the decision.
func restartFloor(b *testing.B, ctx context.Context, client kubernetes.Interface, watcherAddr, tokenFile, ledgerNS string,
	svc *corev1.Service, i int) time.Duration {
	b.Helper()
	conn := testenv.Dial(b, watcherAddr, tokenFile)
	start := time.Now()
	stream, err := watcherv1grpc.NewWatcherServiceClient(conn).Watch(ctx, &watcherv1.WatchRequest{Kinds: []watcherv1.Kind{
		watcherv1.Kind_KIND_SERVICE, watcherv1.Kind_KIND_NAMESPACE, watcherv1.Kind_KIND_IP_POOL, watcherv1.Kind_KIND_LEDGER_CONFIG_MAP},
		OmitOldObject: true})
	if err != nil {
		b.Fatal(err)
	}
	for {
		resp, err := stream.Recv()
		if err != nil {
			b.Fatal(err)
		}
		if resp.GetType() == watcherv1.EventType_EVENT_TYPE_SYNCED {
			break
		}
	}
	if _, err := client.CoreV1().ConfigMaps(ledgerNS).List(ctx, metav1.ListOptions{LabelSelector: ledger.LabelKey + "=true"}); err != nil {
		b.Fatal(err)
	}
	// The ingress alone: ipam's condition on a Service of another class
	// would be taken back by the restarted ipam, a write of its own.
	body := fmt.Sprintf(`{"status":{"loadBalancer":{"ingress":[{"ip":"192.0.2.%d"}]}}}`, 1+i%250)
	if _, err := client.CoreV1().Services(svc.Namespace).Patch(ctx, svc.Name, types.MergePatchType, []byte(body),
		metav1.PatchOptions{}, "status"); err != nil {
		b.Fatal(err)
	}
	return time.Since(start)
}

// milestones reads the restartMilestones' times from a text-format log,
// as durations since begin (0 for a milestone not found).
func milestones(b *testing.B, logPath string, begin time.Time) []time.Duration {
	f, err := os.Open(logPath)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	at := make([]time.Duration, len(restartMilestones))
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		for i, msg := range restartMilestones {
			if at[i] != 0 || !strings.Contains(line, `msg="`+msg+`"`) {
				continue
			}
			stamp, _, _ := strings.Cut(strings.TrimPrefix(line, "time="), " ")
			if t, err := time.Parse(time.RFC3339Nano, stamp); err == nil {
				at[i] = t.Sub(begin)
			}
		}
	}
	return at
}

func ms(d time.Duration) string { return d.Round(time.Millisecond).String() }

// profileFromStart saves a CPU profile (IPLEDGER_BENCH_RESTART_PPROF_SECONDS
// long, 1 s unless set) of a process from as soon as its ops server
// answers; the profiles of several restarts are read together (go tool
// pprof a.0 a.1 …).
func profileFromStart(opsAddr, path string) {
	for range 200 {
		if resp, err := http.Get("http://" + opsAddr + "/healthz"); err == nil {
			resp.Body.Close()
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	saveProfile(opsAddr, fmt.Sprintf("profile?seconds=%d", envInt("IPLEDGER_BENCH_RESTART_PPROF_SECONDS", 1)), path)
}

// waitForAddress reads w until the Service shows an address, for at most
// ten minutes.
func waitForAddress(b *testing.B, w watch.Interface, name string) {
	defer w.Stop()
	timeout := time.After(10 * time.Minute)
	for {
		select {
		case ev, ok := <-w.ResultChan():
			if !ok {
				b.Fatalf("the watch of Service %s ended before it had an address", name)
			}
			if s, isSvc := ev.Object.(*corev1.Service); isSvc && len(s.Status.LoadBalancer.Ingress) > 0 {
				return
			}
		case <-timeout:
			b.Fatalf("Service %s has no address after 10 minutes", name)
		}
	}
}
