package integration

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8stypes "k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/ipledger/ipledger/lab/ec2test"
	"github.com/ipledger/ipledger/lab/testenv"
	"github.com/ipledger/ipledger/services/eipd/internal/controller"
	"github.com/ipledger/ipledger/services/eipd/internal/decide"
)

const refusedAssociations = "ipledger_eipd_associations_refused_total"

// waitRefused waits until eipd has refused node's instance for reason (an
// Event on the Node, the metric up).
func (h *harness) waitRefused(node, reason string) {
	h.t.Helper()
	h.waitEvent(node, controller.ReasonRefused)
	testenv.Eventually(h.t, 20*time.Second, func() error {
		if v := testenv.MetricValue(h.t, h.reg, refusedAssociations, map[string]string{"reason": reason}); v < 1 {
			return fmt.Errorf("%s{reason=%q} = %v", refusedAssociations, reason, v)
		}
		return nil
	})
}

// assertNoAddress fails if any address is tagged for node or associated with inst.
func (h *harness) assertNoAddress(node string, inst ec2test.Instance) {
	h.t.Helper()
	if got := h.addressesFor(node); len(got) != 0 {
		h.t.Errorf("moto has %d addresses tagged for %s, want none", len(got), node)
	}
	out, err := h.moto.Client().DescribeAddresses(context.Background(), &ec2.DescribeAddressesInput{
		Filters: []types.Filter{{Name: aws.String("instance-id"), Values: []string{inst.ID}}},
	})
	if err != nil {
		h.t.Fatal(err)
	}
	if len(out.Addresses) != 0 {
		h.t.Errorf("instance %s has Elastic IP %s", inst.ID, aws.ToString(out.Addresses[0].PublicIp))
	}
}

// TestNodeNamingInstanceOutsideClusterGetsNoEIP: an opted-in Node whose
// providerID names an instance not tagged for this cluster (untagged, or
// another cluster's) gets no address, an Event and a metric; eipd neither
// allocates nor associates anything for it.
func TestNodeNamingInstanceOutsideClusterGetsNoEIP(t *testing.T) {
	t.Parallel()
	// A refused Node is looked at again every requeue interval.
	h := newHarness(t, options{cfg: controller.Config{RequeueInterval: 2 * time.Second}})
	optIn := map[string]string{controller.LabelOptIn: "true"}
	untagged := h.moto.RunInstance(t)
	other := h.moto.RunClusterInstance(t, "another-cluster")
	n1, n2 := h.nodeName("untagged"), h.nodeName("other")
	h.createNodeAs(n1, untagged.ProviderID(), untagged.NodeAddresses(), optIn)
	h.createNodeAs(n2, other.ProviderID(), other.NodeAddresses(), optIn)
	h.waitRefused(n1, decide.RefusedNotInCluster)
	h.waitRefused(n2, decide.RefusedNotInCluster)
	h.assertNoAddress(n1, untagged)
	h.assertNoAddress(n2, other)
	if n := h.proxy.Mutations(); n != 0 {
		t.Errorf("%d EC2 mutations for Nodes naming instances outside the cluster, want 0", n)
	}
	// The check is no blanket refusal: once the instance is the cluster's,
	// the same Node gets its address.
	h.moto.TagForCluster(t, h.cluster, untagged)
	h.waitAssigned(n1, untagged, 20*time.Second)
}

// TestNodeClaimingAnotherInstanceGetsNoEIP: a Node naming one of the
// cluster's instances that is not itself (its InternalIP differs), or an
// instance another Node names, gets nothing; the Node that really is the
// instance keeps its address.
func TestNodeClaimingAnotherInstanceGetsNoEIP(t *testing.T) {
	t.Parallel()
	h := newHarness(t, options{})
	insts := h.moto.RunClusterInstances(t, h.cluster, 3)
	victim, spare, own := insts[0], insts[1], insts[2]
	vnode := h.nodeName("victim")
	h.createNode(vnode, victim, true)
	had := h.waitAssigned(vnode, victim, 20*time.Second)

	optIn := map[string]string{controller.LabelOptIn: "true"}
	// Names an instance of the cluster that no Node is, reporting its own IP.
	mismatch := h.nodeName("mismatch")
	h.createNodeAs(mismatch, spare.ProviderID(), own.NodeAddresses(), optIn)
	h.waitRefused(mismatch, decide.RefusedIPMismatch)
	// Names the victim's instance and forges its InternalIP too.
	thief := h.nodeName("thief")
	h.createNodeAs(thief, victim.ProviderID(), victim.NodeAddresses(), optIn)
	h.waitRefused(thief, decide.RefusedClaimedTwice)

	h.assertNoAddress(mismatch, spare)
	if got := h.addressesFor(thief); len(got) != 0 {
		t.Errorf("moto has %d addresses tagged for %s, want none", len(got), thief)
	}
	h.assertKept(vnode, victim, had)
	if n := h.proxy.Count("AllocateAddress"); n != 1 {
		t.Errorf("AllocateAddress sent %d times, want 1 (the victim's)", n)
	}
	if n := h.proxy.Count("AssociateAddress"); n != 1 {
		t.Errorf("AssociateAddress sent %d times, want 1 (the victim's)", n)
	}
}

