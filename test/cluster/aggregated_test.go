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

// apiService is the APIService components/aggregated-api registers.
const apiService = "v1alpha1.api.ipledger.io"

// TestAggregatedAPIAsYourself applies components/aggregated-api on the e2e
// install (testdata/aggregated-api) on the node, whose kube-apiserver runs
// the aggregation layer (lab/cluster, controlplane.FrontProxy), waits for
// the APIService to be Available (and logs how long that took), and acts as
// people do: with a kubeconfig of their own holding a client certificate
// the node's client CA signed — no ServiceAccount, no token. A person bound
// to ipledger:viewer lists a LoadBalancer Service's address with `kubectl
// get allocations.api.ipledger.io -A` and asks `kubectl ipledger why
// --api=aggregated`; a person with no binding is refused by the
// kube-apiserver naming the grant, one granted api.ipledger.io only is
// refused by ipam (SubjectAccessReview) naming the ClusterRole. The
// component's objects are removed and the e2e install put back at the end.
func TestAggregatedAPIAsYourself(t *testing.T) {
	e := get(t)
	ctx := context.Background()
	root, err := controlplane.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	plugin := buildPlugin(t)
	component := filepath.Join(root, "deploy", "kustomize", "components", "aggregated-api")
	t.Cleanup(func() {
		e.kubectl(t, "delete", "--ignore-not-found", "-f", filepath.Join(component, "apiservice.yaml"), "-f", filepath.Join(component, "rbac.yaml"))
		e.apply(t, filepath.Join(root, "deploy", "kustomize", "overlays", "e2e"))
		for _, d := range deployments {
			e.rolledOut(t, d)
		}
		if out := e.kubectl(t, "-n", systemNS, "get", "deploy/ipledger-ipam", "-o", "jsonpath={.spec.template.spec.containers[0].args}"); strings.Contains(out, "--aggregated-api-addr") {
			t.Errorf("ipam still serves the aggregated API after the roll back: %s", out)
		}
	})

	dir, err := filepath.Abs(filepath.Join("testdata", "aggregated-api"))
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	e.apply(t, dir)
	for _, d := range deployments {
		e.rolledOut(t, d)
	}
	rolled := time.Since(start)
	testenv.Eventually(t, 3*time.Minute, func() error {
		out, err := e.node.Kubectl(ctx, nil, "get", "apiservice", apiService, "-o", `jsonpath={.status.conditions[?(@.type=="Available")]}`)
		if err != nil {
			return err
		}
		if !strings.Contains(string(out), `"status":"True"`) {
			return fmt.Errorf("APIService %s not Available: %s", apiService, out)
		}
		return nil
	})
	t.Logf("apply to rollout %s, to APIService %s Available %s", rolled.Round(time.Millisecond), apiService, time.Since(start).Round(time.Millisecond))

	ns := e.namespace(t)
	pool := journey.CreatePool(t, e.dynamic, "aggregated", 29, ns)
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

	people := t.TempDir()
	person := func(user string) string {
		t.Helper()
		path, err := e.node.UserKubeconfig(people, user)
		if err != nil {
			t.Fatal(err)
		}
		return path
	}
	bindUser(t, e, "test-cluster-vera", "vera", "ipledger:viewer")
	vera := person("vera")
	kubectlAs := func(kubeconfig string, args ...string) (string, error) {
		out, err := exec.Command(filepath.Join(e.node.ToolsBin, "kubectl"), append([]string{"--kubeconfig", kubeconfig}, args...)...).CombinedOutput()
		return string(out), err
	}
	if out, err := kubectlAs(vera, "auth", "whoami", "-o", "jsonpath={.status.userInfo.username}"); err != nil || out != "vera" {
		t.Fatalf("vera's kubeconfig authenticates as %q (%v), want vera", out, err)
	}
	// ipam's stream may not have the allocation yet when the Service shows it.
	testenv.Eventually(t, time.Minute, func() error {
		out, err := kubectlAs(vera, "get", "allocations.api.ipledger.io", "-A")
		if err != nil {
			return fmt.Errorf("vera: kubectl get allocations.api.ipledger.io -A: %v\n%s", err, out)
		}
		for _, line := range strings.Split(out, "\n") {
			if strings.HasPrefix(line, ns+" ") && strings.Contains(line, ip) && strings.Contains(line, "web") && strings.Contains(line, pool) {
				return nil
			}
		}
		return fmt.Errorf("vera: kubectl get allocations.api.ipledger.io -A lacks %s/web %s (pool %s):\n%s", ns, ip, pool, out)
	})
	out, err := exec.Command(plugin, "why", "svc/web", "-n", ns, "--kubeconfig", vera, "--api=aggregated", "--timeout", "60s").CombinedOutput()
	if err != nil {
		t.Fatalf("vera: kubectl ipledger why svc/web -n %s --api=aggregated: %v\n%s", ns, err, out)
	}
	for _, want := range []string{"Decision:", ip, pool} {
		if !strings.Contains(string(out), want) {
			t.Errorf("vera: kubectl ipledger why lacks %q:\n%s", want, out)
		}
	}

	// No binding: the kube-apiserver refuses, naming the resource.
	out2, err := kubectlAs(person("walt"), "get", "allocations.api.ipledger.io", "-A")
	if err == nil || !strings.Contains(out2, `(Forbidden)`) || !strings.Contains(out2, `User "walt" cannot list resource "allocations" in API group "api.ipledger.io"`) {
		t.Errorf("walt without a binding: kubectl get allocations.api.ipledger.io -A = %v\n%s", err, out2)
	}
	// api.ipledger.io only: ipam refuses (SubjectAccessReview), naming the
	// grant and the ClusterRole that has it.
	role := &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: "test-cluster-aggregated-only"},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{"api.ipledger.io"}, Resources: []string{"allocations"}, Verbs: []string{"list"}}},
	}
	if _, err := e.client.RbacV1().ClusterRoles().Create(ctx, role, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = e.client.RbacV1().ClusterRoles().Delete(context.Background(), role.Name, metav1.DeleteOptions{})
	})
	bindUser(t, e, "test-cluster-xena", "xena", role.Name)
	out2, err = kubectlAs(person("xena"), "get", "allocations.api.ipledger.io", "-A")
	if err == nil || !strings.Contains(out2, "(Forbidden)") || !strings.Contains(out2, "ipam also needs list allocations.ipledger.io cluster-wide, which ClusterRole ipledger:viewer grants") {
		t.Errorf("xena with api.ipledger.io only: kubectl get allocations.api.ipledger.io -A = %v\n%s", err, out2)
	}
}

// bindUser binds user to clusterRole until the test ends.
func bindUser(t *testing.T, e *env, name, user, clusterRole string) {
	t.Helper()
	crbs := e.client.RbacV1().ClusterRoleBindings()
	if _, err := crbs.Create(context.Background(), &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: clusterRole},
		Subjects:   []rbacv1.Subject{{APIGroup: "rbac.authorization.k8s.io", Kind: "User", Name: user}},
	}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := crbs.Delete(context.Background(), name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			t.Error(err)
		}
	})
}
