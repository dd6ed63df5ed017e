package app

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ipledger/ipledger/lab/testenv"
)

// BenchmarkBinaryMemory measures what the watcher binary costs as the cluster
// grows: for each size (IPLEDGER_BENCH_STEPS, default 1000,10000,50000
// ExternalWorkloads, created cumulatively through the API server) a fresh
// watcher process starts over the objects, and the benchmark reports
//   - its RSS once synced, per object above the RSS of a watcher over none;
//   - the peak RSS of its start-up (the initial LIST decoded page by page);
//   - the extra peak RSS while 50 subscribers (each on its own connection)
//     take a snapshot of every object, and the time until all are SYNCED.
//
// Peaks are VmHWM from /proc, reset (clear_refs 5) before each phase.
//
//	go test -count=1 -run XXX -bench BinaryMemory -benchtime 1x -timeout 60m ./internal/app/
func BenchmarkBinaryMemory(b *testing.B) {
	steps := benchSteps(b)
	for range b.N {
		env := testenv.Get(b)
		ctx, cancel := context.WithCancel(context.Background())
		ns := env.Namespace(b, nil)
		ews := env.Dynamic.Resource(externalWorkloads).Namespace(ns)
		b.Cleanup(func() { deleteAllExternalWorkloads(b, ews) })
		bin := env.Binary(b, "watcher")
		token, err := env.ServiceAccountToken(ctx, testenv.SystemNamespace, "ipledger-watcher")
		if err != nil {
			b.Fatal(err)
		}
		kubeconfig := env.KubeconfigFor(b, token)
		subToken := env.TokenFile(b, testenv.SystemNamespace, "ipledger-ipam")

		var rssEmpty int64
		created := 0
		for _, n := range append([]int{0}, steps...) {
			createExternalWorkloadsFrom(b, ctx, ews, created, n)
			created = n

			// A fresh process over n objects, as after a restart.
			grpcAddr, opsAddr := testenv.FreeAddr(b), testenv.FreeAddr(b)
			started := time.Now()
			proc := testenv.StartProcess(b, fmt.Sprintf("watcher-%d", n), bin, nil, "--kubeconfig", kubeconfig, "--grpc-plaintext",
				"--grpc-addr", grpcAddr, "--ops-addr", opsAddr, "--log-format", "text",
				fmt.Sprintf("--grpc-max-streams-per-identity=%d", benchSubscribers))
			ops := "http://" + opsAddr
			testenv.Eventually(b, 10*time.Minute, func() error {
				if _, err := httpGet(ops + "/readyz"); err != nil {
					return err
				}
				got, err := metricValue(ops, `ipledger_watcher_objects{kind="KIND_EXTERNAL_WORKLOAD"}`)
				if n == 0 && err != nil {
					return nil // no object of the kind: no series
				}
				if err != nil || int(got) != n {
					return fmt.Errorf("watcher holds %v ExternalWorkloads (%v), want %d", got, err, n)
				}
				return nil
			})
			startSecs := time.Since(started).Seconds()
			pid := proc.PID()
			rss, startPeak := procStatusKB(b, pid, "VmRSS"), procStatusKB(b, pid, "VmHWM")
			heap, _ := metricValue(ops, "go_memstats_heap_inuse_bytes")
			if n == 0 {
				rssEmpty = rss
				b.Logf("empty watcher: RSS %.1f MB (Go heap in use %.1f MB)", kbMB(rss), heap/(1<<20))
				if err := proc.Stop(10 * time.Second); err != nil {
					b.Fatalf("watcher exit: %v", err)
				}
				continue
			}

			// 50 subscribers take a snapshot of the n objects.
			resetPeakRSS(b, pid)
			subCtx, stopSubs := context.WithCancel(ctx)
			subs := make([]*benchSubscriber, benchSubscribers)
			syncStart := time.Now()
			for i := range subs {
				subs[i] = startBenchSubscriber(b, subCtx, grpcAddr, subToken, ns)
			}
			var slowest time.Duration
			for _, s := range subs {
				select {
				case <-s.synced:
				case err := <-s.err:
					b.Fatalf("subscriber ended before SYNCED: %v", err)
				case <-time.After(10 * time.Minute):
					b.Fatal("a subscriber got no SYNCED within 10 minutes")
				}
				if s.upserts != n {
					b.Fatalf("snapshot of %d UPSERTs, want %d", s.upserts, n)
				}
				slowest = max(slowest, s.syncedAt.Sub(syncStart))
			}
			snapPeak := procStatusKB(b, pid, "VmHWM")
			stopSubs()
			if err := proc.Stop(10 * time.Second); err != nil {
				b.Fatalf("watcher exit: %v", err)
			}

			perObj := float64(rss-rssEmpty) * 1024 / float64(n)
			tag := stepTag(n)
			b.ReportMetric(perObj, "RSS-B/obj-"+tag)
			b.ReportMetric(kbMB(rss), "RSS-MB-"+tag)
			b.ReportMetric(kbMB(snapPeak-rss), "snapshot50-extra-MB-"+tag)
			b.ReportMetric(slowest.Seconds(), "sync50-s-"+tag)
			b.ReportMetric(startSecs, "start-s-"+tag)
			b.Logf("%d objects: start to ready %.2fs, RSS %.1f MB (Go heap in use %.1f MB; start-up peak %.1f MB), %.0f B per object above empty (%.1f MB per 10,000); "+
				"50 snapshots: SYNCED in %.2fs, peak %.1f MB = +%.1f MB",
				n, startSecs, kbMB(rss), heap/(1<<20), kbMB(startPeak), perObj, perObj*10000/(1<<20), slowest.Seconds(), kbMB(snapPeak), kbMB(snapPeak-rss))
		}
		cancel()
	}
}

func benchSteps(b *testing.B) []int {
	b.Helper()
	s := os.Getenv("IPLEDGER_BENCH_STEPS")
	if s == "" {
		return []int{1000, 10000, 50000}
	}
	var steps []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n <= 0 || (len(steps) > 0 && n <= steps[len(steps)-1]) {
			b.Fatalf("IPLEDGER_BENCH_STEPS=%q: want increasing positive integers, e.g. 1000,10000,50000", s)
		}
		steps = append(steps, n)
	}
	return steps
}

func stepTag(n int) string {
	if n%1000 == 0 {
		return strconv.Itoa(n/1000) + "k"
	}
	return strconv.Itoa(n)
}

func kbMB(kb int64) float64 { return float64(kb) / 1024 }

// resetPeakRSS resets the process's VmHWM to its current RSS.
func resetPeakRSS(b *testing.B, pid int) {
	b.Helper()
	if err := os.WriteFile(fmt.Sprintf("/proc/%d/clear_refs", pid), []byte("5"), 0); err != nil {
		b.Fatalf("reset the peak RSS of the watcher: %v", err)
	}
}
