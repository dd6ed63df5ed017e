package integration

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8stypes "k8s.io/apimachinery/pkg/types"

	"github.com/ipledger/ipledger/lab/ec2test"
	"github.com/ipledger/ipledger/lab/faultproxy"
	"github.com/ipledger/ipledger/lab/testenv"
	watcherv1 "github.com/ipledger/ipledger/proto/ipledger/watcher/v1"
	"github.com/ipledger/ipledger/services/eipd/internal/controller"
	"github.com/ipledger/ipledger/services/eipd/internal/decide"
)

func TestLabelledNodeGetsAssociatedTaggedEIP(t *testing.T) {
	t.Parallel()
	h := newHarness(t, options{})
	inst := h.moto.RunInstance(t)
	node := h.nodeName("a")
	start := time.Now()
	h.createNode(node, inst, true)
	a := h.waitAssigned(node, inst, 20*time.Second)
	t.Logf("node labelled with %s and associated in %s", aws.ToString(a.PublicIp), time.Since(start))
	if ec2test.Tag(a.Tags, decide.TagManaged) != "true" || ec2test.Tag(a.Tags, decide.TagCluster) != h.cluster {
		t.Errorf("tags = %v, want managed=true and cluster=%s", a.Tags, h.cluster)
	}
	h.waitEvent(node, controller.ReasonAllocated)
	h.waitEvent(node, controller.ReasonAssociated)
	// The trust check reads the DescribeInstances the sync makes anyway.
	t.Logf("%d DescribeInstances, %d DescribeAddresses to give the Node its address", h.proxy.Count("DescribeInstances"), h.proxy.Count("DescribeAddresses"))
	if n := h.nodeGets.Load(); n != 0 {
		t.Errorf("%d GETs of Nodes to give a Node its address, want 0 (only destructive actions are confirmed)", n)
	}
}

func TestUnlabelledNodeIsLeftAlone(t *testing.T) {
	t.Parallel()
	h := newHarness(t, options{})
	inst := h.moto.RunInstance(t)
	node := h.nodeName("plain")
	h.createNode(node, inst, false)
	// A labelled sibling proves the controller is running when we look.
	other := h.moto.RunInstance(t)
	h.createNode(h.nodeName("sib"), other, true)
	h.waitAssigned(h.nodeName("sib"), other, 20*time.Second)
	if got := h.addressesFor(node); len(got) != 0 {
		t.Fatalf("unlabelled node got %d addresses", len(got))
	}
}

func TestOrphanMostReferencedByPodsIsReused(t *testing.T) {
	t.Parallel()
	h := newHarness(t, options{})
	var orphans []types.Address
	for range 3 {
		orphans = append(orphans, h.moto.AllocateOrphan(t, h.cluster))
	}
	wanted := aws.ToString(orphans[1].PublicIp)
	for i, ip := range []string{wanted, aws.ToString(orphans[2].PublicIp), wanted} {
		_, err := h.env.Client.CoreV1().Pods(h.ns).Create(h.ctx(), &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("p%d", i), Labels: map[string]string{controller.LabelExternalIP: ip}},
			Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "example.invalid/c"}}},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
	}
	// The pods must be in the store (the stream's view) before the node asks.
	testenv.Eventually(t, 10*time.Second, func() error {
		if n := len(h.store.List(watcherv1.Kind_KIND_POD)); n != 3 {
			return fmt.Errorf("store has %d pods, want 3", n)
		}
		return nil
	})
	inst := h.moto.RunInstance(t)
	node := h.nodeName("n")
	h.createNode(node, inst, true)
	a := h.waitAssigned(node, inst, 20*time.Second)
	if aws.ToString(a.PublicIp) != wanted {
		t.Fatalf("node got %s, want %s (referenced by two pods)", aws.ToString(a.PublicIp), wanted)
	}
	if n := h.proxy.Count("AllocateAddress"); n != 0 {
		t.Errorf("AllocateAddress called %d times with orphans available", n)
	}
	h.waitEvent(node, controller.ReasonClaimed)
}

