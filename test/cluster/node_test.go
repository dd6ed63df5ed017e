package cluster_test

import (
	"context"
	"os/exec"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ipledger/ipledger/lab/cluster"
)

// TestUpAgainKeepsTheNode: Up on a node that is up returns it as it is —
// same etcd, same pods — instead of starting another.
func TestUpAgainKeepsTheNode(t *testing.T) {
	e := get(t)
	ctx := context.Background()
	ns := e.namespace(t)
	marker, err := e.client.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "marker"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	dns, err := e.client.CoreV1().Pods("kube-system").List(ctx, metav1.ListOptions{LabelSelector: "k8s-app=kube-dns"})
	if err != nil || len(dns.Items) != 1 {
		t.Fatalf("CoreDNS pods: %v (%v)", dns, err)
	}
	start := time.Now()
	again, err := cluster.Up(ctx, cluster.Options{Dir: e.node.Dir, ToolsBin: e.node.ToolsBin, NodeBin: e.node.NodeBin, NodeIP: e.node.NodeIP})
	if err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("Up on a node that is up took %s: it should only check it", took)
	}
	if again.APIServerURL != e.node.APIServerURL || again.KubeconfigPath != e.node.KubeconfigPath {
		t.Errorf("Up again returned %s (%s), want the node at %s (%s)", again.APIServerURL, again.KubeconfigPath, e.node.APIServerURL, e.node.KubeconfigPath)
	}
	got, err := e.client.CoreV1().ConfigMaps(ns).Get(ctx, "marker", metav1.GetOptions{})
	if err != nil || got.UID != marker.UID {
		t.Errorf("the ConfigMap created before Up again is gone or new (%v): etcd was replaced", err)
	}
	after, err := e.client.CoreV1().Pods("kube-system").List(ctx, metav1.ListOptions{LabelSelector: "k8s-app=kube-dns"})
	if err != nil || len(after.Items) != 1 || after.Items[0].UID != dns.Items[0].UID || after.Items[0].Status.ContainerStatuses[0].RestartCount != 0 {
		t.Errorf("CoreDNS after Up again: %v (%v), want pod %s untouched", after, err, dns.Items[0].Name)
	}
}

// TestTestAddressesStayOnTheMachine: every address the tests hand out — a
// journey pool's, a scenario pool's, an ExternalWorkload's — is refused by
// this machine's routing (cluster.TestRanges) instead of following the
// default route off it, while the pods' network still routes to the bridge.
func TestTestAddressesStayOnTheMachine(t *testing.T) {
	for _, ip := range []string{"10.101.0.1", "10.199.255.254", "10.201.0.1", "10.255.3.255", "10.21.0.1"} {
		out, err := exec.Command("ip", "route", "get", ip).CombinedOutput()
		// An unreachable route: `ip route get` fails ("No route to host")
		// where a routable address names a device.
		if err == nil || strings.Contains(string(out), " dev ") {
			t.Errorf("ip route get %s = %q (%v): a packet to it would leave the machine", ip, strings.TrimSpace(string(out)), err)
		}
	}
	pods, err := exec.Command("ip", "route", "get", "10.244.0.10").CombinedOutput()
	if err != nil || !strings.Contains(string(pods), "dev "+cluster.Bridge) {
		t.Errorf("ip route get 10.244.0.10 = %q (%v), want it on the bridge %s", pods, err, cluster.Bridge)
	}
}
