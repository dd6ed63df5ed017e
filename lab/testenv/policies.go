package testenv

import (
	"context"
	"fmt"
	"strings"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// waitForFences waits until the API server enforces the ValidatingAdmissionPolicies of
// deploy/kustomize/base that fence what ipledger's components and everyone
// else may write (docs/security.md): each probe is a dry-run write the
// policy must refuse, by an identity whose RBAC allows it, so that the
// refusal can only be the policy's. ipledger-eipd-node-labels has no such
// probe without a Node; it is applied with the two of base/rbac probed here.
func (e *Env) waitForFences(ctx context.Context) error {
	dryRun := metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}
	endpoints, err := e.Impersonate("system:serviceaccount:"+SystemNamespace+":ipledger-endpoints", "system:serviceaccounts", "system:serviceaccounts:"+SystemNamespace)
	if err != nil {
		return err
	}
	// The root CA publisher's bootstrap role may create ConfigMaps in every
	// namespace; it is none of those the ledger policy lets write the ledger.
	publisher, err := e.Impersonate("system:serviceaccount:kube-system:root-ca-cert-publisher", "system:serviceaccounts", "system:serviceaccounts:kube-system")
	if err != nil {
		return err
	}
	probes := []struct {
		policy string
		write  func(context.Context) error
	}{
		{"ipledger-ledger-writers", func(ctx context.Context) error {
			_, err := publisher.CoreV1().ConfigMaps(SystemNamespace).Create(ctx, &corev1.ConfigMap{
				ObjectMeta: metav1.ObjectMeta{Name: "ipledger-ledger-probe", Labels: map[string]string{"ipledger.io/ledger": "true"}},
			}, dryRun)
			return err
		}},
		{"ipledger-endpoints-own-slices", func(ctx context.Context) error {
			_, err := endpoints.DiscoveryV1().EndpointSlices("default").Create(ctx, &discoveryv1.EndpointSlice{
				ObjectMeta:  metav1.ObjectMeta{Name: "ipledger-policy-probe"},
				AddressType: discoveryv1.AddressTypeIPv4,
			}, dryRun)
			return err
		}},
		{"ipledger-own-leases", func(ctx context.Context) error {
			_, err := endpoints.CoordinationV1().Leases(SystemNamespace).Create(ctx, &coordinationv1.Lease{
				ObjectMeta: metav1.ObjectMeta{Name: "ipledger-ipam"},
			}, dryRun)
			return err
		}},
	}
	for _, p := range probes {
		var last error
		err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
			last = p.write(ctx)
			return last != nil && strings.Contains(last.Error(), "ValidatingAdmissionPolicy '"+p.policy+"'"), nil
		})
		if err != nil {
			return fmt.Errorf("the ValidatingAdmissionPolicy %s is not enforced after 60s (last answer: %v): %w", p.policy, last, err)
		}
	}
	return nil
}

// Impersonate is a client the admin sends as user with groups (and
// system:authenticated): what a request of that user is allowed, RBAC and
// admission policies alike.
func (e *Env) Impersonate(user string, groups ...string) (kubernetes.Interface, error) {
	cfg := rest.CopyConfig(e.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: user, Groups: append(groups, "system:authenticated")}
	return kubernetes.NewForConfig(cfg)
}
