package app_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"

	"github.com/ipledger/ipledger/lab/ec2test"
	"github.com/ipledger/ipledger/lab/testenv"
	"github.com/ipledger/ipledger/services/eipd/internal/decide"
)

// TestTwoClustersShareOneAccount runs two clusters — two API servers, two
// watchers, two eipd with different --cluster-id — against one moto (one AWS
// account). Each deletes one of its Nodes and sweeps several times; neither
// disassociates, releases or re-tags an address of the other, and each
// releases exactly its own Node's address.
func TestTwoClustersShareOneAccount(t *testing.T) {
	envA, envB := testenv.Get(t), testenv.Another(t)
	clusterA, lease, prefix := names(t)
	clusterB := clusterA + "-b" // shares A's ID as a prefix: matching must be exact
	moto := ec2test.Get(t)
	insts := moto.RunInstances(t, 4)
	a := startReplica(t, envA, startWatcher(t, envA), "a", replicaOpts{cluster: clusterA, lease: lease, minInterval: time.Second, requeue: time.Second})
	b := startReplica(t, envB, startWatcher(t, envB), "b", replicaOpts{cluster: clusterB, lease: lease, minInterval: time.Second, requeue: time.Second})
	type node struct {
		env     *testenv.Env
		cluster string
		name    string
		inst    ec2test.Instance
		alloc   string
	}
	nodes := []*node{
		{envA, clusterA, prefix + "-a1", insts[0], ""}, {envA, clusterA, prefix + "-a2", insts[1], ""},
		{envB, clusterB, prefix + "-b1", insts[2], ""}, {envB, clusterB, prefix + "-b2", insts[3], ""},
	}
	for _, n := range nodes {
		createNode(t, n.env, n.cluster, n.name, n.inst)
	}
	for _, n := range nodes {
		n.alloc = waitAssigned(t, n.env, n.cluster, n.name, n.inst, 60*time.Second)
	}

	deleteNode(t, envA, nodes[0].name)
	deleteNode(t, envB, nodes[2].name)
	sweeps := func(r *replica) float64 {
		return testenv.MetricValue(t, r.Registry, "ipledger_eipd_sweeps_total", map[string]string{"result": "ok"})
	}
	fromA, fromB := sweeps(a), sweeps(b)
	testenv.Eventually(t, 60*time.Second, func() error {
		if len(addressesFor(t, clusterA, nodes[0].name))+len(addressesFor(t, clusterB, nodes[2].name)) > 0 {
			return fmt.Errorf("the deleted Nodes' addresses are still allocated")
		}
		if sweeps(a) < fromA+3 || sweeps(b) < fromB+3 {
			return fmt.Errorf("sweeps since the deletes: a %v, b %v; want 3 each", sweeps(a)-fromA, sweeps(b)-fromB)
		}
		return nil
	})

	// The survivors are exactly as their own eipd left them.
	for _, n := range []*node{nodes[1], nodes[3]} {
		var found bool
		for _, addr := range moto.Addresses(t, n.cluster) {
			if aws.ToString(addr.AllocationId) != n.alloc {
				continue
			}
			found = true
			if got := ec2test.Tag(addr.Tags, decide.TagNode); got != n.name {
				t.Errorf("%s's address is tagged for node %q", n.name, got)
			}
			if aws.ToString(addr.NetworkInterfaceId) != n.inst.NetworkInterfaceID || aws.ToString(addr.AssociationId) == "" {
				t.Errorf("%s's address is associated with %q, want %s", n.name, aws.ToString(addr.NetworkInterfaceId), n.inst.NetworkInterfaceID)
			}
		}
		if !found {
			t.Errorf("%s's address %s (cluster %s) is gone", n.name, n.alloc, n.cluster)
		}
	}
	for name, r := range map[string]*replica{"a": a, "b": b} {
		for _, action := range []string{"ReleaseAddress", "DisassociateAddress"} {
			if got := r.proxy.Count(action); got != 1 {
				t.Errorf("eipd %s sent %s %d times, want 1 (its own deleted Node's address only)", name, action, got)
			}
		}
	}
}
