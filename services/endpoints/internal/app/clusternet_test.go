package app_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"

	"github.com/ipledger/ipledger/lab/testenv"
	"github.com/ipledger/ipledger/services/endpoints/internal/clusternet"
	"github.com/ipledger/ipledger/services/endpoints/internal/controller"
	"github.com/ipledger/ipledger/services/endpoints/internal/grants"
)

// A tenant's workloads at the cluster's own addresses — the API server's
// ClusterIP, an address in a Node's Pod range, a kubelet's address, the API
// server's own address — never enter the tenant's slices (issue 47 §1):
// otherwise the public address ipam gave the tenant would front the cluster.
// A Node that joins later with a Pod range takes the workloads in it out of
// the slices. Real API server, real watcher binary.
func TestClusterOwnAddressesNeverEnterASlice(t *testing.T) {
	env := testenv.Get(t)
	ctx := context.Background()
	ns := env.Namespace(t, nil)
	k8s, err := env.Client.CoreV1().Services(metav1.NamespaceDefault).Get(ctx, "kubernetes", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	createNode(t, env, "ep-clusternet-1-"+ns, "198.18.0.0/24", "198.18.1.10")
	// The test API server runs without an endpoint reconciler: write the
	// slice of default/kubernetes a real one keeps.
	apiSlice := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Name: "kubernetes-" + ns, Namespace: metav1.NamespaceDefault,
			Labels: map[string]string{discoveryv1.LabelServiceName: "kubernetes"}},
		AddressType: discoveryv1.AddressTypeIPv4, Endpoints: []discoveryv1.Endpoint{{Addresses: []string{"198.18.2.1"}}},
	}
	if _, err := env.Client.DiscoveryV1().EndpointSlices(metav1.NamespaceDefault).Create(ctx, apiSlice, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = env.Client.DiscoveryV1().EndpointSlices(metav1.NamespaceDefault).Delete(context.Background(), apiSlice.Name, metav1.DeleteOptions{})
	})

	createService(t, env, ns, "web", svcSpec{})
	for name, ip := range map[string]string{
		"at-cluster-ip": k8s.Spec.ClusterIP, "in-pod-range": "198.18.0.7", "at-kubelet": "198.18.1.10",
		"at-api-server": "198.18.2.1", "vm": "192.0.2.77", "joins-later": "198.18.3.5",
	} {
		createWorkload(t, env, ns, name, wlSpec{app: "web", ips: []string{ip}, ready: true})
	}
	r := startReplica(t, env, startWatcher(t, env), "a", replicaOpts{lease: leaseName(t)})

	wantOnly := func(names ...string) {
		t.Helper()
		got := waitSlices(t, env, ns, "web", 1, len(names))
		for i, e := range got[0].Endpoints {
			if e.TargetRef == nil || !slices.Contains(names, e.TargetRef.Name) {
				t.Fatalf("endpoint %d is %+v, want only %v", i, e.TargetRef, names)
			}
		}
	}
	wantOnly("vm", "joins-later")
	testenv.Eventually(t, 30*time.Second, func() error {
		for _, reason := range []string{clusternet.ReasonServiceCIDR, clusternet.ReasonPodCIDR, clusternet.ReasonNodeAddress, clusternet.ReasonAPIServer} {
			if v := testutil.ToFloat64(r.Controller.Metrics.WorkloadsRefused.WithLabelValues(reason)); v != 1 {
				return fmt.Errorf("ipledger_endpoints_workloads_refused{reason=%q} = %v, want 1", reason, v)
			}
		}
		return nil
	})
	waitAddressAccepted(t, env, ns, "in-pod-range", metav1.ConditionFalse, controller.ReasonClusterAddress, "198.18.0.7", "Pod range 198.18.0.0/24", "Node ep-clusternet-1-"+ns)
	waitEvent(t, env, ns, "in-pod-range", controller.ReasonClusterAddress, "198.18.0.7")

	// A Node joins with a Pod range holding a workload already in the slice.
	createNode(t, env, "ep-clusternet-2-"+ns, "198.18.3.0/24", "198.18.4.10")
	wantOnly("vm")
}

func createNode(t *testing.T, env *testenv.Env, name, podCIDR, internalIP string) {
	t.Helper()
	ctx := context.Background()
	n, err := env.Client.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.NodeSpec{PodCIDR: podCIDR, PodCIDRs: []string{podCIDR}}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Client.CoreV1().Nodes().Delete(context.Background(), name, metav1.DeleteOptions{}) })
	n.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: internalIP}}
	if _, err := env.Client.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func containsAll(s string, parts ...string) bool {
	for _, p := range parts {
		if !strings.Contains(s, p) {
			return false
		}
	}
	return true
}

