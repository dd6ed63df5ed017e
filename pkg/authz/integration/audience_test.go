package integration

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	authenticationv1 "k8s.io/api/authentication/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/ipledger/ipledger/lab/testenv"
	"github.com/ipledger/ipledger/pkg/authz"
)

// TestTokenWithoutTheAudienceIsRefused: a ServiceAccount token meant for the
// Kubernetes API (the default audience, what a Pod's automounted token and
// `kubectl create token` without --audience carry) is refused even though its
// subject is bound to ipledger:viewer.
func TestTokenWithoutTheAudienceIsRefused(t *testing.T) {
	env := testenv.Get(t)
	ctx := context.Background()
	ns := env.Namespace(t, nil)
	apiToken, err := env.ServiceAccountToken(ctx, ns, "viewer")
	if err != nil {
		t.Fatal(err)
	}
	bindViewer(t, env.Client, ns, "viewer")
	a := newAuthorizer(env.Client, rules, slog.New(slog.DiscardHandler))
	a.SetCacheTTLs(0, 0)
	// Wait until RBAC knows the binding, proven with a token for ipledger.
	grpcToken, err := env.GRPCToken(ctx, ns, "viewer")
	if err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 10*time.Second, func() error {
		_, err := a.Authorize(withToken(grpcToken), listAllocations)
		return err
	})

	_, err = a.Authorize(withToken(apiToken), listAllocations)
	if status.Code(err) != codes.Unauthenticated {
		t.Fatalf("a token for the Kubernetes API: %v, want Unauthenticated", err)
	}
	msg := status.Convert(err).Message()
	for _, want := range []string{authz.IPAMAudience, "--audience"} {
		if !strings.Contains(msg, want) {
			t.Errorf("refusal %q does not name %q", msg, want)
		}
	}
}

// TestAPIServerRefusesIPledgerTokens: the kube-apiserver (whose
// --api-audiences do not include ipledger's) refuses a token projected for
// ipledger, so a token sent to an ipledger server cannot be replayed against
// the Kubernetes API.
func TestAPIServerRefusesIPledgerTokens(t *testing.T) {
	env := testenv.Get(t)
	ctx := context.Background()
	ns := env.Namespace(t, nil)
	grpcToken, err := env.GRPCToken(ctx, ns, "replayed")
	if err != nil {
		t.Fatal(err)
	}
	apiToken, err := env.ServiceAccountToken(ctx, ns, "replayed")
	if err != nil {
		t.Fatal(err)
	}
	whoami := func(token string) error {
		c, err := kubernetes.NewForConfig(env.CP.TokenConfig(token))
		if err != nil {
			t.Fatal(err)
		}
		_, err = c.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
		return err
	}
	if err := whoami(apiToken); err != nil {
		t.Fatalf("the same ServiceAccount's token for the Kubernetes API: %v, want accepted", err)
	}
	if err := whoami(grpcToken); !apierrors.IsUnauthorized(err) {
		t.Fatalf("a token for %s against the Kubernetes API: %v, want 401 Unauthorized", testenv.AllGRPCAudiences, err)
	}
}
