package app

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/rest"

	"github.com/ipledger/ipledger/lab/testenv"
	"github.com/ipledger/ipledger/pkg/convert"
	watcherv1 "github.com/ipledger/ipledger/proto/ipledger/watcher/v1"
)

// TestEveryKindIsServedWithItsServerSideFilter creates objects of every kind,
// some outside the watcher's selectors, and checks what a snapshot holds.
func TestEveryKindIsServedWithItsServerSideFilter(t *testing.T) {
	env := testenv.Get(t)
	ctx := context.Background()
	ns := env.Namespace(t, nil)
	must := func(_ any, err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	pod := func(name string, labels map[string]string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: labels},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "x"}}}}
	}
	must(env.Client.CoreV1().Pods(ns).Create(ctx, pod("labelled", map[string]string{"ipledger.io/externalip": "198.51.100.7"}), metav1.CreateOptions{}))
	must(env.Client.CoreV1().Pods(ns).Create(ctx, pod("plain", nil), metav1.CreateOptions{}))
	slice := func(name, manager string) *discoveryv1.EndpointSlice {
		return &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name,
			Labels: map[string]string{"endpointslice.kubernetes.io/managed-by": manager, "kubernetes.io/service-name": "web"}},
			AddressType: discoveryv1.AddressTypeIPv4, Endpoints: []discoveryv1.Endpoint{{Addresses: []string{"192.0.2.9"}}}}
	}
	must(env.Client.DiscoveryV1().EndpointSlices(ns).Create(ctx, slice("ours", "endpoints.ipledger.io"), metav1.CreateOptions{}))
	must(env.Client.DiscoveryV1().EndpointSlices(ns).Create(ctx, slice("theirs", "endpointslice-controller.k8s.io"), metav1.CreateOptions{}))
	ledgerName := "ledger-" + ns
	must(env.Client.CoreV1().ConfigMaps(testenv.SystemNamespace).Create(ctx, &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: ledgerName, Labels: map[string]string{"ipledger.io/ledger": "true"}},
		Data:       map[string]string{"format": "v1"}}, metav1.CreateOptions{}))
	t.Cleanup(func() {
		env.Client.CoreV1().ConfigMaps(testenv.SystemNamespace).Delete(ctx, ledgerName, metav1.DeleteOptions{})
	})
	must(env.Client.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "not-a-ledger", Labels: map[string]string{"ipledger.io/ledger": "true"}}}, metav1.CreateOptions{}))
	poolName := "pool-" + ns
	must(env.Dynamic.Resource(convert.IPPoolResource).Create(ctx, &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "ipledger.io/v1alpha1", "kind": "IPPool", "metadata": map[string]any{"name": poolName},
		"spec": map[string]any{"addresses": []any{"203.0.113.0/28"}}}}, metav1.CreateOptions{}))
	t.Cleanup(func() { env.Dynamic.Resource(convert.IPPoolResource).Delete(ctx, poolName, metav1.DeleteOptions{}) })
	must(env.Dynamic.Resource(convert.ExternalWorkloadResource).Namespace(ns).Create(ctx, &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "ipledger.io/v1alpha1", "kind": "ExternalWorkload", "metadata": map[string]any{"name": "vm1", "namespace": ns},
		"spec": map[string]any{"workloadIPs": []any{map[string]any{"ip": "192.0.2.50"}}, "ports": []any{map[string]any{"port": int64(80)}}}}},
		metav1.CreateOptions{}))

	// The cluster's own networks: a Node's Pod ranges, the API server's
	// slice (the test API server runs no endpoint reconciler: written here),
	// and the ServiceCIDR the API server makes of its range.
	nodeName := "node-" + ns
	must(env.Client.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: nodeName},
		Spec: corev1.NodeSpec{PodCIDR: "10.244.7.0/24", PodCIDRs: []string{"10.244.7.0/24", "fd00:244:7::/64"}}}, metav1.CreateOptions{}))
	t.Cleanup(func() { env.Client.CoreV1().Nodes().Delete(ctx, nodeName, metav1.DeleteOptions{}) })
	apiSlice := slice("kubernetes-"+ns, "")
	apiSlice.Namespace, apiSlice.Labels = metav1.NamespaceDefault, map[string]string{"kubernetes.io/service-name": "kubernetes"}
	must(env.Client.DiscoveryV1().EndpointSlices(metav1.NamespaceDefault).Create(ctx, apiSlice, metav1.CreateOptions{}))
	t.Cleanup(func() {
		env.Client.DiscoveryV1().EndpointSlices(metav1.NamespaceDefault).Delete(ctx, apiSlice.Name, metav1.DeleteOptions{})
	})
	otherSlice := slice("not-the-api-server-"+ns, "endpointslice-controller.k8s.io")
	otherSlice.Namespace = metav1.NamespaceDefault
	must(env.Client.DiscoveryV1().EndpointSlices(metav1.NamespaceDefault).Create(ctx, otherSlice, metav1.CreateOptions{}))
	t.Cleanup(func() {
		env.Client.DiscoveryV1().EndpointSlices(metav1.NamespaceDefault).Delete(ctx, otherSlice.Name, metav1.DeleteOptions{})
	})

	// Cilium's L2 announcement Leases, in Cilium's namespace only: not the
	// namespace's other Leases, nor one of that name elsewhere.
	lease := func(ns, name string) *coordinationv1.Lease {
		holder, secs := "n1", int32(15)
		return &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: &holder, LeaseDurationSeconds: &secs, RenewTime: &metav1.MicroTime{Time: time.Unix(1700000000, 0)}}}
	}
	ciliumNS := env.Namespace(t, nil)
	must(env.Client.CoordinationV1().Leases(ciliumNS).Create(ctx, lease(ciliumNS, "cilium-l2announce-shop-web"), metav1.CreateOptions{}))
	must(env.Client.CoordinationV1().Leases(ciliumNS).Create(ctx, lease(ciliumNS, "kube-scheduler"), metav1.CreateOptions{}))
	must(env.Client.CoordinationV1().Leases(ns).Create(ctx, lease(ns, "cilium-l2announce-shop-db"), metav1.CreateOptions{}))

	w, _ := startWatcher(t, env, func(c *Config) { c.CiliumNamespace = ciliumNS })
	s := watch(t, dial(t, w.Addr().String(), subscriberToken(t, env)), &watcherv1.WatchRequest{Kinds: []watcherv1.Kind{
		watcherv1.Kind_KIND_POD, watcherv1.Kind_KIND_ENDPOINT_SLICE, watcherv1.Kind_KIND_LEDGER_CONFIG_MAP,
		watcherv1.Kind_KIND_IP_POOL, watcherv1.Kind_KIND_EXTERNAL_WORKLOAD, watcherv1.Kind_KIND_NAMESPACE,
		watcherv1.Kind_KIND_NODE, watcherv1.Kind_KIND_SERVICE_CIDR, watcherv1.Kind_KIND_KUBERNETES_ENDPOINT_SLICE,
		watcherv1.Kind_KIND_CILIUM_L2_ANNOUNCEMENT_LEASE}})
	snap, _ := s.untilSynced(t)
	got := map[string]*watcherv1.Object{}
	for _, ev := range snap {
		o := ev.GetObject()
		got[fmt.Sprintf("%v %s/%s", o.GetKind(), o.GetMeta().GetNamespace(), o.GetMeta().GetName())] = o
	}
	for _, want := range []string{
		"KIND_POD " + ns + "/labelled", "KIND_ENDPOINT_SLICE " + ns + "/ours", "KIND_LEDGER_CONFIG_MAP " + testenv.SystemNamespace + "/" + ledgerName,
		"KIND_IP_POOL /" + poolName, "KIND_EXTERNAL_WORKLOAD " + ns + "/vm1", "KIND_NAMESPACE /" + ns,
		"KIND_NODE /" + nodeName, "KIND_SERVICE_CIDR /kubernetes", "KIND_KUBERNETES_ENDPOINT_SLICE default/" + apiSlice.Name,
		"KIND_CILIUM_L2_ANNOUNCEMENT_LEASE " + ciliumNS + "/cilium-l2announce-shop-web",
	} {
		if got[want] == nil {
			t.Errorf("snapshot lacks %s", want)
		}
	}
	for _, unwanted := range []string{"KIND_POD " + ns + "/plain", "KIND_ENDPOINT_SLICE " + ns + "/theirs", "KIND_LEDGER_CONFIG_MAP " + ns + "/not-a-ledger",
		"KIND_KUBERNETES_ENDPOINT_SLICE default/" + otherSlice.Name, "KIND_ENDPOINT_SLICE default/" + apiSlice.Name,
		"KIND_CILIUM_L2_ANNOUNCEMENT_LEASE " + ciliumNS + "/kube-scheduler", "KIND_CILIUM_L2_ANNOUNCEMENT_LEASE " + ns + "/cilium-l2announce-shop-db"} {
		if got[unwanted] != nil {
			t.Errorf("snapshot holds %s, outside the watcher's selectors", unwanted)
		}
	}
	if p := got["KIND_IP_POOL /"+poolName].GetIpPool(); len(p.GetAddresses()) != 1 || !p.GetAutoAssign() {
		t.Errorf("IPPool body %v", p)
	}
	if n := got["KIND_NODE /"+nodeName].GetNode(); !slices.Equal(n.GetPodCidrs(), []string{"10.244.7.0/24", "fd00:244:7::/64"}) {
		t.Errorf("Node body %v, want both Pod ranges", n)
	}
	if c := got["KIND_SERVICE_CIDR /kubernetes"].GetServiceCidr(); !slices.Contains(c.GetCidrs(), "10.96.0.0/12") {
		t.Errorf("ServiceCIDR body %v, want the API server's 10.96.0.0/12", c)
	}
	if e := got["KIND_KUBERNETES_ENDPOINT_SLICE default/"+apiSlice.Name].GetEndpointSlice(); len(e.GetEndpoints()) != 1 {
		t.Errorf("the API server's slice body %v", e)
	}
	if l := got["KIND_CILIUM_L2_ANNOUNCEMENT_LEASE "+ciliumNS+"/cilium-l2announce-shop-web"].GetLease(); l.GetHolderIdentity() != "n1" ||
		l.GetLeaseDurationSeconds() != 15 || l.GetRenewTime() != time.Unix(1700000000, 0).UnixNano() {
		t.Errorf("Lease body %v", l)
	}
	if e := got["KIND_EXTERNAL_WORKLOAD "+ns+"/vm1"].GetExternalWorkload(); len(e.GetWorkloadIps()) != 1 || e.GetPorts()[0].GetProtocol() != "TCP" {
		t.Errorf("ExternalWorkload body %v", e)
	}
}

