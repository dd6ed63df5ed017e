package integration

import (
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8stypes "k8s.io/apimachinery/pkg/types"

	"github.com/ipledger/ipledger/lab/ec2test"
	"github.com/ipledger/ipledger/lab/faultproxy"
	"github.com/ipledger/ipledger/lab/testenv"
	"github.com/ipledger/ipledger/services/eipd/internal/controller"
	"github.com/ipledger/ipledger/services/eipd/internal/decide"
)

// reservedSets writes a --reserved-sets file for the test.
func reservedSets(t *testing.T, doc string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "reserved-sets.yaml")
	if err := os.WriteFile(path, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// reserve allocates an address the operator gives to this cluster
// (managed=true, cluster=<id>) with tags k1, v1, k2, v2, ….
func (h *harness) reserve(kv ...string) types.Address {
	h.t.Helper()
	var tags []types.Tag
	for i := 0; i+1 < len(kv); i += 2 {
		tags = append(tags, types.Tag{Key: aws.String(kv[i]), Value: aws.String(kv[i+1])})
	}
	return h.moto.AllocateOrphan(h.t, h.cluster, tags...)
}

// tagInstances tags instances as a node group's launch template would.
func (h *harness) tagInstances(key, value string, insts ...ec2test.Instance) {
	h.t.Helper()
	var ids []string
	for _, i := range insts {
		ids = append(ids, i.ID)
	}
	if _, err := h.moto.Client().CreateTags(context.Background(), &ec2.CreateTagsInput{
		Resources: ids, Tags: []types.Tag{{Key: aws.String(key), Value: aws.String(value)}},
	}); err != nil {
		h.t.Fatal(err)
	}
}

// waitState waits until the Node's last sync ended in state.
func (h *harness) waitState(node, state string) controller.NodeStatus {
	h.t.Helper()
	var got controller.NodeStatus
	testenv.Eventually(h.t, 30*time.Second, func() error {
		s, ok := h.ctrl.Status().Get(node)
		if !ok || s.State != state {
			return fmt.Errorf("node %s: %+v, want state %s", node, s, state)
		}
		got = s
		return nil
	})
	return got
}

// assignedIPs returns, for each Node, the public IP moto shows tagged for it.
func (h *harness) assignedIPs() map[string][]string {
	out := map[string][]string{}
	for _, a := range h.moto.Addresses(h.t, h.cluster) {
		if n := ec2test.Tag(a.Tags, decide.TagNode); n != "" {
			out[n] = append(out[n], aws.ToString(a.PublicIp))
		}
	}
	return out
}

func (h *harness) deleteNode(name string) {
	h.t.Helper()
	if err := h.env.Client.CoreV1().Nodes().Delete(h.ctx(), name, metav1.DeleteOptions{}); err != nil {
		h.t.Fatal(err)
	}
}

// A partner allowlists three addresses: the first three Nodes get them in
// the set's order, the next two wait (Event, state, metric) and nothing is
// ever allocated or released; a Node deleted gives its address back to the
// set and the Node that joined first among the waiters gets it.
func TestReservedSetOfThreeServesFiveNodesInOrder(t *testing.T) {
	t.Parallel()
	file := reservedSets(t, `
sets:
- name: partner
  addresses: {tags: {allowlist: partner}}
  order: tag:rank
`)
	h := newHarness(t, options{cfg: controller.Config{ReservedSets: file, Workers: 4}})
	r3, r1, r2 := h.reserve("allowlist", "partner", "rank", "3"), h.reserve("allowlist", "partner", "rank", "1"), h.reserve("allowlist", "partner", "rank", "2")
	other := h.moto.AllocateOrphan(t, h.cluster) // an orphan in no set: no Node here may take it
	insts := h.moto.RunInstances(t, 5)
	names := []string{h.nodeName("a"), h.nodeName("b"), h.nodeName("c")}
	want := []types.Address{r1, r2, r3}
	// One after another: each takes the next address of the set's order.
	for i, n := range names {
		h.createNode(n, insts[i], true)
		if got := h.waitAssigned(n, insts[i], 30*time.Second); aws.ToString(got.PublicIp) != aws.ToString(want[i].PublicIp) {
			t.Fatalf("node %s got %s, want %s (rank %d of the set)", n, aws.ToString(got.PublicIp), aws.ToString(want[i].PublicIp), i+1)
		}
	}
	// Two more wait. The second waiter joins first (its name sorts last),
	// so it is served first: waiters go in the order they joined.
	first, second := h.nodeName("z-first"), h.nodeName("y-second")
	h.createNode(first, insts[3], true)
	st := h.waitState(first, controller.StateWaiting)
	if !strings.Contains(st.Message, "reserved set partner") {
		t.Errorf("waiting message %q does not name the set", st.Message)
	}
	created := h.getNode(first).CreationTimestamp.Time
	testenv.Eventually(t, 5*time.Second, func() error { // creation timestamps have whole seconds
		if !time.Now().Truncate(time.Second).After(created) {
			return fmt.Errorf("still the second %s was created in", first)
		}
		return nil
	})
	h.createNode(second, insts[4], true)
	h.waitState(second, controller.StateWaiting)
	h.waitEvent(first, controller.ReasonWaiting)
	h.waitEvent(second, controller.ReasonWaiting)
	if v := testenv.MetricValue(t, h.reg, "ipledger_eipd_nodes_waiting", map[string]string{"reserved_set": "partner"}); v != 2 {
		t.Errorf("ipledger_eipd_nodes_waiting{partner} = %v, want 2", v)
	}
	if v := testenv.MetricValue(t, h.reg, "ipledger_eipd_reserved_addresses", map[string]string{"reserved_set": "partner", "state": "taken"}); v != 3 {
		t.Errorf("ipledger_eipd_reserved_addresses{partner,taken} = %v, want 3", v)
	}

	h.deleteNode(names[1]) // gives rank 2 back to the set
	got := h.waitAssigned(first, insts[3], 30*time.Second)
	if aws.ToString(got.PublicIp) != aws.ToString(r2.PublicIp) {
		t.Fatalf("the first waiter got %s, want %s (the address given back)", aws.ToString(got.PublicIp), aws.ToString(r2.PublicIp))
	}
	h.waitState(second, controller.StateWaiting)
	if n := h.proxy.Count("AllocateAddress") + h.proxy.Count("ReleaseAddress"); n != 0 {
		t.Errorf("%d AllocateAddress/ReleaseAddress calls, want 0: a reserved set is never allocated to nor released", n)
	}
	if tagged := h.assignedIPs(); len(tagged[h.nodeName("b")]) != 0 || slices.ContainsFunc(slices.Collect(maps.Values(tagged)), func(ips []string) bool {
		return slices.Contains(ips, aws.ToString(other.PublicIp))
	}) {
		t.Errorf("addresses tagged: %v; the deleted Node keeps none and nobody takes the orphan outside the set", tagged)
	}
}

// With a set that selects nothing, a Node waits and nothing is allocated;
// the wait ends on its own once the operator adds an address to the set.
func TestNeverAllocateWithAnEmptySet(t *testing.T) {
	t.Parallel()
	file := reservedSets(t, `
sets:
- name: empty
  addresses: {tags: {allowlist: later}}
`)
	h := newHarness(t, options{cfg: controller.Config{ReservedSets: file, RequeueInterval: 2 * time.Second}})
	inst := h.moto.RunInstance(t)
	node := h.nodeName("w")
	h.createNode(node, inst, true)
	h.waitState(node, controller.StateWaiting)
	h.waitEvent(node, controller.ReasonWaiting)
	if n := h.proxy.Count("AllocateAddress"); n != 0 {
		t.Fatalf("AllocateAddress sent %d times with a reserved set, want 0", n)
	}
	added := h.reserve("allowlist", "later")
	got := h.waitAssigned(node, inst, 30*time.Second)
	if aws.ToString(got.AllocationId) != aws.ToString(added.AllocationId) {
		t.Fatalf("node got %s, want the address added to the set %s", aws.ToString(got.AllocationId), aws.ToString(added.AllocationId))
	}
	if n := h.proxy.Count("AllocateAddress"); n != 0 {
		t.Errorf("AllocateAddress sent %d times, want 0", n)
	}
}

// Two node groups, each with its own set chosen by the instances' EC2 tags
// (not Node labels): each Node gets an address of its group's set. A Node
// of a third group takes the one orphan outside the sets; with
// otherNodes: none the next one waits.
func TestTwoSetsByInstanceTag(t *testing.T) {
	t.Parallel()
	file := reservedSets(t, `
sets:
- name: group-a
  addresses: {tags: {allowlist: a}}
  instances: {tags: {node-group: a}}
- name: group-b
  addresses: {tags: {allowlist: b}}
  instances: {tags: {node-group: b}}
`)
	h := newHarness(t, options{cfg: controller.Config{ReservedSets: file, Workers: 4}})
	a, b := h.reserve("allowlist", "a"), h.reserve("allowlist", "b")
	orphan := h.moto.AllocateOrphan(t, h.cluster)
	insts := h.moto.RunInstances(t, 4)
	h.tagInstances("node-group", "a", insts[0])
	h.tagInstances("node-group", "b", insts[1])
	h.tagInstances("node-group", "c", insts[2], insts[3])
	na, nb, nc := h.nodeName("a"), h.nodeName("b"), h.nodeName("c")
	// b's Node joins first: it must still not take a's address.
	h.createNode(nb, insts[1], true)
	h.createNode(na, insts[0], true)
	h.createNode(nc, insts[2], true)
	for node, w := range map[string]struct {
		inst ec2test.Instance
		addr types.Address
	}{na: {insts[0], a}, nb: {insts[1], b}, nc: {insts[2], orphan}} {
		if got := h.waitAssigned(node, w.inst, 30*time.Second); aws.ToString(got.AllocationId) != aws.ToString(w.addr.AllocationId) {
			t.Errorf("node %s got %s, want %s", node, aws.ToString(got.AllocationId), aws.ToString(w.addr.AllocationId))
		}
	}
	nd := h.nodeName("d")
	h.createNode(nd, insts[3], true)
	if st := h.waitState(nd, controller.StateWaiting); !strings.Contains(st.Message, "otherNodes: none") {
		t.Errorf("waiting message %q does not say why", st.Message)
	}
	if v := testenv.MetricValue(t, h.reg, "ipledger_eipd_nodes_waiting", map[string]string{"reserved_set": ""}); v != 1 {
		t.Errorf("ipledger_eipd_nodes_waiting{} = %v, want 1", v)
	}
	if n := h.proxy.Count("AllocateAddress"); n != 0 {
		t.Errorf("AllocateAddress sent %d times, want 0", n)
	}
}

// A throttling storm over a burst of Nodes and a set of as many addresses:
// every Node ends with exactly one address of the set, none shared, none
// allocated.
func TestReservedSetUnderAThrottlingStorm(t *testing.T) {
	t.Parallel()
	file := reservedSets(t, "sets:\n- name: storm\n  addresses: {tags: {allowlist: storm}}\n")
	h := newHarness(t, options{maxAttempts: 2, cfg: controller.Config{ReservedSets: file, Workers: 4}})
	const n = 4
	set := map[string]bool{}
	for range n {
		set[aws.ToString(h.reserve("allowlist", "storm").PublicIp)] = true
	}
	insts := h.moto.RunInstances(t, n)
	h.proxy.Inject("", faultproxy.Throttle, faultproxy.Forever)
	for i := range n {
		h.createNode(h.nodeName(fmt.Sprint(i)), insts[i], true)
	}
	// 16 refusals take 4 retries of each Node, whose waits double: on two
	// cores busy with the rest of the suite 30 s reached 15 (CI, stop 47).
	testenv.Eventually(t, 90*time.Second, func() error {
		if f := h.proxy.TotalFaults(); f < 4*n {
			return fmt.Errorf("%d requests throttled so far", f)
		}
		return nil
	})
	h.proxy.Clear()
	seen := map[string]string{}
	for i := range n {
		node := h.nodeName(fmt.Sprint(i))
		ip := aws.ToString(h.waitAssigned(node, insts[i], 60*time.Second).PublicIp)
		if !set[ip] {
			t.Errorf("node %s got %s, not an address of the set", node, ip)
		}
		if other, dup := seen[ip]; dup {
			t.Errorf("nodes %s and %s share %s", other, node, ip)
		}
		seen[ip] = node
	}
	t.Logf("%d requests throttled; %d DescribeAddresses in all", h.proxy.TotalFaults(), h.proxy.Count("DescribeAddresses"))
	if c := h.proxy.Count("AllocateAddress"); c != 0 {
		t.Errorf("AllocateAddress sent %d times, want 0", c)
	}
}

// The startup taint comes off only once the address is associated and
// published — not while association fails, not across a restart of eipd in
// between — and then it does.
func TestStartupTaintRemovedOnlyOnceTheAddressIsOn(t *testing.T) {
	t.Parallel()
	h := newHarness(t, options{})
	inst := h.moto.RunInstance(t)
	node := h.nodeName("tainted")
	h.proxy.Inject("AssociateAddress", faultproxy.ServerError, faultproxy.Forever)
	h.createOptedIn(node, inst, corev1.NodeSpec{Taints: []corev1.Taint{
		{Key: "example.com/other", Effect: corev1.TaintEffectNoSchedule},
		{Key: controller.DefaultStartupTaint, Effect: corev1.TaintEffectNoSchedule},
	}})
	testenv.Eventually(t, 30*time.Second, func() error {
		if f := h.proxy.Faults("AssociateAddress"); f < 2 {
			return fmt.Errorf("%d failed associations so far", f)
		}
		return nil
	})
	h.restart()
	// The new process tries again, and fails again.
	failed := h.proxy.Faults("AssociateAddress")
	testenv.Eventually(t, 30*time.Second, func() error {
		if f := h.proxy.Faults("AssociateAddress"); f <= failed {
			return fmt.Errorf("the restarted eipd has not tried to associate yet")
		}
		return nil
	})
	if n := h.getNode(node); !hasTaint(n, controller.DefaultStartupTaint) {
		t.Fatalf("startup taint removed while the address was never associated: %v", n.Spec.Taints)
	}
	h.proxy.Clear()
	a := h.waitAssigned(node, inst, 30*time.Second)
	testenv.Eventually(t, 30*time.Second, func() error {
		if n := h.getNode(node); hasTaint(n, controller.DefaultStartupTaint) {
			return fmt.Errorf("node %s still carries %s", node, controller.DefaultStartupTaint)
		}
		return nil
	})
	n := h.getNode(node)
	// (The API server adds node.kubernetes.io/not-ready at creation.)
	if !hasTaint(n, "example.com/other") {
		t.Errorf("taints %v: only eipd's may go", n.Spec.Taints)
	}
	if n.Labels[controller.LabelExternalIP] != aws.ToString(a.PublicIp) {
		t.Errorf("taint gone, label %q, want %s", n.Labels[controller.LabelExternalIP], aws.ToString(a.PublicIp))
	}
	h.waitEvent(node, controller.ReasonTaintLifted)
	if v := testenv.MetricValue(t, h.reg, "ipledger_eipd_startup_taints_removed_total", nil); v != 1 {
		t.Errorf("ipledger_eipd_startup_taints_removed_total = %v, want 1", v)
	}
}

// A cordoned Node (being drained) takes no new address; uncordoned it
// does, and cordoned again it keeps it.
func TestCordonedNodeTakesNoNewAddressButKeepsItsOwn(t *testing.T) {
	t.Parallel()
	h := newHarness(t, options{})
	inst := h.moto.RunInstance(t)
	node := h.nodeName("cordoned")
	h.createOptedIn(node, inst, corev1.NodeSpec{Unschedulable: true})
	if st := h.waitState(node, controller.StatePending); !strings.Contains(st.Message, "cordoned") {
		t.Fatalf("state %+v, want Pending: cordoned", st)
	}
	if n := h.proxy.Count("AllocateAddress"); n != 0 {
		t.Fatalf("AllocateAddress sent %d times for a cordoned Node", n)
	}
	cordon := func(on bool) {
		t.Helper()
		patch := fmt.Sprintf(`{"spec":{"unschedulable":%v}}`, on)
		if _, err := h.env.Client.CoreV1().Nodes().Patch(h.ctx(), node, k8stypes.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	cordon(false)
	a := h.waitAssigned(node, inst, 30*time.Second)
	syncs := func() float64 {
		return testenv.MetricValue(t, h.reg, "ipledger_eipd_node_syncs_total", map[string]string{"result": "ok"})
	}
	before := syncs()
	cordon(true) // an update the Node's sync hears of
	testenv.Eventually(t, 30*time.Second, func() error {
		if s, _ := h.ctrl.Status().Get(node); s.State != controller.StateAssociated || syncs() <= before {
			return fmt.Errorf("state %+v, %v syncs since the cordon", s, syncs()-before)
		}
		return nil
	})
	if got := h.waitAssigned(node, inst, 30*time.Second); aws.ToString(got.AllocationId) != aws.ToString(a.AllocationId) {
		t.Fatalf("cordoned Node now has %s, had %s", aws.ToString(got.AllocationId), aws.ToString(a.AllocationId))
	}
	if n := h.proxy.Count("DisassociateAddress") + h.proxy.Count("ReleaseAddress"); n != 0 {
		t.Errorf("%d Disassociate/Release calls for a cordoned Node, want 0", n)
	}
}

// With --public-ipv4-pool, AllocateAddress names the pool (moto does not
// model BYOIP pools: the proxy shows what was sent).
func TestAllocationNamesThePublicIPv4Pool(t *testing.T) {
	t.Parallel()
	const pool = "ipv4pool-ec2-0123456789abcdef0"
	h := newHarness(t, options{publicIPv4Pool: pool})
	inst := h.moto.RunInstance(t)
	h.createNode(h.nodeName("byoip"), inst, true)
	testenv.Eventually(t, 30*time.Second, func() error {
		sent := h.proxy.Params("AllocateAddress")
		if len(sent) == 0 {
			return fmt.Errorf("no AllocateAddress yet")
		}
		for _, p := range sent {
			if got := p.Get("PublicIpv4Pool"); got != pool {
				return fmt.Errorf("AllocateAddress sent PublicIpv4Pool=%q, want %s", got, pool)
			}
		}
		return nil
	})
}

// createOptedIn creates a Node the operator opted in, backed by inst (tagged
// for the cluster), with spec (its providerID set here).
func (h *harness) createOptedIn(name string, inst ec2test.Instance, spec corev1.NodeSpec) {
	h.t.Helper()
	h.moto.TagForCluster(h.t, h.cluster, inst)
	spec.ProviderID = inst.ProviderID()
	h.createNodeWith(&corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{controller.LabelOptIn: "true"}},
		Spec:       spec,
		Status:     corev1.NodeStatus{Addresses: inst.NodeAddresses()},
	})
}

func (h *harness) getNode(name string) *corev1.Node {
	h.t.Helper()
	n, err := h.env.Client.CoreV1().Nodes().Get(h.ctx(), name, metav1.GetOptions{})
	if err != nil {
		h.t.Fatal(err)
	}
	return n
}

func hasTaint(n *corev1.Node, key string) bool {
	return slices.ContainsFunc(n.Spec.Taints, func(t corev1.Taint) bool { return t.Key == key })
}
