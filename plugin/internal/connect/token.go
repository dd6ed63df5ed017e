package connect

import (
	"context"
	"fmt"
	"os"
	"strings"

	authenticationv1 "k8s.io/api/authentication/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/ipledger/ipledger/pkg/authz"
)

// Audience is the audience of ipam's gRPC server, the one server the plugin
// calls (docs/security.md).
const Audience = authz.IPAMAudience

// tokenSeconds is the requested token's life: the API server's minimum. The
// plugin needs it for one command.
const tokenSeconds = 600

const saPrefix = "system:serviceaccount:"

// Token returns the bearer token to send to ipam: the --token-file's, or one
// requested with the TokenRequest API for --service-account or, when the
// kubeconfig authenticates as a ServiceAccount, for that one.
func Token(ctx context.Context, client kubernetes.Interface, f Flags) (string, error) {
	if f.TokenFile != "" {
		b, err := os.ReadFile(f.TokenFile)
		if err != nil {
			return "", fmt.Errorf("--token-file: %w", err)
		}
		tok := strings.TrimSpace(string(b))
		if tok == "" {
			return "", fmt.Errorf("--token-file %s is empty", f.TokenFile)
		}
		return tok, nil
	}
	ns, name, err := ServiceAccountOf(f.ServiceAccount, f.Namespace)
	if err != nil {
		return "", err
	}
	if name == "" {
		user, err := whoAmI(ctx, client)
		if err != nil {
			return "", err
		}
		var ok bool
		if ns, name, ok = strings.Cut(strings.TrimPrefix(user, saPrefix), ":"); !strings.HasPrefix(user, saPrefix) || !ok {
			return "", fmt.Errorf("ipam accepts only ServiceAccount tokens for audience %s, and your kubeconfig authenticates as %q: "+
				"pass --service-account NAMESPACE/NAME (a ServiceAccount you may create tokens for, bound to ipledger:viewer or ipledger:operator), "+
				"or --token-file", Audience, user)
		}
	}
	expiry := int64(tokenSeconds)
	tr, err := client.CoreV1().ServiceAccounts(ns).CreateToken(ctx, name, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{Audiences: []string{Audience}, ExpirationSeconds: &expiry},
	}, metav1.CreateOptions{})
	switch {
	case apierrors.IsForbidden(err):
		return "", fmt.Errorf("requesting a token for ServiceAccount %s/%s: %w\nfix: you need create on serviceaccounts/token for it: "+
			"kubectl -n %s create role %s-token --verb=create --resource=serviceaccounts/token --resource-name=%s, and a rolebinding of it to you; or pass --token-file",
			ns, name, err, ns, name, name)
	case apierrors.IsNotFound(err):
		return "", fmt.Errorf("ServiceAccount %s/%s does not exist: create it (kubectl -n %s create serviceaccount %s) and bind it to ipledger:viewer, or name another with --service-account", ns, name, ns, name)
	case err != nil:
		return "", fmt.Errorf("requesting a token for ServiceAccount %s/%s: %w", ns, name, err)
	}
	return tr.Status.Token, nil
}

// ServiceAccountOf parses --service-account: NAME (in defaultNS) or NS/NAME.
func ServiceAccountOf(flag, defaultNS string) (namespace, name string, err error) {
	if flag == "" {
		return "", "", nil
	}
	ns, name, found := strings.Cut(flag, "/")
	if !found {
		return defaultNS, flag, nil
	}
	if ns == "" || name == "" || strings.Contains(name, "/") {
		return "", "", fmt.Errorf("--service-account %q: want NAME or NAMESPACE/NAME", flag)
	}
	return ns, name, nil
}

// whoAmI asks the API server who the kubeconfig is (SelfSubjectReview).
func whoAmI(ctx context.Context, client kubernetes.Interface) (string, error) {
	r, err := client.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil {
		return "", fmt.Errorf("asking the API server who you are (to request a token for ipam): %w; pass --service-account or --token-file", err)
	}
	return r.Status.UserInfo.Username, nil
}
