package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/ipledger/ipledger/pkg/ec2test"
	"github.com/ipledger/ipledger/pkg/testenv"
)

var (
	poolsGVR     = schema.GroupVersionResource{Group: "ipledger.io", Version: "v1alpha1", Resource: "ippools"}
	workloadsGVR = schema.GroupVersionResource{Group: "ipledger.io", Version: "v1alpha1", Resource: "externalworkloads"}
)

// TestUserJourney walks what a user does on day one: a pool, Services that
// get IPs, grpcurl showing them, VMs behind a Service, a Node with an EIP.
func TestUserJourney(t *testing.T) {
	env := testenv.Get(t)
	moto := ec2test.Get(t)
	ctx := context.Background()
	cluster := ec2test.ClusterID(t)
	sys := StartSystem(t, SystemOptions{Watchers: 2, IPAM: 2, Endpoints: 1, EIPD: 1, EC2Endpoint: moto.URL, ClusterID: cluster})

	ns := env.Namespace(t, nil)
	pool := createPool(t, "journey", 29, ns)
	web := createLoadBalancer(t, ns, "web", nil, corev1.ProtocolTCP, 80)
	createLoadBalancer(t, ns, "dns-tcp", map[string]string{sharedIPAnnotation: "dns"}, corev1.ProtocolTCP, 53)
	createLoadBalancer(t, ns, "dns-udp", map[string]string{sharedIPAnnotation: "dns"}, corev1.ProtocolUDP, 53)
	createLoadBalancer(t, ns, "wants-other", map[string]string{"ipledger.io/loadBalancerIPs": "203.0.113.7"}, corev1.ProtocolTCP, 80)

	t.Run("Services get IPs, shared ones the same", func(t *testing.T) {
		testenv.Eventually(t, 30*time.Second, func() error {
			for _, name := range []string{"web", "dns-tcp", "dns-udp"} {
				svc, err := env.Client.CoreV1().Services(ns).Get(ctx, name, metav1.GetOptions{})
				if err != nil {
					return err
				}
				if len(svc.Status.LoadBalancer.Ingress) != 1 {
					return fmt.Errorf("%s has ingress %v", name, svc.Status.LoadBalancer.Ingress)
				}
			}
			return nil
		})
		tcp, _ := env.Client.CoreV1().Services(ns).Get(ctx, "dns-tcp", metav1.GetOptions{})
		udp, _ := env.Client.CoreV1().Services(ns).Get(ctx, "dns-udp", metav1.GetOptions{})
		if a, b := tcp.Status.LoadBalancer.Ingress[0].IP, udp.Status.LoadBalancer.Ingress[0].IP; a != b {
			t.Errorf("dns-tcp (%s) and dns-udp (%s) share a key and should share the IP", a, b)
		}
		services, err := ourLoadBalancers(ctx, sys)
		if err != nil {
			t.Fatal(err)
		}
		if err := checkNoIPOnTwoServices(services); err != nil {
			t.Error(err)
		}
	})

	t.Run("grpcurl lists what the statuses say", func(t *testing.T) {
		token := viewerToken(t, env)
		out := grpcurl(t, env, token, sys.IPAM[0].GRPCAddr, "ipledger.ipam.v1.IPAMService/ListAllocations", fmt.Sprintf(`{"namespace":%q}`, ns))
		var resp struct {
			Allocations []struct {
				IP      string `json:"ip"`
				Pool    string `json:"pool"`
				Service struct{ Namespace, Name string }
			} `json:"allocations"`
		}
		if err := json.Unmarshal(out, &resp); err != nil {
			t.Fatalf("grpcurl output %s: %v", out, err)
		}
		var listed, statuses []string
		for _, a := range resp.Allocations {
			listed = append(listed, a.Service.Name+"="+a.IP+"@"+a.Pool)
		}
		for _, name := range []string{"web", "dns-tcp", "dns-udp"} {
			svc, _ := env.Client.CoreV1().Services(ns).Get(ctx, name, metav1.GetOptions{})
			statuses = append(statuses, name+"="+svc.Status.LoadBalancer.Ingress[0].IP+"@"+pool)
		}
		sort.Strings(listed)
		sort.Strings(statuses)
		if strings.Join(listed, " ") != strings.Join(statuses, " ") {
			t.Errorf("grpcurl ListAllocations = %v, statuses = %v", listed, statuses)
		}
		explained := string(grpcurl(t, env, token, sys.IPAM[1].GRPCAddr, "ipledger.ipam.v1.IPAMService/ExplainService",
			fmt.Sprintf(`{"service":{"namespace":%q,"name":"wants-other"}}`, ns)))
		if !strings.Contains(explained, "RequestedIPNotInPool") || !strings.Contains(explained, "203.0.113.7") {
			t.Errorf("ExplainService on the standby should say 203.0.113.7 is in no pool:\n%s", explained)
		}
	})

	t.Run("ledger equals statuses", func(t *testing.T) {
		viewerToken(t, env)
		conn := sys.Dial(t, sys.IPAM[1].GRPCAddr, "e2e-viewer")
		testenv.Eventually(t, 10*time.Second, func() error {
			services, err := ourLoadBalancers(ctx, sys)
			if err != nil {
				return err
			}
			return checkLedgerEqualsStatuses(ctx, conn, services)
		})
	})

	t.Run("ExternalWorkloads become an EndpointSlice", func(t *testing.T) {
		for i := range 3 {
			createWorkload(t, ns, fmt.Sprintf("vm-%d", i), fmt.Sprintf("10.20.0.%d", i+1), web.Spec.Selector, true)
		}
		createWorkload(t, ns, "vm-other", "10.20.0.99", map[string]string{"app": "other"}, true)
		testenv.Eventually(t, 30*time.Second, func() error {
			addrs, err := sliceAddresses(ctx, sys, ns, "web")
			if err != nil {
				return err
			}
			if strings.Join(addrs, ",") != "10.20.0.1,10.20.0.2,10.20.0.3" {
				return fmt.Errorf("web's slices hold %v", addrs)
			}
			return nil
		})
	})

	t.Run("a labelled Node gets one Elastic IP", func(t *testing.T) {
		inst := moto.RunInstance(t)
		node := &corev1.Node{
			ObjectMeta: metav1.ObjectMeta{Name: "journey-" + strings.ToLower(inst.ID), Labels: map[string]string{"ipledger.io/externalip-auto-assign": "true"}},
			Spec:       corev1.NodeSpec{ProviderID: inst.ProviderID()},
		}
		createNode(t, node)
		var publicIP string
		testenv.Eventually(t, 30*time.Second, func() error {
			n, err := env.Client.CoreV1().Nodes().Get(ctx, node.Name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			if publicIP = n.Labels["ipledger.io/externalip"]; publicIP == "" {
				return fmt.Errorf("node %s has no ipledger.io/externalip label yet", node.Name)
			}
			return nil
		})
		addrs := moto.Addresses(t, cluster)
		var mine []string
		for _, a := range addrs {
			if ec2test.Tag(a.Tags, "ipledger.io/node") == node.Name {
				mine = append(mine, *a.PublicIp)
				if a.AssociationId == nil || a.NetworkInterfaceId == nil || *a.NetworkInterfaceId != inst.NetworkInterfaceID {
					t.Errorf("EIP %s is not associated with the primary interface %s of %s", *a.PublicIp, inst.NetworkInterfaceID, inst.ID)
				}
			}
		}
		if len(mine) != 1 || mine[0] != publicIP {
			t.Errorf("moto holds %v for node %s, label says %s", mine, node.Name, publicIP)
		}
	})
}

// poolCount makes every pool of this test binary unique, so tests can run
// with -count=N on one API server (pools overlapping an older one would be
// Conflicting).
var poolCount atomic.Int32

// createPool creates an IPPool named prefix-<n> over its own
// 10.<100+n>.0.0/bits that serves only namespace (so no other test's
// Services take its addresses, nor this test's Services another pool's),
// and returns its name.
func createPool(t *testing.T, prefix string, bits int, namespace string) string {
	t.Helper()
	n := poolCount.Add(1)
	name := fmt.Sprintf("%s-%d", prefix, n)
	pool := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "ipledger.io/v1alpha1", "kind": "IPPool",
		"metadata": map[string]any{"name": name},
		"spec": map[string]any{
			"addresses":  []any{fmt.Sprintf("10.%d.0.0/%d", 100+n, bits)},
			"allocation": map[string]any{"namespaces": []any{namespace}},
		},
	}}
	if _, err := testenv.Get(t).Dynamic.Resource(poolsGVR).Create(context.Background(), pool, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create pool %s: %v", name, err)
	}
	return name
}

