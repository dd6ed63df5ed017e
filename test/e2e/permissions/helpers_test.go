package permissions

import (
	"context"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/ipledger/ipledger/lab/testenv"
)

const system = testenv.SystemNamespace

// dryRun asks the API server to run every check, admission included, and
// store nothing.
var dryRun = metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}

// as is a client that the testenv admin (system:masters, which may
// impersonate anyone) sends as user with groups: the request is
// authorized and admitted as that user.
func as(t *testing.T, user string, groups ...string) kubernetes.Interface {
	t.Helper()
	c, err := testenv.Get(t).Impersonate(user, groups...)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// serviceAccount is a client acting as ServiceAccount namespace/name, with
// the groups its token would carry.
func serviceAccount(t *testing.T, namespace, name string) kubernetes.Interface {
	t.Helper()
	return as(t, "system:serviceaccount:"+namespace+":"+name, "system:serviceaccounts", "system:serviceaccounts:"+namespace)
}

// fromPod is a client acting as ServiceAccount namespace/name with a token
// bound to a Pod of it (testenv.PodToken), as a component's Pod sends its
// requests: the API server adds the Pod's name to the userInfo.
func fromPod(t *testing.T, namespace, name string) kubernetes.Interface {
	t.Helper()
	env := testenv.Get(t)
	token, err := env.PodToken(context.Background(), namespace, name)
	if err != nil {
		t.Fatal(err)
	}
	return withToken(t, token, rest.ImpersonationConfig{})
}

// withToken is a client that authenticates with token, impersonating as
// impersonate says (nobody when it is empty).
func withToken(t *testing.T, token string, impersonate rest.ImpersonationConfig) kubernetes.Interface {
	t.Helper()
	cfg := rest.AnonymousClientConfig(testenv.Get(t).Config)
	cfg.BearerToken = token
	cfg.Impersonate = impersonate
	c, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// component is the client of ipledger component c (ipam, endpoints, eipd,
// watcher) on its ServiceAccount ipledger-<c> of ipledger-system, by
// impersonation: it carries no Pod, so ipam's ledger writes need fromPod.
func component(t *testing.T, c string) kubernetes.Interface {
	t.Helper()
	return serviceAccount(t, system, "ipledger-"+c)
}

// enforced waits until try, a request policy must refuse, is refused by it:
// the API server loads policies asynchronously, and a test that asserted
// an allowed write before would prove nothing. A policy that is not
// installed at all is an error, and the test goes on, so that each of its
// assertions says what the missing policy lets through.
func enforced(t *testing.T, policy string, try func(context.Context) error) {
	t.Helper()
	env := testenv.Get(t)
	ctx := context.Background()
	if _, err := env.Client.AdmissionregistrationV1().ValidatingAdmissionPolicies().Get(ctx, policy, metav1.GetOptions{}); err != nil {
		t.Errorf("ValidatingAdmissionPolicy %s: %v", policy, err)
		return
	}
	var last error
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
		last = try(ctx)
		return byPolicy(last, policy), nil
	})
	if err != nil {
		t.Fatalf("ValidatingAdmissionPolicy %s is not enforced after 60s (last answer: %v)", policy, last)
	}
}

// byPolicy: err is policy's refusal, by a validation that evaluated to
// false (an expression that fails to compile or to run refuses too, under
// failurePolicy Fail, and says so).
func byPolicy(err error, policy string) bool {
	return apierrors.IsForbidden(err) && strings.Contains(err.Error(), "ValidatingAdmissionPolicy '"+policy+"'") &&
		!strings.Contains(err.Error(), "resulted in error") && !strings.Contains(err.Error(), "compil")
}

// refusedByPolicy fails the test unless err is policy's refusal.
func refusedByPolicy(t *testing.T, what string, err error, policy string) {
	t.Helper()
	if !byPolicy(err, policy) {
		t.Errorf("%s: want a refusal by ValidatingAdmissionPolicy %s, got %v", what, policy, err)
		return
	}
	t.Logf("%s: %v", what, err)
}

// refusedByRBAC fails the test unless err is the authorizer's refusal.
func refusedByRBAC(t *testing.T, what string, err error) {
	t.Helper()
	if !apierrors.IsForbidden(err) || strings.Contains(err.Error(), "ValidatingAdmissionPolicy") {
		t.Errorf("%s: want a refusal by RBAC, got %v", what, err)
	}
}

// allowed fails the test if err is not nil.
func allowed(t *testing.T, what string, err error) {
	t.Helper()
	if err != nil {
		t.Errorf("%s: want it allowed, got %v", what, err)
	}
}
