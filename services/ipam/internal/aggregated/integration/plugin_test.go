package integration

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ipledger/ipledger/lab/testenv"
	"github.com/ipledger/ipledger/pkg/authz"
	"github.com/ipledger/ipledger/pkg/ipamapi"
)

// TestPluginAsThemselves: kubectl ipledger with a person's own kubeconfig
// (a client certificate: no ServiceAccount, no --service-account, no
// token) reads and reserves through the aggregated API, attributed to the
// person, and prints what it prints from gRPC.
func TestPluginAsThemselves(t *testing.T) {
	env := testenv.Get(t)
	fake := serve(t, env)
	bind(t, env, "frank", "ipledger:operator")
	frank, err := env.CP.UserKubeconfig(t.TempDir(), "frank")
	if err != nil {
		t.Fatal(err)
	}
	bin := env.Plugin(t)
	run := func(args ...string) (string, error) {
		out, err := exec.Command(bin, append([]string{"--kubeconfig", frank}, args...)...).CombinedOutput()
		return string(out), err
	}
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"allocations", "-A"}, []string{"shop", "web", "192.0.2.10", "bank", "192.0.2.11", "fd00::10"}},
		{[]string{"allocations", "-A", "--pool", "blue6"}, []string{"fd00::10"}},
		{[]string{"pools"}, []string{"blue", "3/256", "True"}},
		{[]string{"why", "svc/web", "-n", "shop"}, []string{"192.0.2.10"}},
		{[]string{"reserve", "192.0.2.60", "--note", "lab switch"}, []string{"192.0.2.60"}},
		{[]string{"release", "192.0.2.60"}, []string{"192.0.2.60"}},
	} {
		out, err := run(tc.args...)
		if err != nil {
			t.Errorf("kubectl ipledger %s: %v\n%s", strings.Join(tc.args, " "), err, out)
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(out, w) {
				t.Errorf("kubectl ipledger %s: no %q in\n%s", strings.Join(tc.args, " "), w, out)
			}
		}
		if slices.Contains(tc.args, "--pool") && strings.Contains(out, "192.0.2.10") {
			t.Errorf("--pool blue6 printed blue's 192.0.2.10:\n%s", out)
		}
	}
	if got := fake.record(); !slices.Equal(got, []string{"reserve 192.0.2.60 by frank", "release 192.0.2.60 by frank"}) {
		t.Errorf("ipam was called %q, want the reservation and release by frank", got)
	}
	// ipam's refusal reaches the person with its fix.
	if out, err := run("why", "svc/gone", "-n", "shop"); err == nil || !strings.Contains(out, "Service shop/gone not found") {
		t.Errorf("why a missing Service: %v\n%s", err, out)
	}
}

// TestPluginPreviewsAndReadsHistoryAsThemselves: kubectl ipledger preview
// and history with a person's own kubeconfig go through the aggregated
// API: a viewer previews a pool and reads every namespace's history; a
// person granted history only in shop (a RoleBinding) reads shop's
// Service and is refused bank's, with the fix.
func TestPluginPreviewsAndReadsHistoryAsThemselves(t *testing.T) {
	env := testenv.Get(t)
	serve(t, env)
	ctx := context.Background()
	bind(t, env, "hugo", "ipledger:viewer")
	dir := t.TempDir()
	hugo, err := env.CP.UserKubeconfig(dir, "hugo")
	if err != nil {
		t.Fatal(err)
	}
	// ivy: asking localhistoryqueries and reading history in shop only.
	for _, ns := range []string{"shop", "bank"} {
		if _, err := env.Kubectl(ctx, "create", "namespace", ns); err != nil && !strings.Contains(err.Error(), "AlreadyExists") {
			t.Fatal(err)
		}
		role := &rbacv1.Role{
			ObjectMeta: metav1.ObjectMeta{Name: "ivy-asks", Namespace: ns},
			Rules:      []rbacv1.PolicyRule{{APIGroups: []string{ipamapi.Group}, Resources: []string{"localhistoryqueries"}, Verbs: []string{"create"}}},
		}
		if ns == "shop" {
			role.Rules = append(role.Rules, rbacv1.PolicyRule{APIGroups: []string{authz.Group}, Resources: []string{"history"}, Verbs: []string{"get"}})
		}
		rb := &rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: "ivy-asks", Namespace: ns},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: role.Name},
			Subjects:   []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: "ivy"}},
		}
		if _, err := env.Client.RbacV1().Roles(ns).Create(ctx, role, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if _, err := env.Client.RbacV1().RoleBindings(ns).Create(ctx, rb, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_ = env.Client.RbacV1().Roles(ns).Delete(ctx, role.Name, metav1.DeleteOptions{})
			_ = env.Client.RbacV1().RoleBindings(ns).Delete(ctx, rb.Name, metav1.DeleteOptions{})
		})
	}
	ivy, err := env.CP.UserKubeconfig(dir, "ivy")
	if err != nil {
		t.Fatal(err)
	}
	pool := filepath.Join(dir, "pool.yaml")
	if err := os.WriteFile(pool, []byte("apiVersion: ipledger.io/v1alpha1\nkind: IPPool\nmetadata: {name: green}\nspec: {addresses: [198.51.100.0/24]}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	bin := env.Plugin(t)
	run := func(kubeconfig string, args ...string) (string, error) {
		out, err := exec.Command(bin, append([]string{"--kubeconfig", kubeconfig, "--api", "aggregated"}, args...)...).CombinedOutput()
		return string(out), err
	}
	for _, tc := range []struct {
		who, kubeconfig string
		args            []string
		want, not       []string
	}{
		{"hugo", hugo, []string{"preview", "-f", pool}, []string{"green (Create)", "1 pending Service would get addresses", "shop/pending"}, nil},
		{"hugo", hugo, []string{"history"}, []string{"192.0.2.10", "shop/web", "192.0.2.11", "bank/api", "192.0.2.12", "(router)"}, nil},
		{"hugo", hugo, []string{"history", "192.0.2.11", "-o", "json"}, []string{`"bank"`}, []string{"192.0.2.10"}},
		{"ivy", ivy, []string{"history", "shop/web"}, []string{"192.0.2.10", "shop/web", "granted"}, []string{"bank"}},
	} {
		out, err := run(tc.kubeconfig, tc.args...)
		if err != nil {
			t.Errorf("%s: kubectl ipledger %s: %v\n%s", tc.who, strings.Join(tc.args, " "), err, out)
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(out, w) {
				t.Errorf("%s: kubectl ipledger %s: no %q in\n%s", tc.who, strings.Join(tc.args, " "), w, out)
			}
		}
		for _, n := range tc.not {
			if strings.Contains(out, n) {
				t.Errorf("%s: kubectl ipledger %s: %q in\n%s", tc.who, strings.Join(tc.args, " "), n, out)
			}
		}
	}
	// ivy may ask in bank (the kube-apiserver lets her) but not read it:
	// ipam refuses, naming the grant.
	out, err := run(ivy, "history", "bank/api")
	if err == nil || !strings.Contains(out, "may not get history.ipledger.io in namespace bank") || strings.Contains(out, "192.0.2.11") {
		t.Errorf("ivy: history bank/api: %v\n%s", err, out)
	}
}
