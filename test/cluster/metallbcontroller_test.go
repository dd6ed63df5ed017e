package cluster_test

// MetalLB's controller across the node failure of nodefailure_test.go: the
// figure ipam's one-replica measurement is set beside (BENCHMARKS.md, "The
// control plane across a node failure"; docs/sizing.md).

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ipledger/ipledger/lab/testenv"
)

const (
	// metallbControllerNS is testdata/metallb-controller's namespace.
	metallbControllerNS = "ipledger-test-metallb-controller"
	// metallbControllerImage is the name the test imports the controller's
	// image under.
	metallbControllerImage = "ipledger.test/metallb-controller:pinned"
	// metallbClass is the controller's --lb-class: its Services, none of
	// ipam's (ipam serves class-less Services and ipledger.io/lb).
	metallbClass = "ipledger.test/metallb"
	// metallbPool is the controller's IPAddressPool, inside
	// cluster.TestRanges, beside failurePool (10.182.0.0/28) and apart from
	// every IPPool of ipam's.
	metallbPool = "10.182.0.16/28"
)

// TestMetalLBControllerAcrossNodeFailure (IPLEDGER_NODES=2: make
// test-cluster-full): MetalLB v0.16.1's controller (hack/build-metallb.sh),
// one replica as the release runs it — no leader election, no tolerations of
// its own — on the second node, allocating from an IPAddressPool of its own
// for the Services of its --lb-class only; the second node fails as in
// TestControlPlaneAcrossNodeFailure (cluster.FailNode), and a Service of
// that class created right after it gets its address only once Kubernetes
// has moved the controller: the node lifecycle controller's grace period,
// the pod's 300 s unreachable toleration, a new pod Ready on the first
// node. The gap and its phases are measurements (logged, BENCHMARKS.md), not
// assertions: only a generous bound holds the wait. The Service allocated
// before the failure keeps its address throughout.
func TestMetalLBControllerAcrossNodeFailure(t *testing.T) {
	e := get(t)
	if len(e.node.Nodes) < 2 {
		t.Skip("one node: run with IPLEDGER_NODES=2 (make test-cluster-full) for a node that can fail")
	}
	ctx := context.Background()
	first, second := e.node.Nodes[0].Name, e.node.Nodes[1].Name
	old := e.startMetalLBController(t, first, second)

	ns := e.namespace(t)
	before := metallbService(ns, "before")
	if _, err := e.client.CoreV1().Services(ns).Create(ctx, before, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	kept := e.ips(t, ns, []string{before.Name}, 2*time.Minute)
	checkInPool(t, before.Name, kept[before.Name])
	addresses := e.watchAddresses(ns, kept)

	start := time.Now()
	restore := e.failUntilRestored(t, second, "")
	after := metallbService(ns, "after")
	if _, err := e.client.CoreV1().Services(ns).Create(ctx, after, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Logf("node %s failed (link down, kubelet and kube-proxy killed) with MetalLB's controller %s on it; Service %s created %s after the failure",
		second, old.Name, after.Name, time.Since(start).Round(time.Millisecond))

	pods := e.client.CoreV1().Pods(metallbControllerNS)
	evicted := func(ctx context.Context) (bool, error) {
		// Its terminationGracePeriodSeconds of 0 lets the eviction delete
		// it outright: gone is evicted too.
		p, err := pods.Get(ctx, old.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return true, nil
		}
		return err == nil && p.DeletionTimestamp != nil, err
	}
	ms := []*milestone{
		{what: "Service " + after.Name + " has its address", cond: func(ctx context.Context) (bool, error) {
			s, err := e.client.CoreV1().Services(ns).Get(ctx, after.Name, metav1.GetOptions{})
			return err == nil && len(s.Status.LoadBalancer.Ingress) > 0, err
		}},
		{what: "its new pod Ready on " + first, cond: e.metallbControllerOn(first, true)},
		{what: "Node " + second + " NotReady", cond: func(ctx context.Context) (bool, error) {
			n, err := e.client.CoreV1().Nodes().Get(ctx, second, metav1.GetOptions{})
			return err == nil && !nodeReady(*n), err
		}},
		{what: "Node " + second + " tainted unreachable:NoExecute", cond: func(ctx context.Context) (bool, error) {
			n, err := e.client.CoreV1().Nodes().Get(ctx, second, metav1.GetOptions{})
			return err == nil && slices.ContainsFunc(n.Spec.Taints, func(tt corev1.Taint) bool {
				return tt.Key == corev1.TaintNodeUnreachable && tt.Effect == corev1.TaintEffectNoExecute
			}), err
		}},
		{what: "the controller's pod evicted", cond: evicted},
		{what: "its new pod scheduled on " + first, cond: e.metallbControllerOn(first, false)},
	}
	// The address and the new pod's readiness are waited for (the
	// controller allocates before its readiness probe's first success);
	// the other milestones say what Kubernetes did by then.
	await(start, 9*time.Minute, ms, 2)
	var lines []string
	for _, m := range ms {
		lines = append(lines, m.String())
	}
	t.Logf("after the failure of %s:\n  %s", second, strings.Join(lines, "\n  "))

	if ms[0].at == 0 {
		t.Errorf("Service %s has no address 9m after the failure of the node of MetalLB's controller %s (last error: %v)", after.Name, old.Name, ms[0].err)
	} else {
		got := e.ips(t, ns, []string{after.Name}, time.Minute)[after.Name]
		checkInPool(t, after.Name, got)
		t.Logf("Service %s got %s from MetalLB's controller, %s after the failure", after.Name, got, ms[0].at.Round(10*time.Millisecond))
	}
	restore()
	// The cut-off controller, deleted while its node was away, goes once
	// the node's kubelet is back: nothing of it is left to the next test.
	e.podGone(t, metallbControllerNS, old.Name)
	addresses.check(t, "addresses of the Services MetalLB's controller allocated before the failure")
	if now, err := e.pod(ctx, metallbControllerNS, "component=controller"); err == nil {
		e.noRBACDenials(t, now)
	}
}

// startMetalLBController imports MetalLB's controller's image, installs the
// release's CRDs, testdata/metallb-controller's RBAC, IPAddressPool and
// Deployment with node first cordoned, so that its one replica runs on node
// second, and returns that pod once it is Ready. Everything goes when the
// test ends.
func (e *env) startMetalLBController(t *testing.T, first, second string) corev1.Pod {
	t.Helper()
	ctx := context.Background()
	dir := hackBuild(t, "IPLEDGER_METALLB_DIR", "build-metallb.sh")
	e.importBinaryImage(t, filepath.Join(dir, "metallb-controller"), metallbControllerImage)

	testdata := filepath.Join("testdata", "metallb-controller")
	e.kubectl(t, "delete", "namespace", metallbControllerNS, "--ignore-not-found", "--wait", "--timeout=2m")
	e.metalLBCRDsAndRBAC(t, dir, testdata)
	e.applyTemplate(t, filepath.Join(testdata, "pool.yaml"), "POOL", metallbPool)

	var pod corev1.Pod
	e.withCordoned(t, []string{first}, func() {
		e.applyTemplate(t, filepath.Join(testdata, "controller.yaml"), "IMAGE", metallbControllerImage, "CLASS", metallbClass)
		testenv.Eventually(t, 3*time.Minute, func() error {
			p, err := e.pod(ctx, metallbControllerNS, "component=controller")
			if err != nil {
				return err
			}
			if p.Spec.NodeName != second || !podReady(p) {
				return fmt.Errorf("MetalLB's controller %s is on %q, Ready %v; want Ready on %s", p.Name, p.Spec.NodeName, podReady(p), second)
			}
			pod = p
			return nil
		})
	})
	version, _ := os.ReadFile(filepath.Join(dir, "version"))
	t.Logf("MetalLB %s's controller %s Ready on %s", strings.TrimSpace(string(version)), pod.Name, second)
	return pod
}

// pod is the one pod of ns matching selector that is not being deleted.
func (e *env) pod(ctx context.Context, ns, selector string) (corev1.Pod, error) {
	list, err := e.client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: selector})
	if err != nil {
		return corev1.Pod{}, err
	}
	var live []corev1.Pod
	for _, p := range list.Items {
		if p.DeletionTimestamp == nil {
			live = append(live, p)
		}
	}
	if len(live) != 1 {
		return corev1.Pod{}, fmt.Errorf("%d pods of %s match %s and are not being deleted, want 1", len(live), ns, selector)
	}
	return live[0], nil
}

