package permissions

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"

	"github.com/ipledger/ipledger/lab/testenv"
)

const (
	kubeVIPPolicy = "ipledger-kube-vip-addresses"
	// kubeVIPAnnotation is what kube-vip announces (allocator's
	// AnnotationKubeVIPLoadBalancerIPs); ourRequest is ipledger's own
	// request annotation (AnnotationLoadBalancerIPs), which the refusals
	// point to.
	kubeVIPAnnotation = "kube-vip.io/loadbalancerIPs"
	ourRequest        = "ipledger.io/loadBalancerIPs"
	kubeVIPMigrators  = "ipledger:kube-vip-migrators"
)

// installKubeVIPComponent applies the policy of components/kube-vip, which
// testenv does not install (it is no part of base), and removes it when the
// test ends.
func installKubeVIPComponent(t *testing.T) {
	t.Helper()
	env := testenv.Get(t)
	file := filepath.Join(env.Root, "deploy/kustomize/components/kube-vip/policy.yaml")
	if _, err := env.Kubectl(context.Background(), "apply", "--server-side", "-f", file); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_, _ = env.Kubectl(context.Background(), "delete", "--ignore-not-found", "-f", file)
	})
}

func lbService(name string, annotations map[string]string, lbIP string) *corev1.Service {
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: annotations},
		Spec: corev1.ServiceSpec{
			Type: corev1.ServiceTypeLoadBalancer, LoadBalancerIP: lbIP,
			Ports: []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromInt32(8080), Protocol: corev1.ProtocolTCP}},
		},
	}
}

