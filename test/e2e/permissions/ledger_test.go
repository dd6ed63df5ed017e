package permissions

import (
	"context"
	"errors"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"

	"github.com/ipledger/ipledger/lab/controlplane"
	"github.com/ipledger/ipledger/lab/testenv"
)

const (
	ledgerPolicy = "ipledger-ledger-writers"
	// ledgerLabel and ledgerPrefix are ledger.LabelKey and ledger.NamePrefix
	// (services/ipam/internal/ledger, which this module cannot import).
	ledgerLabel  = "ipledger.io/ledger"
	ledgerPrefix = "ipledger-ledger-"
	breakGlass   = "ipledger:ledger-admins"
)

func configMap(namespace, name string, ledger bool) *corev1.ConfigMap {
	cm := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace},
		Data:       map[string]string{"format": "ipledger.io/ledger/v1", "epoch": "1", "allocations.jsonl": ""},
	}
	if ledger {
		cm.Labels = map[string]string{ledgerLabel: "true"}
	}
	return cm
}

// aggregate fills the rules of the built-in ClusterRole name (edit) from the
// ClusterRoles its aggregationRule selects, as kube-controller-manager's
// clusterrole-aggregation controller does in a real cluster: this API server
// runs without a controller-manager, so edit would grant nothing.
func aggregate(t *testing.T, name string) {
	t.Helper()
	env := testenv.Get(t)
	ctx := context.Background()
	roles := env.Client.RbacV1().ClusterRoles()
	role, err := roles.Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if role.AggregationRule == nil || len(role.Rules) > 0 {
		return
	}
	for _, sel := range role.AggregationRule.ClusterRoleSelectors {
		selector, err := metav1.LabelSelectorAsSelector(&sel)
		if err != nil {
			t.Fatal(err)
		}
		list, err := roles.List(ctx, metav1.ListOptions{LabelSelector: selector.String()})
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range list.Items {
			if r.Name != name {
				role.Rules = append(role.Rules, r.Rules...)
			}
		}
	}
	if _, err := roles.Update(ctx, role, metav1.UpdateOptions{}); err != nil && !apierrors.IsConflict(err) {
		t.Fatal(err)
	}
}

// editor binds user to the built-in ClusterRole edit in namespace, as a team
// that runs its things in ipledger-system would be, and waits until the
// authorizer allows it to create ConfigMaps there.
func editor(t *testing.T, namespace, user string) {
	t.Helper()
	bindEdit(t, namespace, user, rbacv1.Subject{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: user})
}

// bindEdit is editor for subject, whose user name is user.
func bindEdit(t *testing.T, namespace, user string, subject rbacv1.Subject) {
	t.Helper()
	env := testenv.Get(t)
	ctx := context.Background()
	aggregate(t, "edit")
	_, err := env.Client.RbacV1().RoleBindings(namespace).Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "edit:" + user},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "edit"},
		Subjects:   []rbacv1.Subject{subject},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = env.Client.RbacV1().RoleBindings(namespace).Delete(context.Background(), "edit:"+user, metav1.DeleteOptions{})
	})
	testenv.Eventually(t, 30*time.Second, func() error {
		r, err := env.Client.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authorizationv1.SubjectAccessReview{
			Spec: authorizationv1.SubjectAccessReviewSpec{User: user, Groups: []string{"system:authenticated"},
				ResourceAttributes: &authorizationv1.ResourceAttributes{Namespace: namespace, Verb: "create", Resource: "configmaps"}},
		}, metav1.CreateOptions{})
		if err == nil && !r.Status.Allowed {
			err = errors.New("edit is not in effect yet")
		}
		return err
	})
}

