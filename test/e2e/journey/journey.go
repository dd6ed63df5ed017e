// Package journey is what a user does with ipledger on day one — a pool,
// LoadBalancer Services that get IPs (two of them sharing one), grpcurl
// showing them, VMs behind a Service, a Node given an Elastic IP — and the
// invariants every end-to-end suite checks. It runs against any Kubernetes
// where ipledger is installed: the local processes of test/e2e or the pods
// on the real node of test/cluster.
package journey

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/ipledger/ipledger/lab/ec2test"
	"github.com/ipledger/ipledger/lab/testenv"
	"github.com/ipledger/ipledger/pkg/authz"
)

// SystemNamespace is where ipledger is installed.
const SystemNamespace = testenv.SystemNamespace

var (
	poolsGVR     = schema.GroupVersionResource{Group: "ipledger.io", Version: "v1alpha1", Resource: "ippools"}
	workloadsGVR = schema.GroupVersionResource{Group: "ipledger.io", Version: "v1alpha1", Resource: "externalworkloads"}
	noNodePorts  = false
)

// Target is a Kubernetes where ipledger runs, as the journey reaches it.
type Target struct {
	Client  kubernetes.Interface
	Dynamic dynamic.Interface
	// Grpcurl is the path of the pinned grpcurl.
	Grpcurl string
	// IPAM are plaintext gRPC addresses of ipam: ListAllocations goes to
	// the first, ExplainService and the ledger check to the last (the
	// standby, when there are two replicas).
	IPAM []string
	// Moto is the EC2 eipd talks to, and ClusterID eipd's --cluster-id.
	Moto      *ec2test.Moto
	ClusterID string
}

