package e2e

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/ipledger/ipledger/lab/ec2test"
	"github.com/ipledger/ipledger/lab/faultproxy"
	"github.com/ipledger/ipledger/lab/testenv"
	watcherv1 "github.com/ipledger/ipledger/proto/ipledger/watcher/v1"
	watcherv1grpc "github.com/ipledger/ipledger/proto/ipledger/watcher/v1/watcherv1grpc"
	"github.com/ipledger/ipledger/test/e2e/journey"
)

// noNodePorts: the suite creates thousands of LoadBalancer Services with
// -count=N, more than the 2,768 NodePorts of the default range.
var noNodePorts = false

// burst creates n LoadBalancer Services in ns with 8 concurrent clients and
// returns once all exist. onHalf runs once half of them are created.
func burst(t *testing.T, ns, prefix string, n int, onHalf func()) {
	t.Helper()
	env := testenv.Get(t)
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		created  int
		halfOnce sync.Once
		firstErr error
	)
	next := make(chan int)
	for range 8 {
		wg.Go(func() {
			for i := range next {
				svc := &corev1.Service{
					ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s-%04d", prefix, i), Namespace: ns},
					Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, Selector: map[string]string{"app": "x"},
						AllocateLoadBalancerNodePorts: &noNodePorts,
						Ports:                         []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(80)}}},
				}
				// Creation may fail while the API server restarts: retry until it takes.
				var err error
				for attempt := 0; attempt < 200; attempt++ {
					if _, err = env.Client.CoreV1().Services(ns).Create(context.Background(), svc, metav1.CreateOptions{}); err == nil || strings.Contains(err.Error(), "already exists") {
						err = nil
						break
					}
					time.Sleep(100 * time.Millisecond)
				}
				mu.Lock()
				if err != nil && firstErr == nil {
					firstErr = err
				}
				created++
				if created == n/2 && onHalf != nil {
					halfOnce.Do(onHalf)
				}
				mu.Unlock()
			}
		})
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
	if firstErr != nil {
		t.Fatalf("create services: %v", firstErr)
	}
}