// foreignAddress allocates, outside eipd, an address tagged exactly as eipd
// tags its own (managed, this cluster, for node) and associates it with inst.
func (h *harness) foreignAddress(node string, inst ec2test.Instance) types.Address {
	h.t.Helper()
	a := h.moto.AllocateOrphan(h.t, h.cluster, types.Tag{Key: aws.String(decide.TagNode), Value: aws.String(node)})
	if _, err := h.moto.Client().AssociateAddress(context.Background(), &ec2.AssociateAddressInput{
		AllocationId: a.AllocationId, NetworkInterfaceId: aws.String(inst.NetworkInterfaceID), PrivateIpAddress: aws.String(inst.PrivateIP),
	}); err != nil {
		h.t.Fatalf("associate: %v", err)
	}
	return a
}

// assertStillHeld fails unless moto still has a, associated with inst.
func (h *harness) assertStillHeld(a types.Address, inst ec2test.Instance) {
	h.t.Helper()
	out, err := h.moto.Client().DescribeAddresses(context.Background(), &ec2.DescribeAddressesInput{AllocationIds: []string{aws.ToString(a.AllocationId)}})
	if err != nil {
		h.t.Fatalf("the foreign address %s is gone: %v", aws.ToString(a.PublicIp), err)
	}
	if len(out.Addresses) != 1 || aws.ToString(out.Addresses[0].NetworkInterfaceId) != inst.NetworkInterfaceID {
		h.t.Fatalf("the foreign address %s is no longer associated with %s: %+v", aws.ToString(a.PublicIp), inst.ID, out.Addresses)
	}
}

// TestForeignAddressTaggedLikeOursIsNeverReleased: an address someone else
// associated with an instance outside the cluster, then tagged as eipd tags
// its own for a Node that is gone, is found by the sweep and left alone:
// not disassociated, not released.
func TestForeignAddressTaggedLikeOursIsNeverReleased(t *testing.T) {
	t.Parallel()
	h := newHarness(t, options{})
	outsider := h.moto.RunInstance(t)
	gone := h.nodeName("gone")
	a := h.foreignAddress(gone, outsider)
	if err := h.run.Sweep(h.ctx()); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 20*time.Second, func() error {
		if v := testenv.MetricValue(t, h.reg, "ipledger_eipd_addresses_held_outside_total", nil); v < 1 {
			return fmt.Errorf("the sync of %s has not looked at the address yet (held outside: %v)", gone, v)
		}
		return nil
	})
	h.assertStillHeld(a, outsider)
	if n := h.proxy.Count("ReleaseAddress") + h.proxy.Count("DisassociateAddress"); n != 0 {
		t.Errorf("%d ReleaseAddress/DisassociateAddress calls, want 0", n)
	}
}