// TestOnlyIPAMWritesTheLedger: `edit` in ipledger-system grants every
// ConfigMap there; the policy keeps the ledger's to ipam, the break-glass
// group, system:masters and the namespace controller's deletes, whichever
// of name and label marks them, before or after the write.
func TestOnlyIPAMWritesTheLedger(t *testing.T) {
	env := testenv.Get(t)
	ctx := context.Background()
	const user = "team-member"
	editor(t, system, user)
	cms := as(t, user).CoreV1().ConfigMaps(system)
	enforced(t, ledgerPolicy, func(ctx context.Context) error {
		_, err := cms.Create(ctx, configMap(system, ledgerPrefix+"probe", true), dryRun)
		return err
	})
	admin := env.Client.CoreV1().ConfigMaps(system)
	head, err := admin.Create(ctx, configMap(system, ledgerPrefix+"900", true), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = admin.Delete(context.Background(), head.Name, metav1.DeleteOptions{}) })

	// A member of edit: no ledger write, whichever way it is marked.
	_, err = cms.Create(ctx, configMap(system, ledgerPrefix+"901", true), metav1.CreateOptions{})
	refusedByPolicy(t, "edit creates a ledger shard", err, ledgerPolicy)
	_, err = cms.Create(ctx, configMap(system, ledgerPrefix+"902", false), metav1.CreateOptions{})
	refusedByPolicy(t, "edit creates an unlabelled ConfigMap named as a shard", err, ledgerPolicy)
	_, err = cms.Create(ctx, configMap(system, "evil-shard", true), metav1.CreateOptions{})
	refusedByPolicy(t, "edit creates a ConfigMap labelled as the ledger", err, ledgerPolicy)
	forged := head.DeepCopy()
	forged.Data["allocations.jsonl"] = `{"ip":"10.0.0.1","pool":"blue","service":"evil/x","uid":"u","allocatedAt":"2026-12-02T00:00:00Z"}` + "\n"
	_, err = cms.Update(ctx, forged, metav1.UpdateOptions{})
	refusedByPolicy(t, "edit rewrites a shard", err, ledgerPolicy)
	unlabelled := head.DeepCopy()
	unlabelled.Labels = nil
	_, err = cms.Update(ctx, unlabelled, metav1.UpdateOptions{})
	refusedByPolicy(t, "edit removes the ledger label of a shard", err, ledgerPolicy)
	err = cms.Delete(ctx, head.Name, metav1.DeleteOptions{})
	refusedByPolicy(t, "edit deletes a shard", err, ledgerPolicy)
	// The address history is the ledger's, for the policy: an abuse report
	// must be able to trust it (docs/history.md).
	segment := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "ipledger-history-901", Namespace: system,
		Labels: map[string]string{"ipledger.io/history": "true"}}, Data: map[string]string{"format": "ipledger.io/history/v1"}}
	_, err = cms.Create(ctx, segment, metav1.CreateOptions{})
	refusedByPolicy(t, "edit creates an address history segment", err, ledgerPolicy)

	// ... and every other ConfigMap as before, as long as it stays one.
	notes, err := cms.Create(ctx, configMap(system, "team-notes", false), metav1.CreateOptions{})
	allowed(t, "edit creates another ConfigMap", err)
	if err == nil {
		marked := notes.DeepCopy()
		marked.Labels = map[string]string{ledgerLabel: "true"}
		_, err = cms.Update(ctx, marked, metav1.UpdateOptions{})
		refusedByPolicy(t, "edit labels another ConfigMap as the ledger", err, ledgerPolicy)
		notes.Data["note"] = "hello"
		_, err = cms.Update(ctx, notes, metav1.UpdateOptions{})
		allowed(t, "edit updates another ConfigMap", err)
		allowed(t, "edit deletes another ConfigMap", cms.Delete(ctx, notes.Name, metav1.DeleteOptions{}))
	}

	// ipam, i.e. its ServiceAccount from a Pod (RBAC: list, create, update;
	// TestTheLedgerWriterIsIPAMsPod for the Pod).
	ipam := fromPod(t, system, "ipledger-ipam").CoreV1().ConfigMaps(system)
	shard, err := ipam.Create(ctx, configMap(system, ledgerPrefix+"903", true), metav1.CreateOptions{})
	allowed(t, "ipam creates a shard", err)
	if err == nil {
		shard.Data["epoch"] = "2"
		_, err = ipam.Update(ctx, shard, metav1.UpdateOptions{})
		allowed(t, "ipam updates its shard", err)
	}
	_, err = ipam.Create(ctx, segment, metav1.CreateOptions{})
	allowed(t, "ipam creates an address history segment", err)
	allowed(t, "ipam deletes an address history segment emptied by retention", ipam.Delete(ctx, segment.Name, metav1.DeleteOptions{}))

	// The break-glass group: repairs and restores.
	oncall := as(t, "oncall", breakGlass).CoreV1().ConfigMaps(system)
	restored, err := oncall.Create(ctx, configMap(system, ledgerPrefix+"904", true), metav1.CreateOptions{})
	allowed(t, "the break-glass group restores a shard", err)
	if err == nil {
		restored.Data["epoch"] = "3"
		_, err = oncall.Update(ctx, restored, metav1.UpdateOptions{})
		allowed(t, "the break-glass group repairs a shard", err)
		allowed(t, "the break-glass group deletes a shard", oncall.Delete(ctx, restored.Name, metav1.DeleteOptions{}))
	}

	// The testenv admin (system:masters), as the tests that corrupt or lose
	// the ledger on purpose act.
	current, err := admin.Get(ctx, head.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	current.Data["epoch"] = "9"
	_, err = admin.Update(ctx, current, metav1.UpdateOptions{})
	allowed(t, "system:masters rewrites a shard", err)

	// Uninstall: the namespace controller deletes the namespace's
	// ConfigMaps, ledger included, one by one or by collection.
	nsController := serviceAccount(t, "kube-system", "namespace-controller").CoreV1().ConfigMaps(system)
	allowed(t, "the namespace controller deletes a shard", nsController.Delete(ctx, ledgerPrefix+"903", metav1.DeleteOptions{}))
	other := env.Namespace(t, nil)
	for _, name := range []string{ledgerPrefix + "0", ledgerPrefix + "1"} {
		if _, err := env.Client.CoreV1().ConfigMaps(other).Create(ctx, configMap(other, name, true), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	err = serviceAccount(t, "kube-system", "namespace-controller").CoreV1().ConfigMaps(other).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{})
	allowed(t, "the namespace controller deletes a namespace's ledger by collection", err)
	err = as(t, "system:kube-controller-manager").CoreV1().ConfigMaps(system).Delete(ctx, head.Name, metav1.DeleteOptions{DryRun: []string{metav1.DryRunAll}})
	if byPolicy(err, ledgerPolicy) {
		t.Errorf("kube-controller-manager (without per-controller ServiceAccounts) deletes a shard: refused by the policy: %v", err)
	}
	err = nsController.Delete(ctx, head.Name, metav1.DeleteOptions{DryRun: []string{metav1.DryRunAll}})
	allowed(t, "the namespace controller deletes (dry run) the head", err)
	allowed(t, "system:masters deletes a shard", admin.Delete(ctx, head.Name, metav1.DeleteOptions{}))
}

// TestLedgerOfAnotherNamespaceIsItsIPAMs: ipam keeps its ledger in its own
// namespace (--namespace); there, that namespace's ipledger-ipam writes it
// and ipledger-system's does not.
func TestLedgerOfAnotherNamespaceIsItsIPAMs(t *testing.T) {
	env := testenv.Get(t)
	ctx := context.Background()
	ns := env.Namespace(t, nil)
	aggregate(t, "edit")
	for _, sa := range []string{"ipledger-ipam", "stranger"} {
		_, err := env.Client.RbacV1().RoleBindings(ns).Create(ctx, &rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: sa},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "edit"},
			Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: sa, Namespace: ns}, {Kind: rbacv1.ServiceAccountKind, Name: sa, Namespace: system}},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
	}
	stranger := serviceAccount(t, ns, "stranger").CoreV1().ConfigMaps(ns)
	testenv.Eventually(t, 30*time.Second, func() error {
		_, err := stranger.Create(ctx, configMap(ns, "rbac-probe", false), dryRun)
		return err
	})
	enforced(t, ledgerPolicy, func(ctx context.Context) error {
		_, err := stranger.Create(ctx, configMap(ns, ledgerPrefix+"0", true), dryRun)
		return err
	})
	_, err := fromPod(t, system, "ipledger-ipam").CoreV1().ConfigMaps(ns).Create(ctx, configMap(ns, ledgerPrefix+"0", true), dryRun)
	refusedByPolicy(t, "ipledger-system's ipam writes another namespace's ledger", err, ledgerPolicy)
	_, err = fromPod(t, ns, "ipledger-ipam").CoreV1().ConfigMaps(ns).Create(ctx, configMap(ns, ledgerPrefix+"0", true), dryRun)
	allowed(t, "the namespace's own ipam writes its ledger", err)
}