// TestWorkloadGrants: an operator grants a namespace its VMs' range; in
// report mode a workload outside it is served and says it would be refused,
// enforced it leaves the slice, and granting its address brings it back.
func TestWorkloadGrants(t *testing.T) {
	env := testenv.Get(t)
	ctx := context.Background()
	ns := env.Namespace(t, nil)
	annotate := func(value string) {
		t.Helper()
		patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, grants.Annotation, value)
		if _, err := env.Client.CoreV1().Namespaces().Patch(ctx, ns, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	annotate("192.0.2.0/24")
	createService(t, env, ns, "web", svcSpec{})
	createWorkload(t, env, ns, "granted", wlSpec{app: "web", ips: []string{"192.0.2.5"}, ready: true})
	createWorkload(t, env, ns, "team-as-db", wlSpec{app: "web", ips: []string{"198.51.100.5"}, ready: true})
	watcher := startWatcher(t, env)

	report := startReplica(t, env, watcher, "report", replicaOpts{lease: leaseName(t), grants: grants.Report})
	waitSlices(t, env, ns, "web", 1, 2)
	waitAddressAccepted(t, env, ns, "team-as-db", metav1.ConditionTrue, controller.ReasonNotGrantedReportOnly, "198.51.100.5", "--workload-grants=enforce", "192.0.2.0/24")
	// Every workload of the test API server outside its namespace's grants
	// counts (other tests' too): granting this one takes exactly one off.
	testenv.Eventually(t, 30*time.Second, func() error {
		if n := report.Controller.Pending(); n != 0 {
			return fmt.Errorf("%d Services pending", n)
		}
		return nil
	})
	reportOnly := report.Controller.Metrics.WorkloadsRefused.WithLabelValues("not-granted-report-only")
	before := testutil.ToFloat64(reportOnly)
	annotate("192.0.2.0/24,198.51.100.5")
	waitAddressAccepted(t, env, ns, "team-as-db", "", "")
	if after := testutil.ToFloat64(reportOnly); after != before-1 {
		t.Errorf("ipledger_endpoints_workloads_refused{reason=\"not-granted-report-only\"} went from %v to %v once granted, want one less", before, after)
	}
	annotate("192.0.2.0/24")
	report.stop()

	enforce := startReplica(t, env, watcher, "enforce", replicaOpts{lease: leaseName(t), grants: grants.Enforce})
	got := waitSlices(t, env, ns, "web", 1, 1)
	if name := got[0].Endpoints[0].TargetRef.Name; name != "granted" {
		t.Fatalf("the slice holds %s, want only the granted workload", name)
	}
	waitAddressAccepted(t, env, ns, "team-as-db", metav1.ConditionFalse, controller.ReasonNotGranted, "198.51.100.5")
	waitEvent(t, env, ns, "team-as-db", controller.ReasonNotGranted, "198.51.100.5")

	annotate("192.0.2.0/24,198.51.100.5")
	waitSlices(t, env, ns, "web", 1, 2)
	waitAddressAccepted(t, env, ns, "team-as-db", "", "")

	// Report and enforce judged every workload of the API server, other
	// tests' too: grants off again removes what they wrote, so that the
	// next tests' replicas have no conditions to take back.
	enforce.stop()
	off := startReplica(t, env, watcher, "off", replicaOpts{lease: leaseName(t)})
	testenv.Eventually(t, 60*time.Second, func() error {
		list, err := env.Dynamic.Resource(workloadGVR).List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		for _, u := range list.Items {
			conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
			for _, c := range conds {
				if c, _ := c.(map[string]any); c["type"] == controller.ConditionAddressAccepted && strings.HasPrefix(fmt.Sprint(c["reason"]), "NotGranted") {
					return fmt.Errorf("%s/%s still says %v", u.GetNamespace(), u.GetName(), c["reason"])
				}
			}
		}
		return nil
	})
	off.stop()
}

// waitAddressAccepted waits until the workload's AddressAccepted condition
// has the status and reason and names every part ("" status: none).
func waitAddressAccepted(t *testing.T, env *testenv.Env, ns, name string, status metav1.ConditionStatus, reason string, parts ...string) {
	t.Helper()
	testenv.Eventually(t, 30*time.Second, func() error {
		u, err := env.Dynamic.Resource(workloadGVR).Namespace(ns).Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
		for _, c := range conds {
			c, _ := c.(map[string]any)
			if c["type"] != controller.ConditionAddressAccepted {
				continue
			}
			if status == "" {
				return fmt.Errorf("%s still has %v", name, c)
			}
			msg, _ := c["message"].(string)
			if c["status"] != string(status) || c["reason"] != reason || !containsAll(msg, parts...) {
				return fmt.Errorf("%s: %v, want %s %s naming %v", name, c, status, reason, parts)
			}
			return nil
		}
		if status != "" {
			return fmt.Errorf("%s has no %s condition", name, controller.ConditionAddressAccepted)
		}
		return nil
	})
}

// waitEvent waits for a Warning Event of that reason on the workload naming
// every part.
func waitEvent(t *testing.T, env *testenv.Env, ns, name, reason string, parts ...string) {
	t.Helper()
	testenv.Eventually(t, 30*time.Second, func() error {
		evs, err := env.Client.CoreV1().Events(ns).List(context.Background(), metav1.ListOptions{FieldSelector: "involvedObject.name=" + name + ",reason=" + reason})
		if err != nil {
			return err
		}
		for _, e := range evs.Items {
			if e.Type == corev1.EventTypeWarning && containsAll(e.Message, parts...) {
				return nil
			}
		}
		return fmt.Errorf("no %s Event on %s naming %v (%d of that reason)", reason, name, parts, len(evs.Items))
	})
}