// TestForeignAddressTaggedForOurNodeIsNotTaken: an address associated
// outside the cluster and tagged for an opted-in Node is not taken over
// (AssociateAddress allows reassociation): the Node gets an address of its
// own, the foreign one stays where it is.
func TestForeignAddressTaggedForOurNodeIsNotTaken(t *testing.T) {
	t.Parallel()
	h := newHarness(t, options{})
	outsider := h.moto.RunInstance(t)
	inst := h.moto.RunClusterInstance(t, h.cluster)
	node := h.nodeName("n")
	foreign := h.foreignAddress(node, outsider)
	h.createNode(node, inst, true)
	h.waitEvent(node, controller.ReasonHeldOutside)
	testenv.Eventually(t, 20*time.Second, func() error {
		n, err := h.env.Client.CoreV1().Nodes().Get(context.Background(), node, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if ip := n.Labels[controller.LabelExternalIP]; ip == "" || ip == aws.ToString(foreign.PublicIp) {
			return fmt.Errorf("node labelled %q, want an address of its own", ip)
		}
		return nil
	})
	h.assertStillHeld(foreign, outsider)
	if n := h.proxy.Count("ReleaseAddress") + h.proxy.Count("DisassociateAddress"); n != 0 {
		t.Errorf("%d ReleaseAddress/DisassociateAddress calls, want 0", n)
	}
}

// asNode returns a client acting as the kubelet of Node name: user
// system:node:<name> in group system:nodes, impersonated by the admin. The
// API server authorizes it with the Node authorizer and admits its writes
// through NodeRestriction exactly as for a kubelet's own certificate.
func asNode(t *testing.T, env *testenv.Env, name string) kubernetes.Interface {
	t.Helper()
	cfg := rest.CopyConfig(env.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: "system:node:" + name, Groups: []string{"system:nodes", "system:authenticated"}}
	c, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func labelPatch(key string, value any) []byte {
	b := fmt.Sprintf(`{"metadata":{"labels":{%q:%s}}}`, key, func() string {
		if value == nil {
			return "null"
		}
		return fmt.Sprintf("%q", value)
	}())
	return []byte(b)
}

// TestNodeCannotOptItselfIn acts as a compromised kubelet: it may register
// its Node, report its addresses and set ipledger.io/ labels on itself
// (the legacy opt-in among them), but not the node-restriction.kubernetes.io/
// opt-in, and not on another Node. With --legacy-opt-in=ignore eipd gives it
// nothing until an operator labels it; then it gets its address, and the
// node cannot take the operator's label off again.
func TestNodeCannotOptItselfIn(t *testing.T) {
	t.Parallel()
	h := newHarness(t, options{cfg: controller.Config{LegacyOptIn: controller.LegacyOptInIgnore}})
	insts := h.moto.RunClusterInstances(t, h.cluster, 2)
	inst, sibInst := insts[0], insts[1]
	name := h.nodeName("self")
	kubelet := asNode(t, h.env, name)
	ctx := h.ctx()

	node := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"eipd-test": h.label, controller.LabelOptIn: "true"}},
		Spec:       corev1.NodeSpec{ProviderID: inst.ProviderID()},
	}
	if _, err := kubelet.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); !apierrors.IsForbidden(err) {
		t.Fatalf("the node registered itself with %s: err = %v, want Forbidden", controller.LabelOptIn, err)
	}
	delete(node.Labels, controller.LabelOptIn)
	node.Labels[controller.LabelAutoAssign] = "true" // allowed: ipledger.io/ is not a restricted prefix
	if _, err := kubelet.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil {
		t.Fatalf("the node cannot register itself: %v", err)
	}
	t.Cleanup(func() { _ = h.env.Client.CoreV1().Nodes().Delete(context.Background(), name, metav1.DeleteOptions{}) })
	cur, err := kubelet.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cur.Status.Addresses = inst.NodeAddresses()
	if _, err := kubelet.CoreV1().Nodes().UpdateStatus(ctx, cur, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("the node cannot report its addresses: %v", err)
	}
	if _, err := kubelet.CoreV1().Nodes().Patch(ctx, name, k8stypes.MergePatchType, labelPatch("ipledger.io/anything", "x"), metav1.PatchOptions{}); err != nil {
		t.Errorf("the node cannot set an ipledger.io/ label on itself: %v", err)
	}
	if _, err := kubelet.CoreV1().Nodes().Patch(ctx, name, k8stypes.MergePatchType, labelPatch(controller.LabelOptIn, "true"), metav1.PatchOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("the node labelled itself %s: err = %v, want Forbidden", controller.LabelOptIn, err)
	}

	// A sibling the operator opted in shows the controller at work.
	sib := h.nodeName("sib")
	h.createNode(sib, sibInst, true)
	h.waitAssigned(sib, sibInst, 20*time.Second)
	if _, err := kubelet.CoreV1().Nodes().Patch(ctx, sib, k8stypes.MergePatchType, labelPatch("ipledger.io/anything", "x"), metav1.PatchOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("the node labelled another Node: err = %v, want Forbidden", err)
	}
	// The self-labelled node is in the view, and eipd gives it nothing.
	testenv.Eventually(t, 10*time.Second, func() error {
		if _, ok := h.store.Get(nodeKind(), "", name); !ok {
			return fmt.Errorf("node %s not in the view yet", name)
		}
		return nil
	})
	if err := h.run.Sync(ctx, name); err != nil {
		t.Fatal(err)
	}
	h.assertNoAddress(name, inst)
	if n := h.proxy.Count("AllocateAddress"); n != 1 {
		t.Errorf("AllocateAddress sent %d times, want 1 (the sibling's)", n)
	}

	// The operator opts it in.
	if _, err := h.env.Client.CoreV1().Nodes().Patch(ctx, name, k8stypes.MergePatchType, labelPatch(controller.LabelOptIn, "true"), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	h.waitAssigned(name, inst, 20*time.Second)
	if _, err := kubelet.CoreV1().Nodes().Patch(ctx, name, k8stypes.MergePatchType, labelPatch(controller.LabelOptIn, nil), metav1.PatchOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("the node removed the operator's %s: err = %v, want Forbidden", controller.LabelOptIn, err)
	}
}

// TestLegacyOptInAcceptedAndDeprecated: with the default --legacy-opt-in=accept
// a Node that labelled itself the old way still gets its address (the
// upgrade keeps every address where it is), with a warning Event.
func TestLegacyOptInAcceptedAndDeprecated(t *testing.T) {
	t.Parallel()
	h := newHarness(t, options{})
	inst := h.moto.RunClusterInstance(t, h.cluster)
	name := h.nodeName("legacy")
	h.createNodeAs(name, inst.ProviderID(), inst.NodeAddresses(), map[string]string{controller.LabelAutoAssign: "true"})
	h.waitAssigned(name, inst, 20*time.Second)
	h.waitEvent(name, controller.ReasonDeprecatedOptIn)
	if v := testenv.MetricValue(t, h.reg, "ipledger_eipd_legacy_opt_ins_total", nil); v != 1 {
		t.Errorf("ipledger_eipd_legacy_opt_ins_total = %v, want 1", v)
	}
}