// TestCiliumLeasesWithoutTheirRoleLeaveTheWatcherSynced: the watcher, as its
// ServiceAccount, told to read Cilium's Leases in a namespace where no Role
// lets it (an overlay that moved the base's kube-system Role) still syncs,
// and serves the kind empty, instead of listing in vain forever and holding
// every consumer unsynced.
func TestCiliumLeasesWithoutTheirRoleLeaveTheWatcherSynced(t *testing.T) {
	env := testenv.Get(t)
	elsewhere := env.Namespace(t, nil)
	rc := rest.CopyConfig(env.Config)
	rc.Impersonate = rest.ImpersonationConfig{
		UserName: "system:serviceaccount:" + testenv.SystemNamespace + ":ipledger-watcher",
		Groups:   []string{"system:serviceaccounts", "system:serviceaccounts:" + testenv.SystemNamespace, "system:authenticated"},
	}
	w, _ := startWatcherAs(t, env, rc, func(c *Config) { c.CiliumNamespace = elsewhere })
	s := watch(t, dial(t, w.Addr().String(), subscriberToken(t, env)), &watcherv1.WatchRequest{Kinds: []watcherv1.Kind{
		watcherv1.Kind_KIND_CILIUM_L2_ANNOUNCEMENT_LEASE}})
	if snap, _ := s.untilSynced(t); len(snap) != 0 {
		t.Errorf("%d Leases streamed from %s, where the watcher may not read them", len(snap), elsewhere)
	}
}
