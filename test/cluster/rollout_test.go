package cluster_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestRolloutRestartUnderLoad: `kubectl rollout restart` of every
// Deployment at once, at the high-availability replica counts, while
// Services pour in: never fewer healthy pods than a PodDisruptionBudget
// allows, no address on two Services, none lost or moved, every new Service
// served.
func TestRolloutRestartUnderLoad(t *testing.T) {
	e := get(t)
	for _, d := range deployments {
		e.scale(t, d, highAvailability[d])
	}
	l := e.startLoad(t, 50*time.Millisecond, 1000)
	l.waitCreated(t, 40)
	before := e.ips(t, l.ns, l.created(), 2*time.Minute)

	dups := e.watchDuplicates()
	budgets := sample(e.budgetsBreached)
	e.kubectl(t, "-n", systemNS, "rollout", "restart", "deploy")
	for _, d := range deployments {
		e.rolledOut(t, d)
	}
	budgets.check(t, "disruption budgets")
	after := e.ips(t, l.ns, l.stop(t), 2*time.Minute)
	dups.check(t, "addresses on two Services")
	for name, ip := range before {
		if after[name] != ip {
			t.Errorf("Service %s/%s had %s before the restart, %q after", l.ns, name, ip, after[name])
		}
	}
	e.consistent(t, "")
}

// highAvailability are the replicas of components/high-availability.
var highAvailability = map[string]int{"ipledger-watcher": 3, "ipledger-ipam": 2, "ipledger-endpoints": 2, "ipledger-eipd": 2}

// budgetsBreached compares every PodDisruptionBudget of ipledger-system
// with what it covers: its own status, and the Ready pods not terminating
// against the Deployment's replicas less maxUnavailable.
func (e *env) budgetsBreached(ctx context.Context) []string {
	pdbs, err := e.client.PolicyV1().PodDisruptionBudgets(systemNS).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil
	}
	var found []string
	for _, pdb := range pdbs.Items {
		if pdb.Status.CurrentHealthy < pdb.Status.DesiredHealthy {
			found = append(found, fmt.Sprintf("PDB %s: %d healthy, %d desired", pdb.Name, pdb.Status.CurrentHealthy, pdb.Status.DesiredHealthy))
		}
		d, err := e.client.AppsV1().Deployments(systemNS).Get(ctx, pdb.Name, metav1.GetOptions{})
		if err != nil || pdb.Spec.MaxUnavailable == nil {
			continue
		}
		pods, err := e.client.CoreV1().Pods(systemNS).List(ctx, metav1.ListOptions{LabelSelector: metav1.FormatLabelSelector(pdb.Spec.Selector)})
		if err != nil {
			continue
		}
		ready := 0
		for _, p := range pods.Items {
			if p.DeletionTimestamp == nil && podReady(p) {
				ready++
			}
		}
		if want := int(*d.Spec.Replicas) - pdb.Spec.MaxUnavailable.IntValue(); ready < want {
			found = append(found, fmt.Sprintf("%s: %d Ready pods, the budget wants %d", pdb.Name, ready, want))
		}
	}
	return found
}
