package e2e

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ipledger/ipledger/lab/ec2test"
	"github.com/ipledger/ipledger/lab/testenv"
	"github.com/ipledger/ipledger/pkg/grpcserver"
	eipdv1 "github.com/ipledger/ipledger/proto/ipledger/eipd/v1"
	eipdv1grpc "github.com/ipledger/ipledger/proto/ipledger/eipd/v1/eipdv1grpc"
	ipamv1 "github.com/ipledger/ipledger/proto/ipledger/ipam/v1"
	ipamv1grpc "github.com/ipledger/ipledger/proto/ipledger/ipam/v1/ipamv1grpc"
	watcherv1 "github.com/ipledger/ipledger/proto/ipledger/watcher/v1"
	watcherv1grpc "github.com/ipledger/ipledger/proto/ipledger/watcher/v1/watcherv1grpc"
	"github.com/ipledger/ipledger/test/e2e/journey"
)

// Size of the flood of TestFloodOfStreamsAndMadeUpTokens: the callers and
// rate of made-up-token calls (spread over the three servers), the calls it
// must have made before the outcomes are checked (≈ 20 s at that rate), and
// the health Watch streams opened at each server, over connections that
// each carry up to the per-connection limit.
const (
	floodCallers       = 128
	floodCallsPerSec   = 450
	floodMinCalls      = 20 * floodCallsPerSec
	floodStreams       = 800
	floodStreamsPerCon = grpcserver.DefaultMaxConcurrentStreams
	floodMaxInFlight   = 4096
	floodServices      = 40
	floodRenewals      = 10
)