// Run walks the journey in namespace ns, each step a subtest.
func Run(t *testing.T, target Target, ns string) {
	ctx := context.Background()
	c := target.Client
	pool := CreatePool(t, target.Dynamic, "journey", 29, ns)
	web := CreateLoadBalancer(t, c, ns, "web", nil, corev1.ProtocolTCP, 80)
	CreateLoadBalancer(t, c, ns, "dns-tcp", map[string]string{SharedIPAnnotation: "dns"}, corev1.ProtocolTCP, 53)
	CreateLoadBalancer(t, c, ns, "dns-udp", map[string]string{SharedIPAnnotation: "dns"}, corev1.ProtocolUDP, 53)
	CreateLoadBalancer(t, c, ns, "wants-other", map[string]string{"ipledger.io/loadBalancerIPs": "203.0.113.7"}, corev1.ProtocolTCP, 80)

	t.Run("Services get IPs, shared ones the same", func(t *testing.T) {
		testenv.Eventually(t, 60*time.Second, func() error {
			for _, name := range []string{"web", "dns-tcp", "dns-udp"} {
				svc, err := c.CoreV1().Services(ns).Get(ctx, name, metav1.GetOptions{})
				if err != nil {
					return err
				}
				if len(svc.Status.LoadBalancer.Ingress) != 1 {
					return fmt.Errorf("%s has ingress %v", name, svc.Status.LoadBalancer.Ingress)
				}
			}
			return nil
		})
		tcp, _ := c.CoreV1().Services(ns).Get(ctx, "dns-tcp", metav1.GetOptions{})
		udp, _ := c.CoreV1().Services(ns).Get(ctx, "dns-udp", metav1.GetOptions{})
		if a, b := tcp.Status.LoadBalancer.Ingress[0].IP, udp.Status.LoadBalancer.Ingress[0].IP; a != b {
			t.Errorf("dns-tcp (%s) and dns-udp (%s) share a key and should share the IP", a, b)
		}
		services, err := LoadBalancers(ctx, c)
		if err != nil {
			t.Fatal(err)
		}
		if err := NoIPOnTwoServices(services); err != nil {
			t.Error(err)
		}
	})

	t.Run("grpcurl lists what the statuses say", func(t *testing.T) {
		token := ViewerToken(t, c)
		// The statuses are written after the ledger, but the watcher reads a
		// ledger shard that keeps changing at most once per
		// --ledger-read-interval (docs/ipam-api.md, "How fresh"): the three
		// allocations made at once may reach a replica's reads that much
		// after its stream shows the statuses.
		testenv.Eventually(t, 30*time.Second, func() error {
			out := Grpcurl(t, target.Grpcurl, token, target.IPAM[0], "ipledger.ipam.v1.IPAMService/ListAllocations", fmt.Sprintf(`{"namespace":%q}`, ns))
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
				svc, _ := c.CoreV1().Services(ns).Get(ctx, name, metav1.GetOptions{})
				statuses = append(statuses, name+"="+svc.Status.LoadBalancer.Ingress[0].IP+"@"+pool)
			}
			sort.Strings(listed)
			sort.Strings(statuses)
			if strings.Join(listed, " ") != strings.Join(statuses, " ") {
				return fmt.Errorf("grpcurl ListAllocations = %v, statuses = %v", listed, statuses)
			}
			return nil
		})
		explained := string(Grpcurl(t, target.Grpcurl, token, target.IPAM[len(target.IPAM)-1], "ipledger.ipam.v1.IPAMService/ExplainService",
			fmt.Sprintf(`{"service":{"namespace":%q,"name":"wants-other"}}`, ns)))
		if !strings.Contains(explained, "RequestedIPNotInPool") || !strings.Contains(explained, "203.0.113.7") {
			t.Errorf("ExplainService should say 203.0.113.7 is in no pool:\n%s", explained)
		}
	})

	t.Run("ledger equals statuses", func(t *testing.T) {
		conn := Dial(t, target.IPAM[len(target.IPAM)-1], ViewerToken(t, c))
		testenv.Eventually(t, 10*time.Second, func() error {
			services, err := LoadBalancers(ctx, c)
			if err != nil {
				return err
			}
			return LedgerEqualsStatuses(ctx, conn, services)
		})
	})

	t.Run("ExternalWorkloads become an EndpointSlice", func(t *testing.T) {
		for i := range 3 {
			CreateWorkload(t, target.Dynamic, ns, fmt.Sprintf("vm-%d", i), fmt.Sprintf("10.20.0.%d", i+1), web.Spec.Selector, true)
		}
		CreateWorkload(t, target.Dynamic, ns, "vm-other", "10.20.0.99", map[string]string{"app": "other"}, true)
		testenv.Eventually(t, 60*time.Second, func() error {
			addrs, err := SliceAddresses(ctx, c, ns, "web")
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
		moto := target.Moto
		// An instance of the cluster (tagged for it), opted in by the
		// operator's label, reporting the instance's private IP.
		inst := moto.RunClusterInstance(t, target.ClusterID)
		node := &corev1.Node{
			ObjectMeta: metav1.ObjectMeta{Name: "journey-" + strings.ToLower(inst.ID), Labels: map[string]string{"node-restriction.kubernetes.io/ipledger-externalip-auto-assign": "true"}},
			Spec:       corev1.NodeSpec{ProviderID: inst.ProviderID()},
			Status:     corev1.NodeStatus{Addresses: inst.NodeAddresses()},
		}
		CreateNode(t, c, node)
		var publicIP string
		testenv.Eventually(t, 60*time.Second, func() error {
			n, err := c.CoreV1().Nodes().Get(ctx, node.Name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			if publicIP = n.Labels["ipledger.io/externalip"]; publicIP == "" {
				return fmt.Errorf("node %s has no ipledger.io/externalip label yet", node.Name)
			}
			return nil
		})
		var mine []string
		for _, a := range moto.Addresses(t, target.ClusterID) {
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

// CreatePool creates an IPPool named prefix-<n> over its own
// 10.<100+n>.0.0/bits that serves only namespace (so no other test's
// Services take its addresses, nor this test's Services another pool's),
// and returns its name.
func CreatePool(t testing.TB, dyn dynamic.Interface, prefix string, bits int, namespace string) string {
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
	if _, err := dyn.Resource(poolsGVR).Create(context.Background(), pool, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create pool %s: %v", name, err)
	}
	return name
}

// CreateLoadBalancer creates a LoadBalancer Service without node ports
// selecting app=name.
func CreateLoadBalancer(t testing.TB, c kubernetes.Interface, ns, name string, annotations map[string]string, proto corev1.Protocol, port int32) *corev1.Service {
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
	created, err := c.CoreV1().Services(ns).Create(context.Background(), svc, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create service %s/%s: %v", ns, name, err)
	}
	return created
}

// CreateWorkload creates an ExternalWorkload at ip with port p=80 and sets
// its Ready condition, as the endpoints prober would.
func CreateWorkload(t testing.TB, dyn dynamic.Interface, ns, name, ip string, labels map[string]string, ready bool) {
	t.Helper()
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
	res := dyn.Resource(workloadsGVR).Namespace(ns)
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

// CreateNode creates a Node and deletes it when the test ends (before the
// system stops, so eipd releases its EIP): Nodes are cluster-wide and would
// otherwise be served again by the next test's eipd.
func CreateNode(t testing.TB, c kubernetes.Interface, node *corev1.Node) {
	t.Helper()
	nodes := c.CoreV1().Nodes()
	if _, err := nodes.Create(context.Background(), node, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = nodes.Delete(context.Background(), node.Name, metav1.DeleteOptions{}) })
}

// ViewerToken returns a token for the gRPC servers operators call, ipam and
// eipd (audiences authz.IPAMAudience and authz.EIPDAudience), of
// ServiceAccount e2e-viewer of ipledger-system, bound to ipledger:viewer: the
// role an operator's grpcurl uses.
func ViewerToken(t testing.TB, c kubernetes.Interface) string {
	t.Helper()
	return RoleToken(t, c, "e2e-viewer", "ipledger:viewer", authz.IPAMAudience, authz.EIPDAudience)
}

// RoleToken returns an hour's token for audiences of ServiceAccount
// serviceAccount of ipledger-system, which it creates (if need be) and binds
// to clusterRole with a ClusterRoleBinding of the same name.
func RoleToken(t testing.TB, c kubernetes.Interface, serviceAccount, clusterRole string, audiences ...string) string {
	t.Helper()
	ctx := context.Background()
	_, err := c.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: serviceAccount},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: clusterRole},
		Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Name: serviceAccount, Namespace: SystemNamespace}},
	}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	_, err = c.CoreV1().ServiceAccounts(SystemNamespace).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: serviceAccount}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	expiry := int64(3600)
	tr, err := c.CoreV1().ServiceAccounts(SystemNamespace).CreateToken(ctx, serviceAccount, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &expiry, Audiences: audiences},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("token for %s/%s: %v", SystemNamespace, serviceAccount, err)
	}
	return tr.Status.Token
}

// Grpcurl runs grpcurl (server reflection, no proto files) against a
// plaintext server, as an operator would.
func Grpcurl(t testing.TB, grpcurl, token, addr, method, body string) []byte {
	t.Helper()
	cmd := exec.Command(grpcurl, "-plaintext", "-H", "authorization: Bearer "+token, "-d", body, addr, method)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("grpcurl %s: %v\n%s", method, err, out)
	}
	return out
}

// Dial opens a plaintext gRPC connection to addr that sends token, closed
// when the test ends.
func Dial(t testing.TB, addr, token string) *grpc.ClientConn {
	t.Helper()
	path := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(path, []byte(token), 0o600); err != nil {
		t.Fatal(err)
	}
	return testenv.Dial(t, addr, path)
}