// TestOnlyIPAMTellsKubeVIPWhatToAnnounce: with components/kube-vip, a
// tenant (edit in its namespace) can neither set nor change
// kube-vip.io/loadbalancerIPs or spec.loadBalancerIP — through the Service
// or its status subresource — and is told to use ipledger.io/loadBalancerIPs;
// updates that keep them, or remove them, pass; ipam's status write of the
// annotation passes, and so does the migrators' group.
func TestOnlyIPAMTellsKubeVIPWhatToAnnounce(t *testing.T) {
	env := testenv.Get(t)
	ctx := context.Background()
	installKubeVIPComponent(t)
	ns := env.Namespace(t, nil)
	const user = "tenant"
	editor(t, ns, user)
	tenant := as(t, user).CoreV1().Services(ns)
	enforced(t, kubeVIPPolicy, func(ctx context.Context) error {
		_, err := tenant.Create(ctx, lbService("probe", map[string]string{kubeVIPAnnotation: "10.99.0.1"}, ""), dryRun)
		return err
	})

	// Refused: naming an address kube-vip would announce, at creation.
	_, err := tenant.Create(ctx, lbService("steal", map[string]string{kubeVIPAnnotation: "10.99.0.1"}, ""), metav1.CreateOptions{})
	refusedByPolicy(t, "a tenant creates a Service with kube-vip.io/loadbalancerIPs", err, kubeVIPPolicy)
	saysFix(t, err, kubeVIPAnnotation)
	_, err = tenant.Create(ctx, lbService("steal-dns", map[string]string{kubeVIPAnnotation: "other.example.com"}, ""), metav1.CreateOptions{})
	refusedByPolicy(t, "a tenant creates a Service with a hostname in kube-vip.io/loadbalancerIPs", err, kubeVIPPolicy)
	_, err = tenant.Create(ctx, lbService("steal-spec", nil, "10.99.0.1"), metav1.CreateOptions{})
	refusedByPolicy(t, "a tenant creates a Service with spec.loadBalancerIP", err, kubeVIPPolicy)
	saysFix(t, err, "spec.loadBalancerIP")

	// Allowed: asking ipam, and a Service without either.
	_, err = tenant.Create(ctx, lbService("asks", map[string]string{ourRequest: "10.99.0.1"}, ""), metav1.CreateOptions{})
	allowed(t, "a tenant asks with ipledger.io/loadBalancerIPs", err)

	// A Service as the migration leaves it (kube-vip-cloud-provider wrote
	// both), created by the migrators' group.
	migrator := as(t, "operator", kubeVIPMigrators).CoreV1().Services(ns)
	editor(t, ns, "operator")
	_, err = migrator.Create(ctx, lbService("migrated", map[string]string{kubeVIPAnnotation: "10.99.0.2"}, "10.99.0.2"), metav1.CreateOptions{})
	allowed(t, "the migrators' group creates a Service with both", err)
	if err != nil {
		t.FailNow()
	}

	// Updates that keep them pass: another field, through an update of the
	// whole object (kubectl apply, kubectl edit), a merge patch and
	// server-side apply.
	svc, err := env.Client.CoreV1().Services(ns).Get(ctx, "migrated", metav1.GetOptions{}) // edit here grants no get (testenv aggregates one level)
	if err != nil {
		t.Fatal(err)
	}
	svc.Labels = map[string]string{"team": "a"}
	_, err = tenant.Update(ctx, svc, metav1.UpdateOptions{})
	allowed(t, "a tenant updates a label, keeping kube-vip.io/loadbalancerIPs and spec.loadBalancerIP", err)
	_, err = tenant.Patch(ctx, "migrated", types.MergePatchType, []byte(`{"metadata":{"annotations":{"note":"x","`+kubeVIPAnnotation+`":"10.99.0.2"}}}`), metav1.PatchOptions{})
	allowed(t, "a tenant patches another annotation, restating kube-vip.io/loadbalancerIPs as it is", err)
	_, err = tenant.Patch(ctx, "migrated", types.ApplyPatchType, []byte(`{"apiVersion":"v1","kind":"Service","metadata":{"name":"migrated",`+
		`"annotations":{"`+kubeVIPAnnotation+`":"10.99.0.2"}},"spec":{"type":"LoadBalancer","loadBalancerIP":"10.99.0.2",`+
		`"ports":[{"name":"http","port":80,"targetPort":8080,"protocol":"TCP"}],"selector":{"app":"a"}}}`),
		metav1.PatchOptions{FieldManager: "kubectl", Force: ptrTo(true)})
	allowed(t, "a tenant server-side applies a selector, restating both as they are", err)

	// Changes are refused, through the Service and through its status.
	_, err = tenant.Patch(ctx, "migrated", types.MergePatchType, []byte(`{"metadata":{"annotations":{"`+kubeVIPAnnotation+`":"10.99.0.7"}}}`), metav1.PatchOptions{})
	refusedByPolicy(t, "a tenant changes kube-vip.io/loadbalancerIPs", err, kubeVIPPolicy)
	saysFix(t, err, kubeVIPAnnotation)
	_, err = tenant.Patch(ctx, "migrated", types.MergePatchType, []byte(`{"spec":{"loadBalancerIP":"10.99.0.7"}}`), metav1.PatchOptions{})
	refusedByPolicy(t, "a tenant changes spec.loadBalancerIP", err, kubeVIPPolicy)
	_, err = tenant.Patch(ctx, "asks", types.MergePatchType, []byte(`{"metadata":{"annotations":{"`+kubeVIPAnnotation+`":"10.99.0.1"}}}`), metav1.PatchOptions{})
	refusedByPolicy(t, "a tenant adds kube-vip.io/loadbalancerIPs", err, kubeVIPPolicy)
	statusWriter(t, ns, "tenant", rbacv1.Subject{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: user}, as(t, user))
	_, err = tenant.Patch(ctx, "asks", types.MergePatchType, []byte(`{"metadata":{"annotations":{"`+kubeVIPAnnotation+`":"10.99.0.1"}}}`), metav1.PatchOptions{}, "status")
	refusedByPolicy(t, "a tenant that may write Service status adds kube-vip.io/loadbalancerIPs through it", err, kubeVIPPolicy)

	// ipam's own write: the annotation with the status, on the status
	// subresource, under its field manager (services/ipam writeService).
	ipam := component(t, "ipam").CoreV1().Services(ns)
	_, err = ipam.Patch(ctx, "asks", types.MergePatchType, []byte(`{"metadata":{"annotations":{"`+kubeVIPAnnotation+`":"10.99.0.1",`+
		`"ipledger.io/allocated-from-pool":"blue"}},"status":{"loadBalancer":{"ingress":[{"ip":"10.99.0.1","ipMode":"VIP"}]}}}`),
		metav1.PatchOptions{FieldManager: "ipledger-ipam"}, "status")
	allowed(t, "ipam writes kube-vip.io/loadbalancerIPs with the status", err)
	_, err = ipam.Patch(ctx, "asks", types.MergePatchType, []byte(`{"metadata":{"annotations":{"`+kubeVIPAnnotation+`":"10.99.0.3"}}}`),
		metav1.PatchOptions{FieldManager: "ipledger-ipam"}, "status")
	allowed(t, "ipam changes kube-vip.io/loadbalancerIPs", err)
	// A ServiceAccount of the tenant's own namespace named as ipam's is not
	// ipam.
	impostor := serviceAccount(t, ns, "ipledger-ipam")
	statusWriter(t, ns, "impostor", rbacv1.Subject{Kind: rbacv1.ServiceAccountKind, Namespace: ns, Name: "ipledger-ipam"}, impostor)
	_, err = impostor.CoreV1().Services(ns).Patch(ctx, "asks", types.MergePatchType, []byte(`{"metadata":{"annotations":{"`+kubeVIPAnnotation+`":"10.99.0.9"}}}`), metav1.PatchOptions{}, "status")
	refusedByPolicy(t, "a ServiceAccount named ipledger-ipam in the tenant's namespace changes kube-vip.io/loadbalancerIPs", err, kubeVIPPolicy)

	// The migrators' group may change both (rolling back, step by step).
	_, err = migrator.Patch(ctx, "migrated", types.MergePatchType, []byte(`{"metadata":{"annotations":{"`+kubeVIPAnnotation+`":"10.99.0.4"}},"spec":{"loadBalancerIP":"10.99.0.4"}}`), metav1.PatchOptions{})
	allowed(t, "the migrators' group changes both", err)

	// Removing them passes: it names no address.
	_, err = tenant.Patch(ctx, "migrated", types.MergePatchType, []byte(`{"metadata":{"annotations":{"`+kubeVIPAnnotation+`":null}},"spec":{"loadBalancerIP":null}}`), metav1.PatchOptions{})
	allowed(t, "a tenant removes both", err)
}

