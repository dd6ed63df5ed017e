package cluster_test

import (
	"context"
	"fmt"
	"net"
	"slices"
	"sort"
	"testing"
	"time"

	"github.com/ipledger/ipledger/lab/cluster"
	"github.com/ipledger/ipledger/lab/testenv"
)

// watcherName is the headless Service the consumers dial (dns:///).
const watcherName = "ipledger-watcher.ipledger-system.svc.cluster.local"

// TestWatchersScaleIndependently: `kubectl scale deploy/ipledger-watcher
// --replicas=3` and nothing else; the headless Service's DNS names the
// three, the consumers (two replicas of each) spread over them, and
// deleting the pod each consumer is on, under load, leaves every Service
// with one address of its own.
func TestWatchersScaleIndependently(t *testing.T) {
	e := get(t)
	ctx := context.Background()
	l := e.startLoad(t, 100*time.Millisecond, 1000)
	e.scale(t, "ipledger-watcher", 3)
	watchers := e.pods(t, "ipledger-watcher")
	if len(watchers) != 3 {
		t.Fatalf("%d watcher pods after scaling to 3", len(watchers))
	}
	var want []string
	for _, p := range watchers {
		want = append(want, p.Status.PodIP)
	}
	sort.Strings(want)

	t.Run("the headless Service's DNS names every replica", func(t *testing.T) {
		r := &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
			return (&net.Dialer{Timeout: 2 * time.Second}).DialContext(ctx, network, net.JoinHostPort(cluster.DNSServiceIP, "53"))
		}}
		// The first queries after CoreDNS starts may time out: retry.
		testenv.Eventually(t, time.Minute, func() error {
			ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			defer cancel()
			got, err := r.LookupHost(ctx, watcherName)
			if err != nil {
				return err
			}
			sort.Strings(got)
			if !slices.Equal(got, want) {
				return fmt.Errorf("%s resolves to %v, want the watcher pods' %v", watcherName, got, want)
			}
			return nil
		})
	})

	// Consumers that streamed before keep their stream; new consumer pods
	// resolve the three watchers and round robin places each one's stream on
	// one of them, at random: three new pods all land on the replica the old
	// ones use about once in 27 runs. So when every stream is on one
	// watcher, every consumer pod is replaced (six fresh random choices) and
	// counted again, twice at most: a client that never resolves more than
	// one replica fails every round, a working one fails about once in
	// a million and a half runs (1/27 · (3/729)²).
	for _, d := range consumers {
		e.scale(t, d, 2)
	}
	t.Run("the consumers spread over the replicas", func(t *testing.T) {
		for round := 1; ; round++ {
			per := e.subscribersPerWatcher(t)
			t.Logf("round %d: streams per watcher: %v", round, per)
			if watchersServing(per) >= 2 {
				return
			}
			if round == 3 {
				t.Fatalf("every consumer streams from one watcher in %d rounds of fresh consumer pods (%v): the other replicas take no load", round, per)
			}
			for _, d := range consumers {
				for _, p := range e.pods(t, d) {
					e.deletePod(t, p)
				}
			}
			for _, d := range consumers {
				e.rolledOut(t, d)
			}
		}
	})

	t.Run("deleting the pod each consumer is on", func(t *testing.T) {
		dups := e.watchDuplicates()
		before := len(l.created())
		for pod, n := range e.subscribersPerWatcher(t) {
			if n > 0 {
				t.Logf("deleting watcher %s (%v streams)", pod, n)
				e.deletePod(t, podNamed(t, watchers, pod))
			}
		}
		e.rolledOut(t, "ipledger-watcher")
		// Allocations go on: Services created after the deletions get
		// addresses too.
		l.waitCreated(t, before+50)
		e.ips(t, l.ns, l.stop(t), 2*time.Minute)
		dups.check(t, "addresses on two Services")
		e.consistent(t, "")
		e.subscribersPerWatcher(t) // and every consumer streams again
	})
}

// watchersServing is how many watchers of per serve a stream.
func watchersServing(per map[string]float64) int {
	n := 0
	for _, streams := range per {
		if streams > 0 {
			n++
		}
	}
	return n
}

// subscribersPerWatcher waits until every consumer pod has synced from a
// watcher and the watchers' ipledger_watcher_subscribers add up to one
// stream per consumer pod, and returns that gauge per watcher pod.
func (e *env) subscribersPerWatcher(t testing.TB) map[string]float64 {
	t.Helper()
	ctx := context.Background()
	per := map[string]float64{}
	testenv.Eventually(t, 2*time.Minute, func() error {
		streams := 0
		for _, d := range consumers {
			for _, p := range e.pods(t, d) {
				m, err := e.metrics(ctx, p.Name)
				if err != nil {
					return err
				}
				if m["ipledger_stream_synced"] != 1 {
					return fmt.Errorf("consumer %s has not synced from a watcher", p.Name)
				}
				streams++
			}
		}
		clear(per)
		total := 0.0
		for _, p := range e.pods(t, "ipledger-watcher") {
			m, err := e.metrics(ctx, p.Name)
			if err != nil {
				return err
			}
			per[p.Name] = m["ipledger_watcher_subscribers"]
			total += per[p.Name]
		}
		if int(total) != streams {
			return fmt.Errorf("the watchers serve %v streams (%v), want one per consumer pod (%d)", total, per, streams)
		}
		return nil
	})
	return per
}
