package integration

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ipledger/ipledger/lab/testenv"
	"github.com/ipledger/ipledger/pkg/authz"
	"github.com/ipledger/ipledger/pkg/ipamapi"
)

// writeFile writes content to dir/name and returns its path.
func writeFile(t *testing.T, dir, name, content string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

const historyQuery = `apiVersion: api.ipledger.io/v1alpha1
kind: HistoryQuery
spec: {}
`

const localHistoryQuery = `apiVersion: api.ipledger.io/v1alpha1
kind: LocalHistoryQuery
spec:
`

// entriesOf is the jsonpath of the answer's entries, as IP=namespace.
const entriesOf = `jsonpath={range .status.entries[*]}{.ip}={.service.namespace} {end}`

// TestViewerPreviewsAndReadsHistory: a person with only the shipped
// ClusterRole ipledger:viewer (a client certificate, no ServiceAccount)
// previews an IPPool and reads the whole history with plain kubectl
// create: nothing is stored, the answer is in status.
func TestViewerPreviewsAndReadsHistory(t *testing.T) {
	env := testenv.Get(t)
	serve(t, env)
	bind(t, env, "vera", "ipledger:viewer")
	dir := t.TempDir()
	vera, err := env.CP.UserKubeconfig(dir, "vera")
	if err != nil {
		t.Fatal(err)
	}
	preview := writeFile(t, dir, "preview.yaml", `apiVersion: api.ipledger.io/v1alpha1
kind: PoolPreview
spec:
  manifest: |
    apiVersion: ipledger.io/v1alpha1
    kind: IPPool
    metadata: {name: green}
    spec: {addresses: [198.51.100.0/24]}
`)
	out, err := kubectl(t, env, vera, "create", "--validate=false", "-f", preview, "-o", "jsonpath={.status.change} {.status.allocated[0].ips_after[0]} {.status.summary[0]}")
	if err != nil || out != "Create 198.51.100.1 1 pending Service would get addresses" {
		t.Errorf("kubectl create poolpreview: %q (%v)", out, err)
	}
	// ipam's refusal of the manifest reaches the person.
	bad := writeFile(t, dir, "bad.yaml", "apiVersion: api.ipledger.io/v1alpha1\nkind: PoolPreview\nspec: {manifest: 'kind: Service'}\n")
	if out, err := kubectl(t, env, vera, "create", "--validate=false", "-f", bad); err == nil || !strings.Contains(out, "manifest: kind: want IPPool") {
		t.Errorf("preview of a Service: %q (%v)", out, err)
	}

	q := writeFile(t, dir, "history.yaml", historyQuery)
	if out, err := kubectl(t, env, vera, "create", "--validate=false", "-f", q, "-o", entriesOf); err != nil || out != "192.0.2.10=shop 192.0.2.11=bank 192.0.2.12= " {
		t.Errorf("kubectl create historyquery as a cluster-wide viewer: %q (%v)", out, err)
	}
	// A Service named without its namespace is the question's namespace's.
	lq := writeFile(t, dir, "local.yaml", localHistoryQuery+"  service: {name: api}\n")
	if out, err := kubectl(t, env, vera, "create", "--validate=false", "-n", "bank", "-f", lq, "-o", entriesOf); err != nil || out != "192.0.2.11=bank " {
		t.Errorf("kubectl create localhistoryquery -n bank: %q (%v)", out, err)
	}
}

// TestTenantSeesOnlyTheirNamespacesHistory: a person allowed `get
// history.ipledger.io` only in shop (a RoleBinding: what a namespace's
// editors would be given) and allowed to ask anywhere. As over gRPC, a
// question about every namespace is answered with shop's entries only
// (bank's and the reservation for no Service are left out, as if absent),
// and a question in bank is refused (403) naming the grant.
func TestTenantSeesOnlyTheirNamespacesHistory(t *testing.T) {
	env := testenv.Get(t)
	serve(t, env)
	ctx := context.Background()
	for _, ns := range []string{"shop", "bank"} {
		if _, err := env.Kubectl(ctx, "create", "namespace", ns); err != nil && !strings.Contains(err.Error(), "AlreadyExists") {
			t.Fatal(err)
		}
	}
	askAnywhere := &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: "test-history-asker"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{ipamapi.Group}, Resources: []string{"historyqueries", "localhistoryqueries"},
			Verbs: []string{"create"}}},
	}
	readShop := &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Name: "history-reader", Namespace: "shop"},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{authz.Group}, Resources: []string{"history"}, Verbs: []string{"get"}}},
	}
	binding := &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "gina-history", Namespace: "shop"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: readShop.Name},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: "gina"}},
	}
	if _, err := env.Client.RbacV1().ClusterRoles().Create(ctx, askAnywhere, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := env.Client.RbacV1().Roles("shop").Create(ctx, readShop, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := env.Client.RbacV1().RoleBindings("shop").Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = env.Client.RbacV1().ClusterRoles().Delete(ctx, askAnywhere.Name, metav1.DeleteOptions{})
		_ = env.Client.RbacV1().Roles("shop").Delete(ctx, readShop.Name, metav1.DeleteOptions{})
		_ = env.Client.RbacV1().RoleBindings("shop").Delete(ctx, binding.Name, metav1.DeleteOptions{})
	})
	bind(t, env, "gina", askAnywhere.Name)
	dir := t.TempDir()
	gina, err := env.CP.UserKubeconfig(dir, "gina")
	if err != nil {
		t.Fatal(err)
	}
	q := writeFile(t, dir, "history.yaml", historyQuery)
	lq := writeFile(t, dir, "local.yaml", localHistoryQuery)

	if out, err := kubectl(t, env, gina, "create", "--validate=false", "-f", q, "-o", entriesOf); err != nil || out != "192.0.2.10=shop " {
		t.Errorf("gina's cluster-wide question: %q (%v), want shop's entry only", out, err)
	}
	if out, err := kubectl(t, env, gina, "create", "--validate=false", "-n", "shop", "-f", lq, "-o", entriesOf); err != nil || out != "192.0.2.10=shop " {
		t.Errorf("gina in shop: %q (%v)", out, err)
	}
	out, err := kubectl(t, env, gina, "create", "--validate=false", "-n", "bank", "-f", lq, "-o", entriesOf)
	if err == nil || !strings.Contains(out, "Forbidden") || !strings.Contains(out, "may not get history.ipledger.io in namespace bank") || strings.Contains(out, "192.0.2.11") {
		t.Errorf("gina in bank: %q (%v), want 403 naming the grant", out, err)
	}
}