// saysFix checks that a refusal names the field and the request annotation
// to use instead.
func saysFix(t *testing.T, err error, field string) {
	t.Helper()
	if err == nil {
		return
	}
	if msg := err.Error(); !strings.Contains(msg, field) || !strings.Contains(msg, ourRequest) {
		t.Errorf("refusal %q does not name %s and %s", msg, field, ourRequest)
	}
}

// statusWriter lets subject (whose client is c) patch Service status in
// namespace, as a too-generous Role would: the policy must hold there too.
func statusWriter(t *testing.T, namespace, name string, subject rbacv1.Subject, c kubernetes.Interface) {
	t.Helper()
	env := testenv.Get(t)
	ctx := context.Background()
	_, err := env.Client.RbacV1().Roles(namespace).Create(ctx, &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Name: "status-writer:" + name},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"services/status"}, Verbs: []string{"patch"}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = env.Client.RbacV1().RoleBindings(namespace).Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "status-writer:" + name},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "status-writer:" + name},
		Subjects:   []rbacv1.Subject{subject},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 30*time.Second, func() error {
		_, err := c.CoreV1().Services(namespace).Patch(ctx, "asks", types.MergePatchType, []byte(`{"metadata":{"annotations":{"probe":"1"}}}`),
			metav1.PatchOptions{DryRun: []string{metav1.DryRunAll}}, "status")
		return err
	})
}
