package e2e

import (
	"os/exec"
	"path/filepath"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"

	"github.com/ipledger/ipledger/lab/testenv"
)

// aggregatedAPIInstall is the base with components/aggregated-api.
const aggregatedAPIInstall = "testdata/aggregated-api"

// TestAggregatedAPIComponent: the opt-in component registers
// api.ipledger.io/v1alpha1 with a Service that reaches ipam's aggregated
// port, turns that port on, grants ipam the two grants every aggregated
// API server needs (and no more), and applies to the API server.
func TestAggregatedAPIComponent(t *testing.T) {
	rendered := renderDir(t, aggregatedAPIInstall)

	svc := objectsOf[corev1.Service](t, rendered, "Service")
	i := slices.IndexFunc(svc, func(s corev1.Service) bool { return s.Name == "ipledger-ipam-api" })
	if i < 0 {
		t.Fatal("no Service ipledger-ipam-api")
	}
	if s := svc[i]; s.Spec.Selector["app.kubernetes.io/name"] != "ipledger-ipam" || len(s.Spec.Ports) != 1 ||
		s.Spec.Ports[0].Port != 443 || s.Spec.Ports[0].TargetPort.StrVal != "aggregated-api" {
		t.Errorf("Service ipledger-ipam-api: %+v", s.Spec)
	}
	api := renderedObject(t, rendered, "APIService", "v1alpha1.api.ipledger.io")
	spec := api["spec"].(map[string]any)
	ref := spec["service"].(map[string]any)
	if spec["group"] != "api.ipledger.io" || spec["version"] != "v1alpha1" || ref["name"] != "ipledger-ipam-api" ||
		ref["namespace"] != "ipledger-system" || ref["port"] != float64(443) {
		t.Errorf("APIService spec: %v", spec)
	}

	var ipam bool
	for _, d := range deployments(t, rendered) {
		if d.Name != "ipledger-ipam" {
			continue
		}
		ipam = true
		c := d.Spec.Template.Spec.Containers[0]
		if !slices.Contains(c.Args, "--aggregated-api-addr=:6443") {
			t.Errorf("ipam args lack --aggregated-api-addr=:6443: %q", c.Args)
		}
		if !slices.ContainsFunc(c.Ports, func(p corev1.ContainerPort) bool { return p.Name == "aggregated-api" && p.ContainerPort == 6443 }) {
			t.Errorf("ipam has no container port aggregated-api 6443: %+v", c.Ports)
		}
	}
	if !ipam {
		t.Fatal("no ipam Deployment")
	}

	ipamSA := rbacv1.Subject{Kind: "ServiceAccount", Name: "ipledger-ipam", Namespace: "ipledger-system"}
	rb := objectsOf[rbacv1.RoleBinding](t, rendered, "RoleBinding")
	if !slices.ContainsFunc(rb, func(b rbacv1.RoleBinding) bool {
		return b.Namespace == "kube-system" && b.RoleRef.Kind == "Role" && b.RoleRef.Name == "extension-apiserver-authentication-reader" &&
			slices.Equal(b.Subjects, []rbacv1.Subject{ipamSA})
	}) {
		t.Error("no RoleBinding of ipam to kube-system's extension-apiserver-authentication-reader")
	}
	crb := objectsOf[rbacv1.ClusterRoleBinding](t, rendered, "ClusterRoleBinding")
	if !slices.ContainsFunc(crb, func(b rbacv1.ClusterRoleBinding) bool {
		return b.RoleRef.Name == "system:auth-delegator" && slices.Equal(b.Subjects, []rbacv1.Subject{ipamSA})
	}) {
		t.Error("no ClusterRoleBinding of ipam to system:auth-delegator")
	}

	env := testenv.Get(t)
	abs, err := filepath.Abs(aggregatedAPIInstall)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(filepath.Join(env.CP.BinDir, "kubectl"), "--kubeconfig", env.CP.KubeconfigPath,
		"apply", "--server-side", "--force-conflicts", "--dry-run=server", "--validate=strict", "-k", abs)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("server-side dry-run: %v\n%s", err, out)
	}
}
