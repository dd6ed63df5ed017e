package integration

import (
	"context"
	"fmt"
	"maps"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"
	"google.golang.org/protobuf/proto"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ipledger/ipledger/lab/ec2test"
	"github.com/ipledger/ipledger/lab/testenv"
	watcherv1 "github.com/ipledger/ipledger/proto/ipledger/watcher/v1"
	"github.com/ipledger/ipledger/services/eipd/internal/controller"
)

// The view (the watcher stream) can be behind the API server: after a
// failover to a replica that lags, a Node can look gone or unlabelled while
// it is labelled. A released Elastic IP is gone for good, so eipd must ask
// the API server before it gives an address back.

const refusals = "ipledger_eipd_give_backs_refused_total"

// waitActedOnStaleView waits until eipd either refused to give node's
// address back (more refusals than before) or gave it back anyway (moto no
// longer shows it tagged for node and associated).
func (h *harness) waitActedOnStaleView(nodes []string, before float64) {
	h.t.Helper()
	testenv.Eventually(h.t, 30*time.Second, func() error {
		if testenv.MetricValue(h.t, h.reg, refusals, nil) >= before+float64(len(nodes)) {
			return nil
		}
		for _, node := range nodes {
			if a := h.addressesFor(node); len(a) != 1 || aws.ToString(a[0].AssociationId) == "" {
				return nil // gave it back: the assertions that follow say so
			}
		}
		return fmt.Errorf("eipd has not acted on the stale view yet (refusals %v)", testenv.MetricValue(h.t, h.reg, refusals, nil))
	})
}

// assertKept checks that node still has the address it had, associated with
// inst and published on the Node.
func (h *harness) assertKept(node string, inst ec2test.Instance, had types.Address) {
	h.t.Helper()
	addrs := h.addressesFor(node)
	if len(addrs) != 1 {
		h.t.Fatalf("moto has %d addresses tagged for %s, want its 1 (%s): released", len(addrs), node, aws.ToString(had.AllocationId))
	}
	a := addrs[0]
	if aws.ToString(a.AllocationId) != aws.ToString(had.AllocationId) {
		h.t.Fatalf("%s has %s, want %s", node, aws.ToString(a.AllocationId), aws.ToString(had.AllocationId))
	}
	if aws.ToString(a.NetworkInterfaceId) != inst.NetworkInterfaceID || aws.ToString(a.PrivateIpAddress) != inst.PrivateIP {
		h.t.Fatalf("%s's address is associated with %q/%q, want %s/%s: disassociated", node,
			aws.ToString(a.NetworkInterfaceId), aws.ToString(a.PrivateIpAddress), inst.NetworkInterfaceID, inst.PrivateIP)
	}
	n, err := h.env.Client.CoreV1().Nodes().Get(context.Background(), node, metav1.GetOptions{})
	if err != nil {
		h.t.Fatal(err)
	}
	if ip := n.Labels[controller.LabelExternalIP]; ip != aws.ToString(a.PublicIp) {
		h.t.Fatalf("node %s publishes %q, want %s", node, ip, aws.ToString(a.PublicIp))
	}
}

func (h *harness) assertNoGiveBack() {
	h.t.Helper()
	if d, r, u := h.proxy.Count("DisassociateAddress"), h.proxy.Count("ReleaseAddress"), h.proxy.Count("DeleteTags"); d+r+u != 0 {
		h.t.Fatalf("EC2 calls on a stale view: DisassociateAddress %d, ReleaseAddress %d, DeleteTags %d; want none", d, r, u)
	}
}

func nodeKind() watcherv1.Kind { return watcherv1.Kind_KIND_NODE }

func TestStaleViewSaysNodeGoneLiveNodeKeepsEIP(t *testing.T) {
	t.Parallel()
	h := newHarness(t, options{})
	inst := h.moto.RunInstance(t)
	node := h.nodeName("gone-in-view")
	h.createNode(node, inst, true)
	had := h.waitAssigned(node, inst, 20*time.Second)

	before := testenv.MetricValue(t, h.reg, refusals, nil)
	h.store.pin(nodeKind(), node, nil, false) // a synthetic DELETE from a replica behind
	h.waitActedOnStaleView([]string{node}, before)
	h.assertKept(node, inst, had)
	h.assertNoGiveBack()
}