// TestFloodOfStreamsAndMadeUpTokens: while callers without a valid token
// flood the watcher, ipam and eipd with calls carrying made-up tokens
// (distinct ones, and one repeated per caller) and with health Watch
// streams, ipam and eipd keep their Leases — the same holder, one term, the
// renewTime advancing — and Services created meanwhile are allocated. No
// flood call is served, each server holds at most DefaultMaxOpenStreams of
// the open streams, and the components' own rate limiters never held a
// Lease request back. Before the reviews had a client of their own, the
// made-up tokens' TokenReviews waited in the same rate limiter as eipd's
// Lease renewals, and eipd lost its Lease; with the pending-review bound but
// the shared limiter it kept the Lease, its renewals held back.
func TestFloodOfStreamsAndMadeUpTokens(t *testing.T) {
	env := testenv.Get(t)
	moto := ec2test.Get(t)
	sys := StartSystem(t, SystemOptions{Watchers: 1, IPAM: 1, EIPD: 1, EC2Endpoint: moto.URL, ClusterID: ec2test.ClusterID(t)})
	ns := env.Namespace(t, nil)
	journey.CreatePool(t, env.Dynamic, "flood", 24, ns)
	ctx := context.Background()

	// The terms before the flood.
	type term struct {
		svc       *Service
		lease     string
		holder    string
		renewed   time.Time
		renewals  int
		startedAt float64
	}
	terms := []*term{{svc: sys.IPAM[0], lease: "ipledger-ipam", holder: "ipam-0"}, {svc: sys.EIPD[0], lease: "ipledger-eipd", holder: "eipd-0"}}
	getLease := func(name string) *coordinationv1.Lease {
		t.Helper()
		l, err := env.Client.CoordinationV1().Leases(testenv.SystemNamespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatalf("lease %s: %v", name, err)
		}
		return l
	}
	for _, tm := range terms {
		testenv.Eventually(t, 30*time.Second, func() error {
			l := getLease(tm.lease)
			if holderOf(l) != tm.holder || l.Spec.RenewTime == nil {
				return fmt.Errorf("lease %s held by %q, want %q", tm.lease, holderOf(l), tm.holder)
			}
			tm.renewed = l.Spec.RenewTime.Time
			return nil
		})
		tm.startedAt = tm.svc.Metric(t, "ipledger_leader_term_transitions_total", `event="started"`)
	}

	floodCtx, stopFlood := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() { stopFlood(); wg.Wait() }()
	targets := []*Service{sys.Watchers[0], sys.IPAM[0], sys.EIPD[0]}

	// Open-method streams: floodStreams health Watch streams per server.
	admitted := make([]atomic.Int64, len(targets))
	refused := make([]atomic.Int64, len(targets))
	for i, target := range targets {
		for range floodStreams / floodStreamsPerCon {
			conn := plainConn(t, target.GRPCAddr)
			for range floodStreamsPerCon {
				wg.Go(func() {
					s, err := healthpb.NewHealthClient(conn).Watch(floodCtx, &healthpb.HealthCheckRequest{})
					if err == nil {
						_, err = s.Recv()
					}
					switch status.Code(err) {
					case codes.OK:
						admitted[i].Add(1)
						for {
							if _, err := s.Recv(); err != nil {
								return
							}
						}
					case codes.ResourceExhausted:
						refused[i].Add(1)
					}
				})
			}
		}
	}

	// Calls with made-up tokens, sent at floodCallsPerSec whatever the
	// servers answer (open loop) from floodCallers connections, half with a
	// fresh token each, half with one token repeated per connection.
	var calls, served, skipped atomic.Int64
	var codesMu sync.Mutex
	byCode := map[codes.Code]int{}
	type caller struct {
		conn      *grpc.ClientConn
		component string
		repeated  string
	}
	callers := make([]caller, floodCallers)
	for c := range callers {
		target := targets[c%len(targets)]
		callers[c] = caller{plainConn(t, target.GRPCAddr), target.Component, madeUpToken()}
	}
	inFlight := make(chan struct{}, floodMaxInFlight)
	wg.Go(func() {
		tick := time.NewTicker(time.Second / floodCallsPerSec)
		defer tick.Stop()
		for n := 0; ; n++ {
			select {
			case <-floodCtx.Done():
				return
			case <-tick.C:
			}
			select {
			case inFlight <- struct{}{}:
			default:
				skipped.Add(1) // floodMaxInFlight calls unanswered: the servers are that slow
				continue
			}
			c := callers[n%len(callers)]
			token := c.repeated
			if n%2 == 1 {
				token = madeUpToken()
			}
			wg.Go(func() {
				defer func() { <-inFlight }()
				cctx, cancel := context.WithTimeout(metadata.AppendToOutgoingContext(floodCtx, "authorization", "Bearer "+token), 15*time.Second)
				err := floodCall(cctx, c.conn, c.component)
				cancel()
				if floodCtx.Err() != nil {
					return
				}
				calls.Add(1)
				if err == nil {
					served.Add(1)
				}
				codesMu.Lock()
				byCode[status.Code(err)]++
				codesMu.Unlock()
			})
		}
	})

	// Meanwhile: Services are allocated, and each Lease keeps its holder and
	// one term while its renewTime advances.
	testenv.Eventually(t, 30*time.Second, func() error {
		if n := calls.Load(); n < floodMinCalls/4 {
			return fmt.Errorf("%d flood calls so far", n)
		}
		return nil
	})
	for i := range floodServices {
		journey.CreateLoadBalancer(t, env.Client, ns, fmt.Sprintf("during-flood-%02d", i), nil, corev1.ProtocolTCP, 80)
	}
	testenv.Eventually(t, 120*time.Second, func() error {
		for _, tm := range terms {
			if tm.svc.Exited() {
				t.Fatalf("%s exited during the flood: %v\n%s", tm.holder, tm.svc.Err(), tail(tm.svc.Logs(), 3000))
			}
			l := getLease(tm.lease)
			if h := holderOf(l); h != tm.holder {
				t.Fatalf("lease %s went from %q to %q during the flood", tm.lease, tm.holder, h)
			}
			if got := tm.svc.Metric(t, "ipledger_leader_term_transitions_total", `event="started"`); got != tm.startedAt {
				t.Fatalf("%s started %v terms during the flood: it lost its Lease", tm.holder, got-tm.startedAt)
			}
			if l.Spec.RenewTime != nil && l.Spec.RenewTime.After(tm.renewed) {
				tm.renewed, tm.renewals = l.Spec.RenewTime.Time, tm.renewals+1
			}
		}
		list, err := env.Client.CoreV1().Services(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		allocated := 0
		for _, svc := range list.Items {
			if len(svc.Status.LoadBalancer.Ingress) == 1 {
				allocated++
			}
		}
		switch {
		case allocated < floodServices:
			return fmt.Errorf("%d of %d Services created during the flood allocated", allocated, floodServices)
		case calls.Load() < floodMinCalls:
			return fmt.Errorf("%d flood calls so far, want %d", calls.Load(), floodMinCalls)
		}
		for _, tm := range terms {
			if tm.renewals < floodRenewals {
				return fmt.Errorf("lease %s renewed %d times seen during the flood, want %d", tm.lease, tm.renewals, floodRenewals)
			}
		}
		return nil
	})
	stopFlood()
	wg.Wait()

	codesMu.Lock()
	t.Logf("flood: %d calls with made-up tokens answered (%v), %d not sent with %d unanswered; health Watch streams admitted/refused: watcher %d/%d, ipam %d/%d, eipd %d/%d; renewals seen: ipam %d, eipd %d",
		calls.Load(), byCode, skipped.Load(), floodMaxInFlight, admitted[0].Load(), refused[0].Load(), admitted[1].Load(), refused[1].Load(), admitted[2].Load(), refused[2].Load(),
		terms[0].renewals, terms[1].renewals)
	codesMu.Unlock()
	if n := served.Load(); n != 0 {
		t.Errorf("%d calls with made-up tokens were served", n)
	}
	// The reviews wait in their own rate limiter: the component's never held
	// back one of its Lease requests (client-go logs every request it holds
	// back for more than 50 ms, with its URL).
	for _, tm := range terms {
		if line := throttledLeaseRequest(tm.svc.Logs()); line != "" {
			t.Errorf("%s's own client-side rate limiter held back a Lease request during the flood: %s", tm.holder, tail(line, 600))
		}
	}
	for i, target := range targets {
		if n := admitted[i].Load(); n > grpcserver.DefaultMaxOpenStreams {
			t.Errorf("%s held %d health Watch streams at once, want at most --grpc-max-open-streams=%d", target.Component, n, grpcserver.DefaultMaxOpenStreams)
		}
		if refused[i].Load() == 0 {
			t.Errorf("%s refused none of %d health Watch streams", target.Component, floodStreams)
		}
	}
}

// floodCall makes one call that needs a token to component's server.
func floodCall(ctx context.Context, conn *grpc.ClientConn, component string) error {
	switch component {
	case "ipam":
		_, err := ipamv1grpc.NewIPAMServiceClient(conn).ListPools(ctx, &ipamv1.ListPoolsRequest{})
		return err
	case "eipd":
		_, err := eipdv1grpc.NewEIPServiceClient(conn).ListAddresses(ctx, &eipdv1.ListAddressesRequest{})
		return err
	default:
		s, err := watcherv1grpc.NewWatcherServiceClient(conn).Watch(ctx, &watcherv1.WatchRequest{Kinds: []watcherv1.Kind{watcherv1.Kind_KIND_NAMESPACE}})
		if err != nil {
			return err
		}
		_, err = s.Recv()
		return err
	}
}

// madeUpToken looks like a JWT to nobody but is as long as one.
func madeUpToken() string {
	b := make([]byte, 600)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func plainConn(t *testing.T, addr string) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// throttledLeaseRequest returns the first log line in which client-go says
// it held a request for a Lease back in its client-side rate limiter.
func throttledLeaseRequest(logs string) string {
	for _, line := range strings.Split(logs, "\n") {
		if !strings.Contains(line, "Waited before sending request") {
			continue
		}
		var entry struct {
			Reason string `json:"reason"`
			URL    struct {
				Path string `json:"Path"`
			} `json:"URL"`
		}
		if json.Unmarshal([]byte(line), &entry) != nil {
			continue
		}
		if strings.Contains(entry.Reason, "client-side throttling") && strings.Contains(entry.URL.Path, "/leases") {
			return line
		}
	}
	return ""
}