// TestTheLedgerWriterIsIPAMsPod: the built-in edit lets its members
// impersonate the ServiceAccounts of its namespace, ipledger-ipam included;
// the policy asks ipam's writes for the Pod name that the API server puts in
// the userInfo of a token bound to a Pod, which impersonation can only
// supply with `impersonate` on userextras, which edit lacks. What edit still
// can (make a Pod of ipam's, mint a token bound to it) docs/security.md says:
// write access in ipledger's namespace is ledger write.
func TestTheLedgerWriterIsIPAMsPod(t *testing.T) {
	env := testenv.Get(t)
	ctx := context.Background()
	const deployer = "deployer"
	user := "system:serviceaccount:" + system + ":" + deployer
	token, err := env.ServiceAccountToken(ctx, system, deployer)
	if err != nil {
		t.Fatal(err)
	}
	bindEdit(t, system, user, rbacv1.Subject{Kind: rbacv1.ServiceAccountKind, Name: deployer, Namespace: system})
	shard := configMap(system, ledgerPrefix+"960", true)
	enforced(t, ledgerPolicy, func(ctx context.Context) error {
		_, err := withToken(t, token, rest.ImpersonationConfig{}).CoreV1().ConfigMaps(system).Create(ctx, shard, dryRun)
		return err
	})

	asIPAM := rest.ImpersonationConfig{UserName: "system:serviceaccount:" + system + ":ipledger-ipam"}
	impersonated := withToken(t, token, asIPAM)
	if _, err := impersonated.CoreV1().ConfigMaps(system).List(ctx, metav1.ListOptions{}); err != nil {
		t.Fatalf("edit impersonates ipam (and reads as it): %v", err)
	}
	_, err = impersonated.CoreV1().ConfigMaps(system).Create(ctx, shard, dryRun)
	refusedByPolicy(t, "edit, impersonating ipam, creates a shard", err, ledgerPolicy)
	withPod := asIPAM
	withPod.Extra = map[string][]string{controlplane.PodNameExtra: {"ipledger-ipam-7c9d8-x2x4q"}}
	_, err = withToken(t, token, withPod).CoreV1().ConfigMaps(system).Create(ctx, shard, dryRun)
	refusedByRBAC(t, "edit, impersonating ipam and a Pod name, creates a shard", err)

	_, err = component(t, "ipam").CoreV1().ConfigMaps(system).Create(ctx, shard, dryRun)
	refusedByPolicy(t, "ipam impersonated by system:masters without a Pod creates a shard", err, ledgerPolicy)
	unbound, err := env.ServiceAccountToken(ctx, system, "ipledger-ipam")
	if err != nil {
		t.Fatal(err)
	}
	_, err = withToken(t, unbound, rest.ImpersonationConfig{}).CoreV1().ConfigMaps(system).Create(ctx, shard, dryRun)
	refusedByPolicy(t, "ipam with a token bound to no Pod creates a shard", err, ledgerPolicy)
	_, err = fromPod(t, system, "ipledger-ipam").CoreV1().ConfigMaps(system).Create(ctx, shard, dryRun)
	allowed(t, "ipam from its Pod creates a shard", err)

	// What edit can still do, and the docs say: run a Pod as ipam (here one
	// nothing runs) and mint a token bound to it.
	editClient := withToken(t, token, rest.ImpersonationConfig{})
	pod, err := editClient.CoreV1().Pods(system).Create(ctx, controlplane.TokenHolder("impostor", "ipledger-ipam"), metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("edit creates a Pod running as ipam: %v", err)
	}
	t.Cleanup(func() {
		_ = env.Client.CoreV1().Pods(system).Delete(context.Background(), pod.Name, metav1.DeleteOptions{})
	})
	tr, err := editClient.CoreV1().ServiceAccounts(system).CreateToken(ctx, "ipledger-ipam", &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{BoundObjectRef: &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("edit mints a token of ipam bound to its Pod: %v", err)
	}
	_, err = withToken(t, tr.Status.Token, rest.ImpersonationConfig{}).CoreV1().ConfigMaps(system).Create(ctx, shard, dryRun)
	allowed(t, "edit, with a token of ipam bound to a Pod it made, creates a shard (docs/security.md: write access in ipledger-system is ledger write)", err)
}

// TestBreakGlassByGrantedImpersonation follows docs/security.md for a person
// who is not a cluster-admin: a ClusterRole that lets her impersonate her own
// name and the group ipledger:ledger-admins, and nothing else. (Here she is
// a ServiceAccount with a token, acting as user alice: this API server
// authenticates no users but its admin.)
func TestBreakGlassByGrantedImpersonation(t *testing.T) {
	env := testenv.Get(t)
	ctx := context.Background()
	ns := env.Namespace(t, nil)
	role := "ipledger:ledger-breakglass:" + ns
	_, err := env.Client.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: role},
		Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"groups"}, ResourceNames: []string{breakGlass}, Verbs: []string{"impersonate"}},
			{APIGroups: []string{""}, Resources: []string{"users"}, ResourceNames: []string{"alice"}, Verbs: []string{"impersonate"}},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = env.Client.RbacV1().ClusterRoles().Delete(context.Background(), role, metav1.DeleteOptions{})
	})
	_, err = env.Client.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: role},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: "alice", Namespace: ns}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = env.Client.RbacV1().ClusterRoleBindings().Delete(context.Background(), role, metav1.DeleteOptions{})
	})
	token, err := env.ServiceAccountToken(ctx, ns, "alice")
	if err != nil {
		t.Fatal(err)
	}
	client := func(impersonate rest.ImpersonationConfig) typedcorev1.CoreV1Interface {
		cfg := rest.AnonymousClientConfig(env.Config)
		cfg.BearerToken = token
		cfg.Impersonate = impersonate
		c, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			t.Fatal(err)
		}
		return c.CoreV1()
	}
	shard := configMap(system, ledgerPrefix+"950", true)
	breakGlassed := client(rest.ImpersonationConfig{UserName: "alice", Groups: []string{breakGlass}}).ConfigMaps(system)
	editor(t, system, "breakglass-probe")
	enforced(t, ledgerPolicy, func(ctx context.Context) error {
		_, err := as(t, "breakglass-probe").CoreV1().ConfigMaps(system).Create(ctx, shard, dryRun)
		return err
	})
	testenv.Eventually(t, 30*time.Second, func() error { // the ClusterRoleBinding reaching the authorizer
		_, err := breakGlassed.Create(ctx, shard, dryRun)
		return err
	})
	_, err = breakGlassed.Create(ctx, shard, metav1.CreateOptions{})
	allowed(t, "alice, impersonating the group, restores a shard", err)
	allowed(t, "alice, impersonating the group, deletes it", breakGlassed.Delete(ctx, shard.Name, metav1.DeleteOptions{}))

	_, err = client(rest.ImpersonationConfig{}).ConfigMaps(system).Create(ctx, shard, dryRun)
	refusedByRBAC(t, "alice as herself writes a shard", err)
	_, err = client(rest.ImpersonationConfig{UserName: "alice", Groups: []string{"system:masters"}}).ConfigMaps(system).Create(ctx, shard, dryRun)
	refusedByRBAC(t, "alice impersonates system:masters", err)
	_, err = client(rest.ImpersonationConfig{UserName: "bob", Groups: []string{breakGlass}}).ConfigMaps(system).Create(ctx, shard, dryRun)
	refusedByRBAC(t, "alice impersonates the group under another name", err)
}