func TestNoDuplicateWithDroppedAllocateDelayedVisibilityAndBurst(t *testing.T) {
	t.Parallel()
	const delay = 4 * time.Second
	h := newHarness(t, options{cfg: controller.Config{MinReconciliationInterval: 0, Workers: 4}})
	h.proxy.SetVisibilityDelay(delay)
	h.proxy.Inject("AllocateAddress", faultproxy.DropResponse, 1)
	inst := h.moto.RunInstance(t)
	node := h.nodeName("burst")
	start := time.Now()
	h.createNode(node, inst, true)
	for i := range 50 {
		patch := fmt.Sprintf(`{"metadata":{"annotations":{"ipledger.io/test-burst":"%d"}}}`, i)
		if _, err := h.env.Client.CoreV1().Nodes().Patch(h.ctx(), node, k8stypes.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	h.waitAssigned(node, inst, 30*time.Second)
	t.Logf("converged in %s (visibility delay %s)", time.Since(start), delay)
	// Keep the burst going past the delay, then check nothing more appeared.
	for i := range 20 {
		patch := fmt.Sprintf(`{"metadata":{"annotations":{"ipledger.io/test-burst":"after-%d"}}}`, i)
		if _, err := h.env.Client.CoreV1().Nodes().Patch(h.ctx(), node, k8stypes.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	testenv.Eventually(t, 10*time.Second, func() error {
		if time.Since(start) < delay+time.Second {
			return fmt.Errorf("waiting past the visibility delay")
		}
		return nil
	})
	if got := h.addressesFor(node); len(got) != 1 {
		t.Fatalf("moto has %d addresses tagged for %s, want exactly 1", len(got), node)
	}
	if n := h.proxy.Count("AllocateAddress"); n != 1 {
		t.Errorf("AllocateAddress sent %d times, want 1", n)
	}
	if d := testenv.MetricValue(t, h.reg, "ipledger_eipd_duplicates_removed_total", nil); d != 0 {
		t.Errorf("duplicates removed = %v: one was created", d)
	}
	// The burst must really have driven syncs, or this test proves nothing.
	syncs := testenv.MetricValue(t, h.reg, "ipledger_eipd_node_syncs_total", nil)
	t.Logf("%v syncs during the burst; %d DescribeAddresses", syncs, h.proxy.Count("DescribeAddresses"))
	if syncs < 5 {
		t.Errorf("only %v syncs: the burst did not exercise the controller", syncs)
	}
}

func TestDuplicatesTaggedForOneNodeAreReleased(t *testing.T) {
	t.Parallel()
	h := newHarness(t, options{})
	node := h.nodeName("dup")
	nodeTag := types.Tag{Key: aws.String(decide.TagNode), Value: aws.String(node)}
	first := aws.ToString(h.moto.AllocateOrphan(t, h.cluster, nodeTag).AllocationId)
	second := aws.ToString(h.moto.AllocateOrphan(t, h.cluster, nodeTag).AllocationId)
	inst := h.moto.RunInstance(t)
	h.createNode(node, inst, true)
	a := h.waitAssigned(node, inst, 20*time.Second)
	// Neither is associated, neither has an allocation time: the smaller
	// allocation ID is kept.
	keep := min(first, second)
	if aws.ToString(a.AllocationId) != keep {
		t.Errorf("kept %s, want %s", aws.ToString(a.AllocationId), keep)
	}
	if n := len(h.moto.Addresses(t, h.cluster)); n != 1 {
		t.Errorf("moto has %d addresses for the cluster, want 1 (the duplicate released)", n)
	}
	h.waitEvent(node, controller.ReasonDuplicateReleased)
	if d := testenv.MetricValue(t, h.reg, "ipledger_eipd_duplicates_removed_total", nil); d != 1 {
		t.Errorf("duplicates removed = %v, want 1", d)
	}
}

func TestNodeDeletedReleasesEIP(t *testing.T) {
	t.Parallel()
	h := newHarness(t, options{})
	inst := h.moto.RunInstance(t)
	node := h.nodeName("del")
	h.createNode(node, inst, true)
	h.waitAssigned(node, inst, 20*time.Second)
	describeBefore := h.proxy.Count("DescribeInstances") + h.proxy.Count("DescribeNetworkInterfaces")
	if err := h.env.Client.CoreV1().Nodes().Delete(h.ctx(), node, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 20*time.Second, func() error {
		if n := len(h.moto.Addresses(t, h.cluster)); n != 0 {
			return fmt.Errorf("moto still has %d addresses", n)
		}
		return nil
	})
	if h.proxy.Count("DisassociateAddress") != 1 || h.proxy.Count("ReleaseAddress") != 1 {
		t.Errorf("disassociate %d, release %d; want 1 and 1", h.proxy.Count("DisassociateAddress"), h.proxy.Count("ReleaseAddress"))
	}
	t.Logf("giving the address back cost %d GETs of the Node (%s)", h.nodeGets.Load(), liveReadLatency(t, h))
	// Who holds the address is checked before it is released (it might be
	// held outside the cluster): one DescribeInstances, plus one
	// DescribeNetworkInterfaces where EC2 (here moto) names only the interface.
	t.Logf("and %d Describe calls to learn who held it", h.proxy.Count("DescribeInstances")+h.proxy.Count("DescribeNetworkInterfaces")-describeBefore)
}

func TestLabelRemovedReleasesAndClearsNode(t *testing.T) {
	t.Parallel()
	h := newHarness(t, options{})
	inst := h.moto.RunInstance(t)
	node := h.nodeName("unl")
	h.createNode(node, inst, true)
	h.waitAssigned(node, inst, 20*time.Second)
	patch := fmt.Sprintf(`{"metadata":{"labels":{%q:null}}}`, controller.LabelOptIn)
	if _, err := h.env.Client.CoreV1().Nodes().Patch(h.ctx(), node, k8stypes.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 20*time.Second, func() error {
		n, err := h.env.Client.CoreV1().Nodes().Get(context.Background(), node, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if v, ok := n.Labels[controller.LabelExternalIP]; ok {
			return fmt.Errorf("node still labelled %s", v)
		}
		if v, ok := n.Annotations[controller.AnnotationAllocationID]; ok {
			return fmt.Errorf("node still annotated %s", v)
		}
		if c := len(h.moto.Addresses(t, h.cluster)); c != 0 {
			return fmt.Errorf("moto still has %d addresses", c)
		}
		return nil
	})
	h.waitEvent(node, controller.ReasonReleased)
}

func TestPreventDeallocationKeepsAndReuses(t *testing.T) {
	t.Parallel()
	h := newHarness(t, options{cfg: controller.Config{PreventEIPDeallocation: true}})
	inst := h.moto.RunInstance(t)
	node := h.nodeName("keep")
	h.createNode(node, inst, true)
	a := h.waitAssigned(node, inst, 20*time.Second)
	if err := h.env.Client.CoreV1().Nodes().Delete(h.ctx(), node, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 20*time.Second, func() error {
		all := h.moto.Addresses(t, h.cluster)
		if len(all) != 1 {
			return fmt.Errorf("moto has %d addresses, want the 1 kept", len(all))
		}
		if aws.ToString(all[0].AssociationId) != "" || ec2test.Tag(all[0].Tags, decide.TagNode) != "" {
			return fmt.Errorf("kept address still associated (%q) or tagged (%q)", aws.ToString(all[0].AssociationId), ec2test.Tag(all[0].Tags, decide.TagNode))
		}
		return nil
	})
	if n := h.proxy.Count("ReleaseAddress"); n != 0 {
		t.Errorf("ReleaseAddress called %d times with --prevent-eip-deallocation", n)
	}
	inst2 := h.moto.RunInstance(t)
	node2 := h.nodeName("next")
	h.createNode(node2, inst2, true)
	b := h.waitAssigned(node2, inst2, 20*time.Second)
	if aws.ToString(b.AllocationId) != aws.ToString(a.AllocationId) {
		t.Fatalf("next node got %s, want the kept %s", aws.ToString(b.AllocationId), aws.ToString(a.AllocationId))
	}
}

func TestThrottlingStormBacksOffAndConverges(t *testing.T) {
	t.Parallel()
	h := newHarness(t, options{maxAttempts: 3})
	inst := h.moto.RunInstance(t)
	h.proxy.Inject("", faultproxy.Throttle, faultproxy.Forever)
	node := h.nodeName("storm")
	h.createNode(node, inst, true)
	testenv.Eventually(t, 20*time.Second, func() error {
		if v := testenv.MetricValue(t, h.reg, "ipledger_eipd_ec2_errors_total", map[string]string{"code": "RequestLimitExceeded"}); v < 6 {
			return fmt.Errorf("throttling errors counted: %v", v)
		}
		return nil
	})
	stormRequests := h.proxy.Count("DescribeAddresses")
	h.proxy.Clear()
	start := time.Now()
	h.waitAssigned(node, inst, 30*time.Second)
	t.Logf("storm: %d DescribeAddresses attempts throttled; converged %s after it ended", stormRequests, time.Since(start))
	if n := h.proxy.Count("AllocateAddress"); n != 1 {
		t.Errorf("AllocateAddress sent %d times, want 1", n)
	}
	if v := testenv.MetricValue(t, h.reg, "ipledger_eipd_node_syncs_total", map[string]string{"result": "error"}); v == 0 {
		t.Error("no failed sync counted during the storm")
	}
}

func TestInvalidProviderIDGetsEvent(t *testing.T) {
	t.Parallel()
	h := newHarness(t, options{})
	node := h.nodeName("badpid")
	h.createNodeAs(node, ec2test.Instance{ID: "nope", Zone: "z"}.ProviderID(), nil, map[string]string{controller.LabelOptIn: "true"})
	h.waitEvent(node, controller.ReasonInvalidProviderID)
	if n := h.proxy.Mutations(); n != 0 {
		t.Errorf("%d EC2 mutations for a node with an invalid providerID", n)
	}
}
