package controlplane

import (
	"context"
	"fmt"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// PodNameExtra is the key under which the API server puts, in the userInfo
// of a request authenticated with a token bound to a Pod, the Pod's name.
// Impersonation cannot forge it without `impersonate` on userextras/<key>,
// which no built-in role grants: the ledger policy (ipledger-ledger-writers)
// asks for it.
const PodNameExtra = "authentication.kubernetes.io/pod-name"

// tokenHolderSuffix ends the name of the Pod that PodToken binds tokens of a
// ServiceAccount to: <serviceAccount>-token-holder.
const tokenHolderSuffix = "-token-holder"

// PodToken returns a token of ServiceAccount namespace/serviceAccount for
// audiences (none: the Kubernetes API's own) that is bound to a Pod of that
// ServiceAccount, as the kubelet projects it into a Pod: requests made with
// it carry the Pod's name in userInfo.extra (PodNameExtra), which ipledger's
// ledger policy requires of ipam. Without kubelets nothing runs a Pod, so
// the Pod <serviceAccount>-token-holder is an object only (never scheduled,
// restricted by Pod Security), created if missing and kept: deleting it
// revokes every token bound to it. The namespace and the ServiceAccount are
// created if missing.
func PodToken(ctx context.Context, client kubernetes.Interface, namespace, serviceAccount string, expiry time.Duration, audiences ...string) (string, error) {
	_, err := client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return "", err
	}
	_, err = client.CoreV1().ServiceAccounts(namespace).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: serviceAccount}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return "", err
	}
	pod, err := tokenHolder(ctx, client, namespace, serviceAccount)
	if err != nil {
		return "", fmt.Errorf("Pod for a token of %s/%s: %w", namespace, serviceAccount, err)
	}
	seconds := int64(expiry / time.Second)
	tr, err := client.CoreV1().ServiceAccounts(namespace).CreateToken(ctx, serviceAccount, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{
			ExpirationSeconds: &seconds,
			Audiences:         audiences,
			BoundObjectRef:    &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		return "", fmt.Errorf("token of %s/%s bound to Pod %s: %w", namespace, serviceAccount, pod.Name, err)
	}
	return tr.Status.Token, nil
}

// tokenHolder gets or creates the Pod PodToken binds serviceAccount's tokens
// to.
func tokenHolder(ctx context.Context, client kubernetes.Interface, namespace, serviceAccount string) (*corev1.Pod, error) {
	pods := client.CoreV1().Pods(namespace)
	name := serviceAccount + tokenHolderSuffix
	pod, err := pods.Get(ctx, name, metav1.GetOptions{})
	if err == nil {
		return pod, nil
	}
	if !apierrors.IsNotFound(err) {
		return nil, err
	}
	pod, err = pods.Create(ctx, TokenHolder(name, serviceAccount), metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) { // a concurrent caller made it
		return pods.Get(ctx, name, metav1.GetOptions{})
	}
	return pod, err
}

// TokenHolder is a Pod named name that runs as serviceAccount and that
// Pod Security's restricted level (ipledger-system's) admits: an object to
// bind tokens to, on an API server where nothing runs it.
func TokenHolder(name, serviceAccount string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PodSpec{
			ServiceAccountName:           serviceAccount,
			AutomountServiceAccountToken: new(false),
			SecurityContext: &corev1.PodSecurityContext{
				RunAsNonRoot:   new(true),
				SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
			},
			Containers: []corev1.Container{{
				Name:  "holder",
				Image: "registry.k8s.io/pause:3.10",
				SecurityContext: &corev1.SecurityContext{
					AllowPrivilegeEscalation: new(false),
					Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
				},
			}},
		},
	}
}