// metallbControllerOn holds once a pod of MetalLB's controller, not being
// deleted, is on node (and Ready, when ready).
func (e *env) metallbControllerOn(node string, ready bool) func(context.Context) (bool, error) {
	return func(ctx context.Context) (bool, error) {
		list, err := e.client.CoreV1().Pods(metallbControllerNS).List(ctx, metav1.ListOptions{LabelSelector: "component=controller"})
		if err != nil {
			return false, err
		}
		return slices.ContainsFunc(list.Items, func(p corev1.Pod) bool {
			return p.DeletionTimestamp == nil && p.Spec.NodeName == node && (!ready || podReady(p))
		}), nil
	}
}

// metallbService is a LoadBalancer Service of MetalLB's controller's class.
func metallbService(ns, name string) *corev1.Service {
	s := loadBalancer(ns, name)
	class := metallbClass
	s.Spec.LoadBalancerClass = &class
	return s
}

// checkInPool fails the test unless ip is in metallbPool: MetalLB's
// controller, not ipam, gave Service svc its address.
func checkInPool(t *testing.T, svc, ip string) {
	t.Helper()
	if a, err := netip.ParseAddr(ip); err != nil || !netip.MustParsePrefix(metallbPool).Contains(a) {
		t.Errorf("Service %s got %q, outside MetalLB's IPAddressPool %s", svc, ip, metallbPool)
	}
}
