package cluster_test

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ipledger/ipledger/lab/controlplane"
	"github.com/ipledger/ipledger/lab/testenv"
	"github.com/ipledger/ipledger/test/e2e/journey"
)

// TestKubectlIPledger runs the plugin as an operator does, against ipam's
// Pods: it finds them in ipledger-system, opens its own port-forward
// (client-go's, through the API server and the kubelet) to a Ready one, to
// the Lease holder for reserve and release, requests a token for a
// ServiceAccount bound to ipledger:operator, and closes the port-forward when
// the command ends. No --ipam-address: this is the path the integration tests
// (plugin/internal/commands/integration) cannot take without a kubelet.
func TestKubectlIPledger(t *testing.T) {
	e := get(t)
	ctx := context.Background()
	bin := buildPlugin(t)
	const sa = "plugin-operator"
	if _, err := e.client.CoreV1().ServiceAccounts(journey.SystemNamespace).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: sa}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	if _, err := e.client.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "test-cluster-" + sa},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "ipledger:operator"},
		Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Name: sa, Namespace: journey.SystemNamespace}},
	}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	ns := e.namespace(t)
	pool := journey.CreatePool(t, e.dynamic, "plugin", 29, ns)
	journey.CreateLoadBalancer(t, e.client, ns, "web", nil, corev1.ProtocolTCP, 80)
	var ip string
	testenv.Eventually(t, 2*time.Minute, func() error {
		svc, err := e.client.CoreV1().Services(ns).Get(ctx, "web", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if in := svc.Status.LoadBalancer.Ingress; len(in) > 0 {
			ip = in[0].IP
			return nil
		}
		return fmt.Errorf("Service %s/web has no IP yet", ns)
	})

	run := func(args ...string) string {
		t.Helper()
		cmd := exec.Command(bin, append(args, "--kubeconfig", e.node.KubeconfigPath, "--service-account", journey.SystemNamespace+"/"+sa, "--timeout", "60s")...)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("kubectl ipledger %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	want := func(what, got string, parts ...string) {
		t.Helper()
		for _, p := range parts {
			if !strings.Contains(got, p) {
				t.Errorf("%s lacks %q:\n%s", what, p, got)
			}
		}
	}
	want("allocations", run("allocations", "-n", ns), "SERVICE", "web", ip, pool)
	want("why", run("why", "svc/web", "-n", ns), "Decision:", ip, pool)
	want("pools", run("pools"), pool, "1/8")
	// The pool is a /29 and web holds one address: another one is free.
	free := ip[:strings.LastIndex(ip, ".")+1] + "7"
	if free == ip {
		free = ip[:strings.LastIndex(ip, ".")+1] + "6"
	}
	want("reserve", run("reserve", free, "--note", "test-cluster"), fmt.Sprintf("reserved %s (test-cluster)", free))
	want("release", run("release", free), fmt.Sprintf("released %s (test-cluster)", free))
}

// buildPlugin builds kubectl-ipledger into the test's temp dir.
func buildPlugin(t *testing.T) string {
	t.Helper()
	root, err := controlplane.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(t.TempDir(), "kubectl-ipledger")
	cmd := exec.Command("go", "build", "-o", bin, "./plugin/cmd/kubectl-ipledger")
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build kubectl-ipledger: %v\n%s", err, out)
	}
	return bin
}