func createLoadBalancer(t *testing.T, ns, name string, annotations map[string]string, proto corev1.Protocol, port int32) *corev1.Service {
	t.Helper()
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Annotations: annotations},
		Spec: corev1.ServiceSpec{
			Type:                          corev1.ServiceTypeLoadBalancer,
			AllocateLoadBalancerNodePorts: &noNodePorts,
			Selector:                      map[string]string{"app": name},
			Ports:                         []corev1.ServicePort{{Name: "p", Protocol: proto, Port: port, TargetPort: intstr.FromInt32(port)}},
		},
	}
	created, err := testenv.Get(t).Client.CoreV1().Services(ns).Create(context.Background(), svc, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create service %s/%s: %v", ns, name, err)
	}
	return created
}

func createWorkload(t *testing.T, ns, name, ip string, labels map[string]string, ready bool) {
	t.Helper()
	env := testenv.Get(t)
	lbls := map[string]any{}
	for k, v := range labels {
		lbls[k] = v
	}
	w := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "ipledger.io/v1alpha1", "kind": "ExternalWorkload",
		"metadata": map[string]any{"name": name, "labels": lbls},
		"spec": map[string]any{
			"workloadIPs": []any{map[string]any{"ip": ip}},
			"ports":       []any{map[string]any{"name": "p", "port": int64(80)}},
		},
	}}
	res := env.Dynamic.Resource(workloadsGVR).Namespace(ns)
	created, err := res.Create(context.Background(), w, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create workload %s: %v", name, err)
	}
	status := "False"
	if ready {
		status = "True"
	}
	created.Object["status"] = map[string]any{"conditions": []any{map[string]any{
		"type": "Ready", "status": status, "reason": "Probed", "message": "e2e",
		"lastTransitionTime": time.Now().UTC().Format(time.RFC3339),
	}}}
	if _, err := res.UpdateStatus(context.Background(), created, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("workload %s status: %v", name, err)
	}
}