// checkIPAMConverged waits until every Service of ns has exactly one IP, then
// checks the global invariants: no IP on two Services, ledger == statuses.
func checkIPAMConverged(t *testing.T, sys *System, ns string, n int, timeout time.Duration, readFrom *Service) {
	t.Helper()
	env := testenv.Get(t)
	ctx := context.Background()
	testenv.Eventually(t, timeout, func() error {
		list, err := env.Client.CoreV1().Services(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		done, example := 0, ""
		for _, svc := range list.Items {
			if len(svc.Status.LoadBalancer.Ingress) == 1 {
				done++
			} else if example == "" {
				example = fmt.Sprintf("%s: ingress %v, conditions %+v", svc.Name, svc.Status.LoadBalancer.Ingress, svc.Status.Conditions)
			}
		}
		if done != n {
			return fmt.Errorf("%d of %d Services in %s have one IP (e.g. %s)", done, n, ns, example)
		}
		return nil
	})
	journey.ViewerToken(t, env.Client)
	conn := sys.Dial(t, readFrom.GRPCAddr, "e2e-viewer")
	testenv.Eventually(t, 20*time.Second, func() error {
		services, err := journey.LoadBalancers(ctx, env.Client)
		if err != nil {
			return err
		}
		if err := journey.NoIPOnTwoServices(services); err != nil {
			t.Fatal(err) // a duplicate never heals by waiting
		}
		return journey.LedgerEqualsStatuses(ctx, conn, services)
	})
}

func ipamLeader(t *testing.T, sys *System) *Service {
	t.Helper()
	var leader *Service
	testenv.Eventually(t, 20*time.Second, func() error {
		lease, err := testenv.Get(t).Client.CoordinationV1().Leases(testenv.SystemNamespace).Get(context.Background(), "ipledger-ipam", metav1.GetOptions{})
		if err != nil {
			return err
		}
		holder := holderOf(lease)
		for _, r := range sys.IPAM {
			if holder == fmt.Sprintf("ipam-%d", r.Replica) && !r.Exited() {
				leader = r
				return nil
			}
		}
		return fmt.Errorf("lease held by %q, not a running replica", holder)
	})
	return leader
}

func holderOf(lease *coordinationv1.Lease) string {
	if lease.Spec.HolderIdentity == nil {
		return ""
	}
	return *lease.Spec.HolderIdentity
}

// TestIPAMLeaderKilledDuringBurst: SIGKILL the ipam leader while Services
// are being created; the standby takes over and no IP is handed out twice.
func TestIPAMLeaderKilledDuringBurst(t *testing.T) {
	env := testenv.Get(t)
	sys := StartSystem(t, SystemOptions{Watchers: 1, IPAM: 2})
	ns := env.Namespace(t, nil)
	journey.CreatePool(t, env.Dynamic, "leader-kill", 23, ns)
	leader := ipamLeader(t, sys)
	const n = 300
	burst(t, ns, "svc", n, func() { leader.Kill() })
	survivor := sys.IPAM[0]
	if survivor == leader {
		survivor = sys.IPAM[1]
	}
	checkIPAMConverged(t, sys, ns, n, 90*time.Second, survivor)
}

// TestWatchersKilledWhileObjectsChange: two of three watchers are SIGKILLed
// while Services are created; ipam (connected to all three) keeps going.
func TestWatchersKilledWhileObjectsChange(t *testing.T) {
	env := testenv.Get(t)
	sys := StartSystem(t, SystemOptions{Watchers: 3, IPAM: 1})
	ns := env.Namespace(t, nil)
	journey.CreatePool(t, env.Dynamic, "watcher-kill", 24, ns)
	const n = 150
	burst(t, ns, "svc", n, func() {
		sys.Watchers[0].Kill()
		sys.Watchers[1].Kill()
	})
	checkIPAMConverged(t, sys, ns, n, 90*time.Second, sys.IPAM[0])
}

// TestAPIServerRestart: the API server goes away and comes back during a
// burst; every component reconnects and the invariants hold.
func TestAPIServerRestart(t *testing.T) {
	env := testenv.Get(t)
	sys := StartSystem(t, SystemOptions{Watchers: 2, IPAM: 2})
	ns := env.Namespace(t, nil)
	journey.CreatePool(t, env.Dynamic, "apiserver-restart", 24, ns)
	const n = 150
	burst(t, ns, "svc", n, func() {
		sys.TolerateDenials(func() {
			if err := env.CP.RestartAPIServer(context.Background()); err != nil {
				t.Errorf("restart API server: %v", err)
			}
		})
	})
	checkIPAMConverged(t, sys, ns, n, 120*time.Second, sys.IPAM[0])
}

// TestEC2ThrottlingStorm: EC2 throttles everything while Nodes are labelled;
// once the storm ends every Node has exactly one EIP and none leaked.
func TestEC2ThrottlingStorm(t *testing.T) {
	env := testenv.Get(t)
	moto := ec2test.Get(t)
	proxy, err := faultproxy.Start(moto.URL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { proxy.Close() })
	cluster := ec2test.ClusterID(t)
	proxy.Inject("", faultproxy.Throttle, faultproxy.Forever)
	sys := StartSystem(t, SystemOptions{Watchers: 1, EIPD: 1, EC2Endpoint: proxy.URL(), ClusterID: cluster})
	ctx := context.Background()
	instances := moto.RunClusterInstances(t, cluster, 5)
	for _, inst := range instances {
		node := &corev1.Node{
			ObjectMeta: metav1.ObjectMeta{Name: "storm-" + strings.ToLower(inst.ID), Labels: map[string]string{"node-restriction.kubernetes.io/ipledger-externalip-auto-assign": "true"}},
			Spec:       corev1.NodeSpec{ProviderID: inst.ProviderID()},
			Status:     corev1.NodeStatus{Addresses: inst.NodeAddresses()},
		}
		journey.CreateNode(t, env.Client, node)
	}
	testenv.Eventually(t, 30*time.Second, func() error {
		if n := proxy.TotalFaults(); n < 10 {
			return fmt.Errorf("%d throttled calls so far", n)
		}
		return nil
	})
	if got := proxy.Count("AllocateAddress"); got != 0 {
		t.Errorf("AllocateAddress reached EC2 %d times during a storm that throttles every call", got)
	}
	proxy.Clear()
	testenv.Eventually(t, 120*time.Second, func() error {
		for _, inst := range instances {
			n, err := env.Client.CoreV1().Nodes().Get(ctx, "storm-"+strings.ToLower(inst.ID), metav1.GetOptions{})
			if err != nil {
				return err
			}
			if n.Labels["ipledger.io/externalip"] == "" {
				return fmt.Errorf("node %s has no EIP yet", n.Name)
			}
		}
		return nil
	})
	perNode := map[string]int{}
	for _, a := range moto.Addresses(t, cluster) {
		perNode[ec2test.Tag(a.Tags, "ipledger.io/node")]++
	}
	if len(perNode) != len(instances) {
		t.Errorf("EIPs per node %v, want one for each of %d nodes and no orphan", perNode, len(instances))
	}
	for node, count := range perNode {
		if count != 1 {
			t.Errorf("node %q has %d EIPs", node, count)
		}
	}
	if got := sys.EIPD[0].Metric(t, "ipledger_eipd_ec2_errors_total", `code="RequestLimitExceeded"`); got < 10 {
		t.Errorf("ipledger_eipd_ec2_errors_total{code=RequestLimitExceeded} = %v, want the storm counted", got)
	}
}

// TestStalledSubscriber: a subscriber that stops reading is cut off alone
// (RESOURCE_EXHAUSTED) while ipam, on the same watcher, keeps allocating.
func TestStalledSubscriber(t *testing.T) {
	env := testenv.Get(t)
	// A small queue, so a few hundred changed Services overflow it.
	sys := StartSystem(t, SystemOptions{Watchers: 1, IPAM: 1, WatcherArgs: []string{"--subscriber-queue-size=100"}})
	w := sys.Watchers[0]
	before := w.Metric(t, "ipledger_watcher_subscriber_overflows_total")

	// Fixed HTTP/2 windows (which also turn off grpc-go's window growth):
	// a client that stops reading then stops the server's sends within
	// 64 KiB, and the watcher's queue for it fills.
	conn := sys.Dial(t, w.GRPCAddr, "ipledger-ipam", grpc.WithInitialWindowSize(64<<10), grpc.WithInitialConnWindowSize(64<<10))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stream, err := watcherv1grpc.NewWatcherServiceClient(conn).Watch(ctx, &watcherv1.WatchRequest{Kinds: []watcherv1.Kind{watcherv1.Kind_KIND_SERVICE}})
	if err != nil {
		t.Fatal(err)
	}
	// Read the snapshot, then stall: never read again while Services churn.
	for {
		ev, err := stream.Recv()
		if err != nil {
			t.Fatal(err)
		}
		if ev.Type == watcherv1.EventType_EVENT_TYPE_SYNCED {
			break
		}
	}
	ns := env.Namespace(t, nil)
	journey.CreatePool(t, env.Dynamic, "stalled", 23, ns)
	const n = 300
	burst(t, ns, "svc", n, nil)
	checkIPAMConverged(t, sys, ns, n, 90*time.Second, sys.IPAM[0])
	testenv.Eventually(t, 30*time.Second, func() error {
		if got := w.Metric(t, "ipledger_watcher_subscriber_overflows_total") - before; got != 1 {
			return fmt.Errorf("overflow closes = %v, want exactly 1 (the stalled stream)", got)
		}
		return nil
	})
	// Draining what was buffered ends in RESOURCE_EXHAUSTED.
	for {
		_, err := stream.Recv()
		if err == nil {
			continue
		}
		if errors.Is(err, io.EOF) || !strings.Contains(err.Error(), "ResourceExhausted") {
			t.Fatalf("stalled stream ended with %v, want ResourceExhausted", err)
		}
		break
	}
}
