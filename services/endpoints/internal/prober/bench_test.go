package prober

// BenchmarkProbes measures what probing costs the leader. It runs only
// under -bench, one iteration is one measured window, so ask for a count:
//
//	go test -run XXX -bench Probes -benchtime 1x ./internal/prober/
//
// Sizes: IPLEDGER_BENCH_PROBE_WORKLOADS (default 1000) workloads with
// periodSeconds IPLEDGER_BENCH_PROBE_PERIOD (default 10), measured over
// IPLEDGER_BENCH_PROBE_WINDOW seconds (default 30) once every workload has
// been probed. The workloads' servers run in a separate process (this test
// binary, re-executed), so the CPU measured is the prober's alone.

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/ipledger/ipledger/lab/testenv"
	watcherv1 "github.com/ipledger/ipledger/proto/ipledger/watcher/v1"
	"github.com/ipledger/ipledger/services/endpoints/internal/prober/probetest"
)

const targetEnv = "IPLEDGER_PROBE_BENCH_TARGET"

func TestMain(m *testing.M) {
	if os.Getenv(targetEnv) == "1" {
		serveTargets()
		return
	}
	os.Exit(m.Run())
}

// serveTargets is the helper process: a TCP port that accepts and closes,
// and an HTTP port that answers 200, on 127.0.0.1, until stdin closes.
func serveTargets() {
	tcp, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	go func() {
		for {
			c, err := tcp.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	web, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	go func() {
		_ = http.Serve(web, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "ok") }))
	}()
	fmt.Printf("%d %d\n", tcp.Addr().(*net.TCPAddr).Port, web.Addr().(*net.TCPAddr).Port)
	_, _ = io.Copy(io.Discard, os.Stdin)
}

// startTargets runs the helper process and returns its TCP and HTTP ports.
func startTargets(b *testing.B) (tcpPort, httpPort int) {
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), targetEnv+"=1")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		b.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { stdin.Close(); _ = cmd.Wait() })
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		b.Fatal(err)
	}
	if _, err := fmt.Sscan(line, &tcpPort, &httpPort); err != nil {
		b.Fatalf("helper said %q: %v", line, err)
	}
	return tcpPort, httpPort
}

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkProbes probes N workloads (TCP, then HTTP) every period and
// reports, over the measured window:
//
//	probes/s          probes sent per second
//	cpu-cores         CPU time of the prober / wall time
//	cpu-us/probe      CPU time per probe
//	writes            Ready condition writes in the window (steady state: 0)
//	heap-KB/workload  Go heap in use per probed workload
//	goroutines        goroutines of the process while probing
func BenchmarkProbes(b *testing.B) {
	n := envInt("IPLEDGER_BENCH_PROBE_WORKLOADS", 1000)
	period := envInt("IPLEDGER_BENCH_PROBE_PERIOD", 10)
	window := time.Duration(envInt("IPLEDGER_BENCH_PROBE_WINDOW", 30)) * time.Second
	tcpPort, httpPort := startTargets(b)
	for _, kind := range []string{"tcp", "http"} {
		b.Run(kind, func(b *testing.B) {
			for b.Loop() {
				b.StopTimer()
				runtime.GC()
				var before runtime.MemStats
				runtime.ReadMemStats(&before)

				m := testMetrics(b)
				h := &harness{m: m}
				h.w = &fakeWriter{p: func() *Prober { return h.p }, m: m, objs: map[string]*watcherv1.Object{}}
				ctx, cancel := context.WithCancel(context.Background())
				h.p = New(ctx, Config{Concurrency: DefaultConcurrency, Dial: probetest.LoopbackDial}, h.w, m, slog.New(slog.NewTextHandler(io.Discard, nil)))
				for i := range n {
					probe := tcpProbe(tcpPort)
					if kind == "http" {
						probe = httpProbe(httpPort, "/healthz")
					}
					probe.PeriodSeconds, probe.TimeoutSeconds = int32(period), 1
					h.w.show(workload(fmt.Sprintf("vm-%05d", i), probe, "192.0.2.1"))
				}
				// Warm-up: every workload probed once and marked Ready.
				testenv.Eventually(b, time.Duration(3*period)*time.Second+time.Minute, func() error {
					if got := len(h.w.written()); got < n {
						return fmt.Errorf("%d of %d workloads Ready", got, n)
					}
					return nil
				})
				probes0 := h.probes(resultSuccess) + h.probes(resultFailure)
				writes0 := len(h.w.written())
				cpu0, wall0 := cpuTime(), time.Now()
				b.StartTimer()
				deadline := time.NewTimer(window)
				<-deadline.C // the measured window: the prober runs on its own
				b.StopTimer()
				cpu, wall := cpuTime()-cpu0, time.Since(wall0)
				probes := h.probes(resultSuccess) + h.probes(resultFailure) - probes0
				failed := h.probes(resultFailure)
				goroutines := runtime.NumGoroutine()
				var after runtime.MemStats
				runtime.ReadMemStats(&after)
				writes := len(h.w.written()) - writes0
				h.p.Stop()
				cancel()

				if failed > 0 {
					b.Fatalf("%v probes failed against live targets", failed)
				}
				b.ReportMetric(probes/wall.Seconds(), "probes/s")
				b.ReportMetric(cpu.Seconds()/wall.Seconds(), "cpu-cores")
				b.ReportMetric(float64(cpu.Microseconds())/probes, "cpu-us/probe")
				b.ReportMetric(float64(writes), "writes")
				b.ReportMetric(float64(int64(after.HeapInuse)-int64(before.HeapInuse))/1024/float64(n), "heap-KB/workload")
				b.ReportMetric(float64(goroutines), "goroutines")
				b.Logf("%d workloads, periodSeconds %d, %s window: %v probes, CPU %s, p99 slot wait %s",
					n, period, wall.Round(time.Millisecond), probes, cpu.Round(time.Millisecond), slotWaitP99(m))
				b.StartTimer()
			}
		})
	}
}

// slotWaitP99 is the upper bound of the bucket holding the 99th percentile
// of the slot waits.
func slotWaitP99(m *Metrics) string {
	ch := make(chan prometheus.Metric, 1)
	m.SlotWait.Collect(ch)
	var d dto.Metric
	if err := (<-ch).Write(&d); err != nil {
		return "?"
	}
	h := d.GetHistogram()
	for _, bk := range h.GetBucket() {
		if float64(bk.GetCumulativeCount()) >= 0.99*float64(h.GetSampleCount()) {
			return time.Duration(bk.GetUpperBound() * float64(time.Second)).String()
		}
	}
	return "over the last bucket"
}