// createNode creates a Node and deletes it when the test ends (before the
// system stops, so eipd releases its EIP): Nodes are cluster-wide and would
// otherwise be served again by the next test's eipd.
func createNode(t *testing.T, node *corev1.Node) {
	t.Helper()
	nodes := testenv.Get(t).Client.CoreV1().Nodes()
	if _, err := nodes.Create(context.Background(), node, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = nodes.Delete(context.Background(), node.Name, metav1.DeleteOptions{}) })
}

// viewerToken returns a token of ServiceAccount e2e-viewer of
// ipledger-system, bound to ipledger:viewer: the role an operator's grpcurl uses.
func viewerToken(t *testing.T, env *testenv.Env) string {
	t.Helper()
	ctx := context.Background()
	_, err := env.Client.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "e2e-viewer"},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "ipledger:viewer"},
		Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Name: "e2e-viewer", Namespace: testenv.SystemNamespace}},
	}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	token, err := env.GRPCToken(ctx, testenv.SystemNamespace, "e2e-viewer")
	if err != nil {
		t.Fatal(err)
	}
	return token
}

// grpcurl runs the pinned grpcurl (server reflection, no proto files), as an
// operator would.
func grpcurl(t *testing.T, env *testenv.Env, token, addr, method, body string) []byte {
	t.Helper()
	cmd := exec.Command(filepath.Join(env.CP.BinDir, "grpcurl"), "-plaintext", "-H", "authorization: Bearer "+token, "-d", body, addr, method)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("grpcurl %s: %v\n%s", method, err, out)
	}
	return out
}
