package cluster_test

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/ipledger/ipledger/lab/cluster"
	"github.com/ipledger/ipledger/lab/testenv"
)

// nodesPool is the IPPool of TestPodsAcrossNodes: inside cluster.TestRanges,
// apart from every other test's (10.180.0.0/26 upstream, 10.190.77.0/24 the
// LAN, 10.<100+n> and 10.<200+n> the journey's and the scenarios').
const nodesPool = "10.181.0.0/28"

// TestPodsAcrossNodes (IPLEDGER_NODES=2: make test-cluster-full): with a
// server and a client pod on each of two nodes, each client gets the answer
// of the server on the other node through the other's Service ClusterIP and
// at its pod address, and the server sees the client's own pod address (the
// CNI routes between the nodes, no NAT); the pods' addresses are in their
// nodes' pod CIDRs; and the LoadBalancer address ipam gives a Service whose
// only pod is on the second node carries a request from a pod on the first
// to it.
func TestPodsAcrossNodes(t *testing.T) {
	e := get(t)
	if len(e.node.Nodes) < 2 {
		t.Skip("one node: run with IPLEDGER_NODES=2 (make test-cluster-full) for pods on two nodes")
	}
	ctx := context.Background()
	nodes := e.node.Nodes[:2]
	for _, n := range nodes {
		got, err := e.client.CoreV1().Nodes().Get(ctx, n.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if !nodeReady(*got) || got.Spec.Unschedulable {
			t.Fatalf("node %s: Ready %v, unschedulable %v", n.Name, nodeReady(*got), got.Spec.Unschedulable)
		}
		if ip := internalIP(*got); ip != n.IP {
			t.Errorf("node %s's InternalIP is %q, want %s", n.Name, ip, n.IP)
		}
	}
	for _, n := range nodes {
		mem, err := e.node.NodeMemory(n.Name)
		if err != nil {
			t.Fatal(err)
		}
		var total int64
		var parts []string
		for _, d := range []string{"containerd", "kubelet", "kube-proxy"} {
			total += mem[d]
			parts = append(parts, fmt.Sprintf("%s %d MiB", d, mem[d]>>20))
		}
		t.Logf("node %s: containerd + kubelet + kube-proxy resident %d MiB (%s)", n.Name, total>>20, strings.Join(parts, ", "))
	}
	ns := e.namespace(t)
	servers := make([]corev1.Pod, 2)
	clients := make([]corev1.Pod, 2)
	for i, n := range nodes {
		name := fmt.Sprintf("server-%d", i+1)
		e.pinnedPod(t, ns, name, n.Name, []string{"netexec", "--http-port=8080"})
		e.clusterIP(t, ns, name)
		e.pinnedPod(t, ns, fmt.Sprintf("client-%d", i+1), n.Name, []string{"pause"})
	}
	for i, n := range nodes {
		servers[i] = e.runningOn(t, ns, fmt.Sprintf("server-%d", i+1), n)
		clients[i] = e.runningOn(t, ns, fmt.Sprintf("client-%d", i+1), n)
	}
	for from, to := range []int{1, 0} {
		client, server := clients[from], servers[to]
		svc, err := e.client.CoreV1().Services(ns).Get(ctx, server.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for what, addr := range map[string]string{"its Service's ClusterIP": svc.Spec.ClusterIP + ":80", "its pod address": server.Status.PodIP + ":8080"} {
			e.answers(t, client, addr, server.Name, fmt.Sprintf("%s on %s from %s on %s, at %s", server.Name, server.Spec.NodeName, client.Name, client.Spec.NodeName, what))
		}
		// Pod to pod across nodes: the server sees the client's own address.
		body := e.get(t, client, server.Status.PodIP+":8080", "clientip")
		if host, _, _ := strings.Cut(body, ":"); host != client.Status.PodIP {
			t.Errorf("%s saw %s's request from %q, want its pod address %s (no NAT between the nodes)", server.Name, client.Name, body, client.Status.PodIP)
		}
	}

	// ipam's address, served by node 1's kube-proxy, to the pod on node 2.
	e.namespacePool(t, ns, "nodes-", nodesPool)
	lb := loadBalancer(ns, "lb-2")
	lb.Spec.Selector = map[string]string{"app": servers[1].Name}
	lb.Spec.Ports[0].TargetPort = intstr.FromInt32(8080)
	if _, err := e.client.CoreV1().Services(ns).Create(ctx, lb, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	ip := e.ips(t, ns, []string{"lb-2"}, 2*time.Minute)["lb-2"]
	if !netip.MustParsePrefix(nodesPool).Contains(netip.MustParseAddr(ip)) {
		t.Fatalf("lb-2 got %s, outside its pool %s", ip, nodesPool)
	}
	e.answers(t, clients[0], ip+":80", servers[1].Name, fmt.Sprintf("the LoadBalancer address %s of %s on %s, from %s on %s", ip, servers[1].Name, servers[1].Spec.NodeName, clients[0].Name, clients[0].Spec.NodeName))
}

// pinnedPod runs agnhost with args as pod name (label app=name) on node.
func (e *env) pinnedPod(t *testing.T, ns, name, node string, args []string) {
	t.Helper()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"app": name}},
		Spec: corev1.PodSpec{
			NodeName:                      node,
			TerminationGracePeriodSeconds: new(int64),
			Containers: []corev1.Container{{
				Name: "agnhost", Image: cluster.AgnhostImage, ImagePullPolicy: corev1.PullNever, Args: args,
			}},
		},
	}
	if _, err := e.client.CoreV1().Pods(ns).Create(context.Background(), pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// clusterIP creates the ClusterIP Service name, port 80 to 8080 of the pod
// labelled app=name.
func (e *env) clusterIP(t *testing.T, ns, name string) {
	t.Helper()
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.ServiceSpec{
			Selector: map[string]string{"app": name},
			Ports:    []corev1.ServicePort{{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80, TargetPort: intstr.FromInt32(8080)}},
		},
	}
	if _, err := e.client.CoreV1().Services(ns).Create(context.Background(), svc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// runningOn waits for pod name to run on node n with an address in n's pod
// CIDR, and returns it.
func (e *env) runningOn(t *testing.T, ns, name string, n cluster.Node) corev1.Pod {
	t.Helper()
	var pod corev1.Pod
	cidr := netip.MustParsePrefix(n.PodCIDR)
	testenv.Eventually(t, 3*time.Minute, func() error {
		p, err := e.client.CoreV1().Pods(ns).Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if p.Status.Phase != corev1.PodRunning || p.Status.PodIP == "" {
			return fmt.Errorf("pod %s on %s is %s with address %q", name, p.Spec.NodeName, p.Status.Phase, p.Status.PodIP)
		}
		pod = *p
		return nil
	})
	if a, err := netip.ParseAddr(pod.Status.PodIP); err != nil || !cidr.Contains(a) || pod.Spec.NodeName != n.Name {
		t.Fatalf("pod %s runs on %s at %s, want on %s inside its pod CIDR %s", name, pod.Spec.NodeName, pod.Status.PodIP, n.Name, n.PodCIDR)
	}
	return pod
}

// get runs curl http://addr/path in the client pod and returns the body,
// failing the test when the request fails.
func (e *env) get(t *testing.T, client corev1.Pod, addr, path string) string {
	t.Helper()
	out, err := e.execIn(t, client, "curl", "-sS", "--connect-timeout", "3", "--max-time", "5", "http://"+addr+"/"+path)
	if err != nil {
		t.Fatalf("GET http://%s/%s from %s on %s: %v", addr, path, client.Name, client.Spec.NodeName, err)
	}
	return strings.TrimSpace(out)
}

// answers waits until GET http://addr/hostname from the client pod gets
// the answer of pod want (kube-proxy may not have the Service's rules yet).
func (e *env) answers(t *testing.T, client corev1.Pod, addr, want, what string) {
	t.Helper()
	start := time.Now()
	testenv.Eventually(t, time.Minute, func() error {
		out, err := e.execIn(t, client, "curl", "-sS", "--connect-timeout", "3", "--max-time", "5", "http://"+addr+"/hostname")
		if err != nil {
			return err
		}
		if got := strings.TrimSpace(out); got != want {
			return fmt.Errorf("http://%s/hostname answered %q, want %s", addr, got, want)
		}
		return nil
	})
	t.Logf("%s: answered after %s", what, time.Since(start).Round(time.Millisecond))
}

func nodeReady(n corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func internalIP(n corev1.Node) string {
	for _, a := range n.Status.Addresses {
		if a.Type == corev1.NodeInternalIP {
			return a.Address
		}
	}
	return ""
}
