package cluster_test

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/ipledger/ipledger/lab/testenv"
	"github.com/ipledger/ipledger/test/e2e/journey"
)

// failurePool is the IPPool of TestControlPlaneAcrossNodeFailure, apart
// from every other test's (nodesPool's 10.181.0.0/28 beside it), and
// failureWorkloads the /24 of its ExternalWorkloads (inside 10.21/16).
const (
	failurePool      = "10.182.0.0/28"
	failureWorkloads = "10.21.51."
)

// standbyTrials is how many times the test fails the second node with the
// leaders on it and warm standbys on the first.
const standbyTrials = 3

// leaderElected are the Deployments whose leaders the test puts on the node
// that fails.
var leaderElected = []string{"ipledger-ipam", "ipledger-endpoints"}

var workloadsGVR = schema.GroupVersionResource{Group: "ipledger.io", Version: "v1alpha1", Resource: "externalworkloads"}

// TestControlPlaneAcrossNodeFailure (IPLEDGER_NODES=2: make
// test-cluster-full): with ipam's and endpoints' leaders on the second node
// and their standbys (synced: they hold the stream and its state) and the
// watcher on the first, the second node fails (cluster.FailNode: its link
// down, its kubelet and kube-proxy killed; its pods run on, cut off). A
// LoadBalancer Service created right after the failure gets an address from
// the standby — the Lease and the ledger's last writer name it — and an
// ExternalWorkload whose address changed at the failure reaches its
// Service's EndpointSlice through endpoints' standby; the Services given
// addresses before never change address; once the node is back the
// successors keep their Leases (its old leaders, cut off mid-term, neither
// release them nor take them back: pkg/leader's watchRenewals and release
// check) and the ledger equals the statuses. Three trials, then the same failure with
// one replica each, which only Kubernetes can move: the node lifecycle
// controller's grace period, the pods' 300 s unreachable toleration, a new
// pod on the first node. The gaps are measurements (logged, BENCHMARKS.md),
// not assertions: only a generous bound holds each wait.
func TestControlPlaneAcrossNodeFailure(t *testing.T) {
	e := get(t)
	if len(e.node.Nodes) < 2 {
		t.Skip("one node: run with IPLEDGER_NODES=2 (make test-cluster-full) for a node that can fail")
	}
	ctx := context.Background()
	first, second := e.node.Nodes[0].Name, e.node.Nodes[1].Name
	// The watcher (and eipd, which has nothing to do here) on the first
	// node: the standbys keep their stream through the failure.
	for _, d := range []string{"ipledger-watcher", "ipledger-eipd"} {
		e.placeOn(t, d, first, second)
	}
	ns := e.namespace(t)
	e.namespacePool(t, ns, "node-failure-", failurePool)
	var before []string
	for i := range 3 {
		name := fmt.Sprintf("before-%d", i+1)
		if _, err := e.client.CoreV1().Services(ns).Create(ctx, loadBalancer(ns, name), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		before = append(before, name)
	}
	kept := e.ips(t, ns, before, 2*time.Minute)
	addresses := e.watchAddresses(ns, kept)
	e.clusterIP(t, ns, "vms")
	for i := range 2 {
		e.workload(t, ns, fmt.Sprintf("vm-%d", i+1), fmt.Sprintf("%s%d", failureWorkloads, i+1), "vms")
	}
	e.sliceHolds(t, ns, "vms", []string{failureWorkloads + "1", failureWorkloads + "2"}, 2*time.Minute)

	for _, d := range leaderElected {
		e.scale(t, d, 2)
	}
	for i := 1; i <= standbyTrials; i++ {
		t.Run(fmt.Sprintf("standby-%d", i), func(t *testing.T) {
			e.failureTrial(t, ns, fmt.Sprintf("standby-%d", i), 10+i, first, second, true, 3*time.Minute)
		})
	}
	t.Run("one-replica", func(t *testing.T) {
		e.failureTrial(t, ns, "one-replica", 20, first, second, false, 12*time.Minute)
	})
	addresses.check(t, "addresses of the Services allocated before the failures")
	e.consistent(t, "")
}

// failureTrial arranges the leaders of leaderElected on node second (with a
// synced standby each on node first when standby, else as the one
// replica), fails second, creates the LoadBalancer Service after-<label>
// and moves workload vm-1 to failureWorkloads.<octet>, and waits (up to
// timeout) for the Service's address and the slice; then restores second.
func (e *env) failureTrial(t *testing.T, ns, label string, octet int, first, second string, standby bool, timeout time.Duration) {
	ctx := context.Background()
	leaders, successors := map[string]string{}, map[string]string{}
	for _, d := range leaderElected {
		if standby {
			leaders[d], successors[d] = e.leaderOn(t, d, second, first)
		} else {
			leaders[d] = e.soleOn(t, d, second, first)
		}
	}
	wasAt, err := e.workloadIP(ctx, ns, "vm-1")
	if err != nil {
		t.Fatal(err)
	}
	movedTo := fmt.Sprintf("%s%d", failureWorkloads, octet)
	svc := "after-" + label

	start := time.Now()
	restore := e.failUntilRestored(t, second, label+": ")
	t.Logf("%s: node %s failed (link down, kubelet and kube-proxy killed) in %s; leaders on it %v", label, second, time.Since(start).Round(time.Millisecond), leaders)
	if _, err := e.client.CoreV1().Services(ns).Create(ctx, loadBalancer(ns, svc), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := e.setWorkloadIP(ctx, ns, "vm-1", movedTo); err != nil {
		t.Fatal(err)
	}
	t.Logf("%s: Service %s created and vm-1 moved from %s to %s, %s after the failure", label, svc, wasAt, movedTo, time.Since(start).Round(time.Millisecond))

	holderChanged := func(d string) func(context.Context) (bool, error) {
		return func(ctx context.Context) (bool, error) {
			h, err := e.holder(ctx, d)
			return h != "" && h != leaders[d], err
		}
	}
	ms := []*milestone{
		{what: "ipam's Lease changed holder", cond: holderChanged("ipledger-ipam")},
		{what: "endpoints' Lease changed holder", cond: holderChanged("ipledger-endpoints")},
		{what: "Service " + svc + " has its address", cond: func(ctx context.Context) (bool, error) {
			s, err := e.client.CoreV1().Services(ns).Get(ctx, svc, metav1.GetOptions{})
			return err == nil && len(s.Status.LoadBalancer.Ingress) > 0, err
		}},
		{what: "vm-1's new address is in vms's EndpointSlice", cond: func(ctx context.Context) (bool, error) {
			addrs, err := journey.SliceAddresses(ctx, e.client, ns, "vms")
			return slices.Contains(addrs, movedTo) && !slices.Contains(addrs, wasAt), err
		}},
		{what: "Node " + second + " NotReady", cond: func(ctx context.Context) (bool, error) {
			n, err := e.client.CoreV1().Nodes().Get(ctx, second, metav1.GetOptions{})
			return err == nil && !nodeReady(*n), err
		}},
	}
	if !standby {
		ms = append(ms,
			&milestone{what: "Node " + second + " tainted unreachable:NoExecute", cond: func(ctx context.Context) (bool, error) {
				n, err := e.client.CoreV1().Nodes().Get(ctx, second, metav1.GetOptions{})
				return err == nil && slices.ContainsFunc(n.Spec.Taints, func(tt corev1.Taint) bool {
					return tt.Key == corev1.TaintNodeUnreachable && tt.Effect == corev1.TaintEffectNoExecute
				}), err
			}},
			&milestone{what: "ipam's pod evicted", cond: e.evicted(leaders["ipledger-ipam"])},
			&milestone{what: "ipam's new pod Running on " + first, cond: e.runningOnNode("ipledger-ipam", first)},
		)
	}
	// The Node's milestones only describe what Kubernetes did: they are
	// not waited for once the Service and the slice are done.
	await(start, timeout, ms, 4)
	var lines []string
	for _, m := range ms {
		lines = append(lines, m.String())
	}
	t.Logf("%s: after the failure of %s:\n  %s", label, second, strings.Join(lines, "\n  "))

	if ms[2].at == 0 {
		t.Errorf("%s: Service %s has no address %s after the failure of the node of ipam's leader %s (last error: %v)", label, svc, timeout, leaders["ipledger-ipam"], ms[2].err)
	} else {
		e.allocatedBySuccessor(t, ns, svc, leaders["ipledger-ipam"], successors["ipledger-ipam"])
	}
	if ms[3].at == 0 {
		addrs, err := journey.SliceAddresses(ctx, e.client, ns, "vms")
		t.Errorf("%s: vms's slices hold %v (%v) %s after the failure, want %s instead of %s", label, addrs, err, timeout, movedTo, wasAt)
	} else if standby {
		if h, err := e.holder(ctx, "ipledger-endpoints"); err != nil || h != successors["ipledger-endpoints"] {
			t.Errorf("%s: endpoints' Lease is held by %q (%v) after the slice changed, want the standby %s", label, h, err, successors["ipledger-endpoints"])
		}
	}

	// The successors keep their terms when the node comes back: its old
	// leaders, cut off mid-term, neither release their Leases nor take
	// them back.
	kept := map[string]leaseState{}
	for _, d := range leaderElected {
		if kept[d], err = e.leaseState(ctx, d); err != nil {
			t.Fatal(err)
		}
	}
	restore()
	for _, d := range leaderElected {
		e.rolledOut(t, d)
		if got, err := e.leaseState(ctx, d); err != nil || got != kept[d] {
			t.Errorf("%s: once node %s was back and its pods Ready, the Lease is %+v (%v), was %+v while it was down: the successor lost its term to the node that came back", d, second, got, err, kept[d])
		}
		if evicted, _ := e.evicted(leaders[d])(ctx); evicted {
			e.podGone(t, systemNS, leaders[d])
		}
	}
	e.consistent(t, "")
}

// allocatedBySuccessor checks that Service svc's address comes from its
// pool and from the new term: ipam's Lease names another replica than the
// failed leader (the standby, when one was arranged), and the ledger's head
// was last written by that replica's term.
func (e *env) allocatedBySuccessor(t *testing.T, ns, svc, failed, standby string) {
	t.Helper()
	ctx := context.Background()
	s, err := e.client.CoreV1().Services(ns).Get(ctx, svc, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ip := s.Status.LoadBalancer.Ingress[0].IP
	if a, err := netip.ParseAddr(ip); err != nil || !netip.MustParsePrefix(failurePool).Contains(a) {
		t.Errorf("Service %s got %q, outside its pool %s", svc, ip, failurePool)
	}
	holder, err := e.holder(ctx, "ipledger-ipam")
	if err != nil {
		t.Fatal(err)
	}
	if holder == failed || (standby != "" && holder != standby) {
		t.Errorf("Service %s got %s while ipam's Lease names %q; want the standby %q, not the failed leader %s", svc, ip, holder, standby, failed)
	}
	head, err := e.client.CoreV1().ConfigMaps(systemNS).Get(ctx, "ipledger-ledger-0", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if term := head.Data["term"]; !strings.HasPrefix(term, holder+"/") {
		t.Errorf("the ledger's head was last written by term %q, want a term of %s, which holds the Lease", term, holder)
	}
	t.Logf("Service %s got %s from %s (ledger epoch %s, term %s)", svc, ip, holder, head.Data["epoch"], head.Data["term"])
}

// milestone is a condition that becomes true after a failure, and when it
// first held.
type milestone struct {
	what string
	cond func(context.Context) (bool, error)
	// at is how long after the failure it first held (0: not yet).
	at  time.Duration
	err error
}

func (m *milestone) String() string {
	if m.at == 0 {
		return fmt.Sprintf("%s: not seen (last error %v)", m.what, m.err)
	}
	return fmt.Sprintf("%s: %s", m.what, m.at.Round(10*time.Millisecond))
}

// await polls every milestone every 100 ms, each on its own, from start
// until it holds or timeout has passed since start; the first required
// milestones must hold for await to return before the timeout (the others
// are recorded if they hold by then).
func await(start time.Time, timeout time.Duration, ms []*milestone, required int) {
	ctx, cancel := context.WithDeadline(context.Background(), start.Add(timeout))
	defer cancel()
	var wg, needed sync.WaitGroup
	for i, m := range ms {
		wg.Add(1)
		if i < required {
			needed.Add(1)
		}
		go func() {
			defer wg.Done()
			if i < required {
				defer needed.Done()
			}
			tick := time.NewTicker(100 * time.Millisecond)
			defer tick.Stop()
			for {
				ok, err := m.cond(ctx)
				if ok {
					m.at = time.Since(start)
					return
				}
				if err != nil && ctx.Err() == nil {
					m.err = err
				}
				select {
				case <-ctx.Done():
					return
				case <-tick.C:
				}
			}
		}()
	}
	needed.Wait()
	cancel()
	wg.Wait()
}

// holder is the identity holding the Lease of Deployment d ("" for none).
func (e *env) holder(ctx context.Context, d string) (string, error) {
	l, err := e.client.CoordinationV1().Leases(systemNS).Get(ctx, d, metav1.GetOptions{})
	if err != nil || l.Spec.HolderIdentity == nil {
		return "", err
	}
	return *l.Spec.HolderIdentity, nil
}

// leaseState is who holds a Lease, and how many times it changed hands.
type leaseState struct {
	Holder      string
	Transitions int32
}

// leaseState reads Deployment d's Lease.
func (e *env) leaseState(ctx context.Context, d string) (leaseState, error) {
	l, err := e.client.CoordinationV1().Leases(systemNS).Get(ctx, d, metav1.GetOptions{})
	if err != nil {
		return leaseState{}, err
	}
	var s leaseState
	if l.Spec.HolderIdentity != nil {
		s.Holder = *l.Spec.HolderIdentity
	}
	if l.Spec.LeaseTransitions != nil {
		s.Transitions = *l.Spec.LeaseTransitions
	}
	return s, nil
}

// evicted holds once pod is being deleted (or gone).
func (e *env) evicted(pod string) func(context.Context) (bool, error) {
	return func(ctx context.Context) (bool, error) {
		p, err := e.client.CoreV1().Pods(systemNS).Get(ctx, pod, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		return p.DeletionTimestamp != nil, nil
	}
}

// runningOnNode holds once a pod of Deployment d, not being deleted, runs
// Ready on node.
func (e *env) runningOnNode(d, node string) func(context.Context) (bool, error) {
	return func(ctx context.Context) (bool, error) {
		list, err := e.client.CoreV1().Pods(systemNS).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=" + d})
		if err != nil {
			return false, err
		}
		return slices.ContainsFunc(list.Items, func(p corev1.Pod) bool {
			return p.DeletionTimestamp == nil && p.Spec.NodeName == node && podReady(p)
		}), nil
	}
}

// leaderOn arranges Deployment d's two replicas so that the leader runs on
// node lead and a synced standby on node stand, by deleting pods while the
// node they must not come back on is cordoned; it returns the leader's and
// the standby's names.
func (e *env) leaderOn(t *testing.T, d, lead, stand string) (leader, standby string) {
	t.Helper()
	for range 6 {
		e.rolledOut(t, d)
		l, pods := e.liveLeader(t, d)
		var other *corev1.Pod
		for i := range pods {
			if pods[i].Name != l.Name && pods[i].Spec.NodeName == stand {
				other = &pods[i]
			}
		}
		switch {
		case l.Spec.NodeName != lead:
			// Another replica takes the released Lease; the leader's
			// replacement comes up on lead.
			e.withCordoned(t, []string{stand}, func() {
				e.deletePod(t, l)
				e.podGone(t, systemNS, l.Name)
				e.rolledOut(t, d)
			})
		case other == nil:
			// Both on lead: the standby's replacement comes up on stand.
			for _, p := range pods {
				if p.Name != l.Name {
					e.withCordoned(t, []string{lead}, func() {
						e.deletePod(t, p)
						e.podGone(t, systemNS, p.Name)
						e.rolledOut(t, d)
					})
					break
				}
			}
		default:
			e.synced(t, other.Name)
			t.Logf("%s: leader %s on %s, synced standby %s on %s", d, l.Name, lead, other.Name, stand)
			return l.Name, other.Name
		}
	}
	t.Fatalf("%s: could not arrange its leader on %s and a standby on %s", d, lead, stand)
	return "", ""
}

// soleOn runs Deployment d with one replica, on node, and returns it once it
// leads.
func (e *env) soleOn(t *testing.T, d, node string, others ...string) string {
	t.Helper()
	e.kubectl(t, "-n", systemNS, "scale", "deploy/"+d, "--replicas=1")
	for range 3 {
		e.rolledOut(t, d)
		l, pods := e.liveLeader(t, d)
		if len(pods) == 1 && l.Spec.NodeName == node {
			t.Logf("%s: its one replica %s leads on %s", d, l.Name, node)
			return l.Name
		}
		e.withCordoned(t, others, func() {
			e.deletePod(t, l)
			e.podGone(t, systemNS, l.Name)
			e.rolledOut(t, d)
		})
	}
	t.Fatalf("%s: could not run its one replica on %s", d, node)
	return ""
}

// liveLeader waits for Deployment d's Lease to name one of its running
// pods, and returns it and the running pods.
func (e *env) liveLeader(t *testing.T, d string) (corev1.Pod, []corev1.Pod) {
	t.Helper()
	var leader corev1.Pod
	var pods []corev1.Pod
	testenv.Eventually(t, 2*time.Minute, func() error {
		pods = e.pods(t, d)
		h := e.leader(t, d)
		for _, p := range pods {
			if p.Name == h {
				leader = p
				return nil
			}
		}
		return fmt.Errorf("%s's Lease names %q, none of its running pods", d, h)
	})
	return leader, pods
}

// synced waits for pod's stream to have synced (ipledger_stream_synced).
func (e *env) synced(t *testing.T, pod string) {
	t.Helper()
	testenv.Eventually(t, 2*time.Minute, func() error {
		m, err := e.metrics(context.Background(), pod)
		if err != nil {
			return err
		}
		if m["ipledger_stream_synced"] != 1 {
			return fmt.Errorf("%s's stream has not synced", pod)
		}
		return nil
	})
}

// withCordoned runs f with nodes cordoned, and uncordons them after.
func (e *env) withCordoned(t *testing.T, nodes []string, f func()) {
	t.Helper()
	for _, n := range nodes {
		e.kubectl(t, "cordon", n)
	}
	defer func() {
		for _, n := range nodes {
			e.kubectl(t, "uncordon", n)
		}
	}()
	f()
}

// placeOn moves every pod of Deployment d to node (a rollout restart with
// the others cordoned), unless they all run there already or d does not
// exist.
func (e *env) placeOn(t *testing.T, d, node string, others ...string) {
	t.Helper()
	if _, err := e.client.AppsV1().Deployments(systemNS).Get(context.Background(), d, metav1.GetOptions{}); err != nil {
		t.Logf("%s: %v; not placed", d, err)
		return
	}
	e.rolledOut(t, d)
	if !slices.ContainsFunc(e.pods(t, d), func(p corev1.Pod) bool { return p.Spec.NodeName != node }) {
		return
	}
	e.withCordoned(t, others, func() {
		e.kubectl(t, "-n", systemNS, "rollout", "restart", "deploy/"+d)
		e.rolledOut(t, d)
	})
	t.Logf("%s moved to %s", d, node)
}

// workload creates the ExternalWorkload name at ip, port 80, labelled
// app=app; without a probe nor a Ready condition it is ready.
func (e *env) workload(t *testing.T, ns, name, ip, app string) {
	t.Helper()
	w := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "ipledger.io/v1alpha1", "kind": "ExternalWorkload",
		"metadata": map[string]any{"name": name, "labels": map[string]any{"app": app}},
		"spec": map[string]any{
			"workloadIPs": []any{map[string]any{"ip": ip}},
			"ports":       []any{map[string]any{"name": "http", "port": int64(8080)}},
		},
	}}
	if _, err := e.dynamic.Resource(workloadsGVR).Namespace(ns).Create(context.Background(), w, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create ExternalWorkload %s/%s: %v", ns, name, err)
	}
}

// workloadIP is ExternalWorkload name's first address.
func (e *env) workloadIP(ctx context.Context, ns, name string) (string, error) {
	w, err := e.dynamic.Resource(workloadsGVR).Namespace(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return "", err
	}
	ips, _, _ := unstructured.NestedSlice(w.Object, "spec", "workloadIPs")
	if len(ips) == 0 {
		return "", fmt.Errorf("ExternalWorkload %s/%s has no spec.workloadIPs", ns, name)
	}
	ip, _ := ips[0].(map[string]any)["ip"].(string)
	return ip, nil
}

// setWorkloadIP moves ExternalWorkload name to ip.
func (e *env) setWorkloadIP(ctx context.Context, ns, name, ip string) error {
	patch := fmt.Sprintf(`{"spec":{"workloadIPs":[{"ip":%q}]}}`, ip)
	_, err := e.dynamic.Resource(workloadsGVR).Namespace(ns).Patch(ctx, name, "application/merge-patch+json", []byte(patch), metav1.PatchOptions{})
	if err != nil {
		return fmt.Errorf("move ExternalWorkload %s/%s to %s: %w", ns, name, ip, err)
	}
	return nil
}

// sliceHolds waits until Service svc's EndpointSlices (endpoints') hold
// exactly want.
func (e *env) sliceHolds(t *testing.T, ns, svc string, want []string, timeout time.Duration) {
	t.Helper()
	slices.Sort(want)
	testenv.Eventually(t, timeout, func() error {
		addrs, err := journey.SliceAddresses(context.Background(), e.client, ns, svc)
		if err != nil {
			return err
		}
		if !slices.Equal(addrs, want) {
			return fmt.Errorf("%s's slices hold %v, want %v", svc, addrs, want)
		}
		return nil
	})
}

// failUntilRestored fails node (cluster.FailNode) and returns what restores it and
// waits until it is Ready again; the restore runs at most once, and when
// the test ends if the test has not run it. logPrefix starts its log line.
func (e *env) failUntilRestored(t *testing.T, node, logPrefix string) (restore func()) {
	t.Helper()
	if err := e.node.FailNode(node); err != nil {
		t.Fatal(err)
	}
	restored := false
	restore = func() {
		if restored {
			return
		}
		restored = true
		t0 := time.Now()
		if err := e.node.RestoreNode(context.Background(), node); err != nil {
			t.Error(err)
			return
		}
		t.Logf("%snode %s Ready again %s after its restore", logPrefix, node, time.Since(t0).Round(time.Millisecond))
	}
	t.Cleanup(restore)
	return restore
}
