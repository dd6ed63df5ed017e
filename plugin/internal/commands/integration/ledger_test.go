package integration

import (
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/ipledger/ipledger/lab/testenv"
)

// TestLedgerBackupAndRestore: `ledger backup` writes the ledger, and
// `ledger restore` puts it back whole — refused while ipam's Deployment
// wants replicas, refused to a user who may write ConfigMaps in the namespace (the
// admission policy ipledger-ledger-writers), done through the break-glass
// group by impersonation.
func TestLedgerBackupAndRestore(t *testing.T) {
	env := testenv.Get(t)
	ctx := context.Background()
	s := &system{env: env, admin: env.CP.KubeconfigPath}
	ns := env.Namespace(t, nil)
	cms := env.Client.CoreV1().ConfigMaps(ns)
	shard := func(n int, entries string) *corev1.ConfigMap {
		return &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("ipledger-ledger-%d", n), Labels: map[string]string{"ipledger.io/ledger": "true"}},
			Data:       map[string]string{"format": "ipledger.io/ledger/v1", "epoch": "3", "allocations.jsonl": entries},
		}
	}
	want := map[string]string{
		"ipledger-ledger-0": `{"ip":"10.1.0.1","pool":"p","service":"prod/web","allocatedAt":"2026-12-01T00:00:00Z"}` + "\n",
		"ipledger-ledger-1": `{"ip":"10.1.9.1","pool":"p","service":"prod/db","allocatedAt":"2026-12-01T00:00:00Z"}` + "\n",
	}
	for i, name := range []string{"ipledger-ledger-0", "ipledger-ledger-1"} {
		if _, err := cms.Create(ctx, shard(i, want[name]), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	backup := filepath.Join(t.TempDir(), "ledger.yaml")
	_, errOut, err := s.run(t, "ledger", "backup", "--ipam-namespace", ns, "-f", backup)
	if err != nil || !strings.Contains(errOut, "Backed up 2 ledger ConfigMaps") {
		t.Fatalf("backup: %v, %q", err, errOut)
	}

	// The ledger is lost: a shard deleted, the head rewritten, by an ipam
	// that then stopped cleanly (docs/fencing.md: its word on the head).
	if err := cms.Delete(ctx, "ipledger-ledger-1", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	lost := shard(0, "")
	lost.Annotations = map[string]string{"ipledger.io/released-epoch": "3"}
	if _, err := cms.Update(ctx, lost, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}

	deploy := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "ipledger-ipam"},
		Spec: appsv1.DeploymentSpec{
			Replicas: replicas(1),
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "ipam"}},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "ipam"}},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "ipam", Image: "ipam"}}},
			},
		},
	}
	if _, err := env.Client.AppsV1().Deployments(ns).Create(ctx, deploy, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	restore := []string{"ledger", "restore", "--ipam-namespace", ns, "-f", backup}
	wantAll(t, "restore while ipam runs", s.fails(t, restore...), "wants replicas", "--replicas=0")
	deploy.Spec.Replicas = replicas(0)
	if _, err := env.Client.AppsV1().Deployments(ns).Update(ctx, deploy, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}

	// A user with edit in the namespace may write other ConfigMaps, not the ledger.
	if _, err := env.Client.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "editor"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// What `edit` grants of what restore touches (the test API server runs
	// no controller-manager to aggregate the built-in edit role).
	role := &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Name: "editor"},
		Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"get", "list", "create", "update", "delete"}},
			{APIGroups: []string{"apps"}, Resources: []string{"deployments"}, Verbs: []string{"get"}},
		},
	}
	if _, err := env.Client.RbacV1().Roles(ns).Create(ctx, role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	bind := func(name string, subject rbacv1.Subject) {
		t.Helper()
		rb := &rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "editor"},
			Subjects:   []rbacv1.Subject{subject},
		}
		if _, err := env.Client.RbacV1().RoleBindings(ns).Create(ctx, rb, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	bind("editor", rbacv1.Subject{Kind: "ServiceAccount", Name: "editor", Namespace: ns})
	// The shipped binding of the break-glass group is in ipledger-system; here, one like it.
	bind("ledger-admins", rbacv1.Subject{Kind: "Group", APIGroup: rbacv1.GroupName, Name: "ipledger:ledger-admins"})
	editor := env.ServiceAccountKubeconfig(t, ns, "editor")
	testenv.Eventually(t, wait, func() error {
		_, errOut, err := s.run(t, append(restore, "--kubeconfig", editor)...)
		if err == nil {
			return fmt.Errorf("an editor restored the ledger (stdout/stderr %q)", errOut)
		}
		for _, w := range []string{"ipledger-ledger-writers", "--as-group=ipledger:ledger-admins"} {
			if !strings.Contains(err.Error(), w) {
				return fmt.Errorf("editor's restore refused with %v, want it to name %q", err, w)
			}
		}
		return nil
	})
	if _, err := env.Client.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "other"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	editorClient := kubernetesFor(t, editor)
	if _, err := editorClient.CoreV1().ConfigMaps(ns).Update(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "other"}, Data: map[string]string{"k": "v"}}, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("the editor may not write a ConfigMap that is not the ledger: %v", err)
	}

	out := s.ok(t, append(restore, "--as", "alice", "--as-group", "ipledger:ledger-admins")...)
	wantAll(t, "restore", out, "Restored 2 ledger ConfigMaps")
	list, err := cms.List(ctx, metav1.ListOptions{LabelSelector: "ipledger.io/ledger=true"})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, cm := range list.Items {
		got[cm.Name] = cm.Data["allocations.jsonl"]
		if v, ok := cm.Annotations["ipledger.io/released-epoch"]; ok {
			t.Errorf("%s still says released (%q) after the restore: the next ipam would fence only the head", cm.Name, v)
		}
	}
	if !maps.Equal(got, want) {
		t.Fatalf("after the restore the ledger is %v, want %v", got, want)
	}

	// A file that is not a ledger is refused before anything is written.
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	if err := os.WriteFile(bad, []byte("apiVersion: v1\nkind: List\nitems:\n- apiVersion: v1\n  kind: ConfigMap\n  metadata: {name: other}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	wantAll(t, "restore of a non-ledger", s.fails(t, "ledger", "restore", "--ipam-namespace", ns, "-f", bad), "not a ledger ConfigMap")
}

func replicas(n int32) *int32 { return &n }

func kubernetesFor(t *testing.T, kubeconfig string) kubernetes.Interface {
	t.Helper()
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	c, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}
