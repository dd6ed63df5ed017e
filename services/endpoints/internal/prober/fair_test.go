package prober

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ipledger/ipledger/lab/testenv"
	watcherv1 "github.com/ipledger/ipledger/proto/ipledger/watcher/v1"
	"github.com/ipledger/ipledger/services/endpoints/internal/prober/probetest"
)

// TestProbeSlotsAreSharedFairlyAcrossNamespaces: one namespace's unanswered
// workloads must not hold every probe slot. A namespace "flood" has 40
// workloads whose addresses live in a network namespace the test made,
// behind an iptables DROP rule (probetest.Blackhole): each probe hangs for
// its whole timeout, 60 "seconds". Once the flood holds the slots it may,
// a namespace "quiet" gets one workload probed every 5 "seconds" (the test's
// second is 100ms): its probes must come at most 2× its period apart, the
// first within 2× of its arrival, and the probes in flight never exceed
// --probe-concurrency. First come first served, quiet waited behind the
// flood's queue for whole timeouts.
func TestProbeSlotsAreSharedFairlyAcrossNamespaces(t *testing.T) {
	const (
		concurrency = 8
		floods      = 40
		period      = 5 // quiet's periodSeconds
	)
	hole := probetest.NewBlackhole(t, netip.MustParsePrefix("198.51.100.0/24"))
	var inFlight, maxInFlight, floodInFlight atomic.Int32
	dial := func(ctx context.Context, network, address string) (net.Conn, error) {
		n := inFlight.Add(1)
		defer inFlight.Add(-1)
		for m := maxInFlight.Load(); n > m && !maxInFlight.CompareAndSwap(m, n); m = maxInFlight.Load() {
		}
		if strings.HasPrefix(address, "198.51.100.") {
			floodInFlight.Add(1)
			defer floodInFlight.Add(-1)
			return hole.Dial(ctx, network, address)
		}
		return probetest.LoopbackDial(ctx, network, address)
	}
	h := newHarnessDial(t, concurrency, dial)
	in := func(ns string, o *watcherv1.Object) *watcherv1.Object {
		o.Meta.Namespace, o.Meta.Uid = ns, ns+"-"+o.Meta.Uid
		return o
	}
	for i := range floods {
		probe := tcpProbe(80)
		probe.PeriodSeconds, probe.TimeoutSeconds = 60, 60
		h.w.show(in("flood", workload(fmt.Sprintf("vm-%d", i), probe, fmt.Sprintf("198.51.100.%d", i+1))))
	}
	// The flood takes what it may of the slots, and keeps them for 6s.
	testenv.Eventually(t, 20*time.Second, func() error {
		if n := floodInFlight.Load(); n < concurrency-1 {
			return fmt.Errorf("%d unanswered probes of the flood in flight, want %d", n, concurrency-1)
		}
		return nil
	})

	l := probetest.Listen(t)
	probe := tcpProbe(l.Port())
	probe.PeriodSeconds, probe.TimeoutSeconds = period, 1
	shown := time.Now()
	h.w.show(in("quiet", workload("vm", probe, "192.0.2.1")))
	const want = 8
	testenv.Eventually(t, 3*want*period*unit, func() error {
		if n := l.Count(); n < want {
			return fmt.Errorf("quiet's workload was probed %d times in %v, want %d (one every %v): the flood holds its slots",
				n, time.Since(shown).Round(time.Millisecond), want, period*unit)
		}
		return nil
	})
	at := l.Accepted()
	limit := 2 * period * unit
	if d := at[0].Sub(shown); d > limit {
		t.Errorf("quiet's first probe came %v after the workload, want at most %v (2× its period)", d, limit)
	}
	for i := 1; i < len(at); i++ {
		if d := at[i].Sub(at[i-1]); d > limit {
			t.Errorf("quiet's probes %d and %d came %v apart, want at most %v (2× its period)", i-1, i, d, limit)
		}
	}
	if n := floodInFlight.Load(); n == 0 {
		t.Errorf("no probe of the flood in flight at the end: the test proved nothing")
	}
	if m := maxInFlight.Load(); m > concurrency {
		t.Errorf("%d probes in flight at once, want at most --probe-concurrency=%d", m, concurrency)
	}
	t.Logf("quiet's probes after %v: gaps %v", at[0].Sub(shown).Round(time.Millisecond), gaps(at))
}

func gaps(at []time.Time) []time.Duration {
	var out []time.Duration
	for i := 1; i < len(at); i++ {
		out = append(out, at[i].Sub(at[i-1]).Round(time.Millisecond))
	}
	return out
}
