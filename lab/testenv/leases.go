package testenv

import (
	"context"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
)

// GrantLease lets ServiceAccount namespace/serviceAccount get and update the
// Lease namespace/lease. deploy/kustomize/base/rbac grants each component
// only its own Lease (ipledger-ipam, ipledger-endpoints, ipledger-eipd), so
// a test that runs a component under its ServiceAccount with a Lease of its
// own (to stay apart from the other tests of its binary) grants that one, as
// an operator with --leader-elect-lease-name would patch the Role. It waits
// until the API server's authorizer allows the update and removes the grant
// when the test ends.
func (e *Env) GrantLease(t testing.TB, namespace, serviceAccount, lease string) {
	t.Helper()
	ctx := context.Background()
	name := "ipledger-test:" + serviceAccount + ":" + lease
	role := &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace},
		Rules: []rbacv1.PolicyRule{{
			APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"},
			ResourceNames: []string{lease}, Verbs: []string{"get", "update"},
		}},
	}
	binding := &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: name},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: serviceAccount, Namespace: namespace}},
	}
	rbac := e.Client.RbacV1()
	if _, err := rbac.Roles(namespace).Create(ctx, role, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatalf("grant Lease %s/%s: %v", namespace, lease, err)
	} else if err == nil {
		t.Cleanup(func() { _ = rbac.Roles(namespace).Delete(context.Background(), name, metav1.DeleteOptions{}) })
	}
	if _, err := rbac.RoleBindings(namespace).Create(ctx, binding, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatalf("grant Lease %s/%s: %v", namespace, lease, err)
	} else if err == nil {
		t.Cleanup(func() { _ = rbac.RoleBindings(namespace).Delete(context.Background(), name, metav1.DeleteOptions{}) })
	}
	review := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
		User:   "system:serviceaccount:" + namespace + ":" + serviceAccount,
		Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + namespace, "system:authenticated"},
		ResourceAttributes: &authorizationv1.ResourceAttributes{
			Namespace: namespace, Verb: "update", Group: "coordination.k8s.io", Resource: "leases", Name: lease,
		},
	}}
	err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		got, err := e.Client.AuthorizationV1().SubjectAccessReviews().Create(ctx, review, metav1.CreateOptions{})
		if err != nil {
			return false, err
		}
		return got.Status.Allowed, nil
	})
	if err != nil {
		t.Fatalf("grant Lease %s/%s to %s: not authorized after 30s: %v", namespace, lease, serviceAccount, err)
	}
}