func TestStaleViewSaysNodeUnlabelledLiveNodeKeepsEIP(t *testing.T) {
	t.Parallel()
	h := newHarness(t, options{})
	inst := h.moto.RunInstance(t)
	node := h.nodeName("unl-in-view")
	h.createNode(node, inst, true)
	had := h.waitAssigned(node, inst, 20*time.Second)

	// The Node as a replica that missed its labelling shows it.
	cur, ok := h.store.Get(nodeKind(), "", node)
	if !ok {
		t.Fatal("node not in the view")
	}
	stale := proto.Clone(cur).(*watcherv1.Object)
	stale.Meta.Labels = maps.Clone(stale.Meta.Labels)
	delete(stale.Meta.Labels, controller.LabelOptIn)
	before := testenv.MetricValue(t, h.reg, refusals, nil)
	h.store.pin(nodeKind(), node, stale, false)
	h.waitActedOnStaleView([]string{node}, before)
	h.assertKept(node, inst, had)
	h.assertNoGiveBack()
}

// TestSweepOverNodesMissingFromViewKeepsTheirEIPs: the view lacks several
// labelled Nodes (it never heard of them) when the sweep runs; it confirms
// them against the API server with one bounded, parallel round of GETs,
// gives nothing back and syncs none of them.
func TestSweepOverNodesMissingFromViewKeepsTheirEIPs(t *testing.T) {
	t.Parallel()
	h := newHarness(t, options{})
	const n = 6
	var nodes []string
	insts := map[string]ec2test.Instance{}
	had := map[string]types.Address{}
	for i := range n {
		inst := h.moto.RunInstance(t)
		node := h.nodeName(fmt.Sprintf("sweep%d", i))
		h.createNode(node, inst, true)
		nodes, insts[node] = append(nodes, node), inst
	}
	for _, node := range nodes {
		had[node] = h.waitAssigned(node, insts[node], 30*time.Second)
	}
	for _, node := range nodes {
		h.store.pin(nodeKind(), node, nil, true)
	}
	before := testenv.MetricValue(t, h.reg, refusals, nil)
	gets, adds := h.nodeGets.Load(), h.adds.Load()
	start := time.Now()
	if err := h.run.Sweep(h.ctx()); err != nil {
		t.Fatal(err)
	}
	took := time.Since(start)
	queued := h.adds.Load() - adds
	h.waitActedOnStaleView(nodes, before)
	for _, node := range nodes {
		h.assertKept(node, insts[node], had[node])
	}
	h.assertNoGiveBack()
	sweepGets := h.nodeGets.Load() - gets
	t.Logf("sweep over %d Nodes missing from the view: %d GETs of Nodes, at most %d at once; sweep took %s; %s",
		n, sweepGets, 8, took, liveReadLatency(t, h))
	if sweepGets != n {
		t.Errorf("sweep sent %d GETs of Nodes, want %d (one per Node the view says has no business with an address)", sweepGets, n)
	}
	if queued != 0 {
		t.Errorf("the sweep queued %d Nodes, want none (every Node still wants its address)", queued)
	}
}

// TestNodeGoneButAPIServerUnreachableReleasesOnlyOnceConfirmed: the Node
// really is deleted, but eipd cannot reach the API server to confirm: it
// gives nothing back and retries; once the API server answers, it releases.
func TestNodeGoneButAPIServerUnreachableReleasesOnlyOnceConfirmed(t *testing.T) {
	t.Parallel()
	h := newHarness(t, options{})
	inst := h.moto.RunInstance(t)
	node := h.nodeName("unconfirmed")
	h.createNode(node, inst, true)
	h.waitAssigned(node, inst, 20*time.Second)

	h.failNodeGets.Store(true)
	gets := h.nodeGets.Load()
	if err := h.env.Client.CoreV1().Nodes().Delete(h.ctx(), node, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 30*time.Second, func() error {
		if len(h.addressesFor(node)) == 0 {
			return nil // released anyway: asserted below
		}
		if g := h.nodeGets.Load() - gets; g < 3 {
			return fmt.Errorf("%d failed GETs of the Node so far, want 3 (retries)", g)
		}
		return nil
	})
	h.assertNoGiveBack()

	h.failNodeGets.Store(false)
	testenv.Eventually(t, 30*time.Second, func() error {
		if c := len(h.addressesFor(node)); c != 0 {
			return fmt.Errorf("moto still has %d addresses for the deleted node", c)
		}
		return nil
	})
	if r := h.proxy.Count("ReleaseAddress"); r != 1 {
		t.Errorf("ReleaseAddress sent %d times, want 1", r)
	}
}

// liveReadLatency summarises the controller's GETs of Nodes so far.
func liveReadLatency(t *testing.T, h *harness) string {
	t.Helper()
	mfs, err := h.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == "ipledger_eipd_live_node_read_duration_seconds" {
			hist := mf.GetMetric()[0].GetHistogram()
			if hist.GetSampleCount() == 0 {
				break
			}
			mean := time.Duration(hist.GetSampleSum() / float64(hist.GetSampleCount()) * float64(time.Second))
			return fmt.Sprintf("%d live reads, mean %s", hist.GetSampleCount(), mean.Round(10*time.Microsecond))
		}
	}
	return "no live reads"
}
