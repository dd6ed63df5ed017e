package connect

import (
	"context"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// Find returns the ipam Pod to reach: any Ready one for reads, the holder of
// the Lease for writes.
func Find(ctx context.Context, client kubernetes.Interface, f Flags, target Target) (*corev1.Pod, error) {
	pods, err := client.CoreV1().Pods(f.Namespace).List(ctx, metav1.ListOptions{LabelSelector: PodSelector})
	if err != nil {
		return nil, fmt.Errorf("listing ipam's Pods in namespace %s: %w%s", f.Namespace, err, pluginRoleFix(err, f.Namespace))
	}
	if len(pods.Items) == 0 {
		return nil, noIPAM(ctx, client, f.Namespace)
	}
	holder := ""
	if target == Leader {
		lease, err := client.CoordinationV1().Leases(f.Namespace).Get(ctx, f.Lease, metav1.GetOptions{})
		if err != nil {
			return nil, fmt.Errorf("reading ipam's Lease %s/%s to find the leader, which takes reservations: %w%s", f.Namespace, f.Lease, err, pluginRoleFix(err, f.Namespace))
		}
		if lease.Spec.HolderIdentity != nil {
			holder = *lease.Spec.HolderIdentity
		}
	}
	return ChoosePod(pods.Items, target, holder, f.Namespace, f.Lease)
}

// pluginRoleFix names the ClusterRole that grants what the plugin needs of
// the Kubernetes API, when err is a refusal.
func pluginRoleFix(err error, namespace string) string {
	if !apierrors.IsForbidden(err) {
		return ""
	}
	return fmt.Sprintf("\nfix: bind the ClusterRole ipledger:kubectl-plugin in %s (kubectl -n %s create rolebinding NAME --clusterrole=ipledger:kubectl-plugin --user=YOU), or give --ipam-address", namespace, namespace)
}

// noIPAM says where ipam is, if the caller may look in every namespace.
func noIPAM(ctx context.Context, client kubernetes.Interface, namespace string) error {
	msg := fmt.Sprintf("no ipam found: no Pod labelled %s in namespace %s", PodSelector, namespace)
	all, err := client.CoreV1().Pods("").List(ctx, metav1.ListOptions{LabelSelector: PodSelector})
	if err == nil {
		var elsewhere []string
		for _, p := range all.Items {
			if !slices.Contains(elsewhere, p.Namespace) {
				elsewhere = append(elsewhere, p.Namespace)
			}
		}
		if len(elsewhere) > 0 {
			return fmt.Errorf("%s, but in %s: pass --ipam-namespace %s", msg, strings.Join(elsewhere, ", "), elsewhere[0])
		}
	}
	return fmt.Errorf("%s: is ipledger installed (kubectl apply -k deploy/kustomize/overlays/...), and in this cluster (kubectl config current-context)? Pass --ipam-namespace where it runs", msg)
}

// ChoosePod picks the Pod a command talks to. Reads go to a Ready Pod (the
// first by name, so repeated calls see the same replica); writes to the
// Lease holder, whose identity is its Pod name (--leader-elect-identity=$(POD_NAME)).
func ChoosePod(pods []corev1.Pod, target Target, holder, namespace, lease string) (*corev1.Pod, error) {
	sorted := slices.Clone(pods)
	slices.SortFunc(sorted, func(a, b corev1.Pod) int { return strings.Compare(a.Name, b.Name) })
	if target == Leader {
		if holder == "" {
			return nil, fmt.Errorf("no ipam replica leads: the Lease %s/%s has no holder; reservations need the leader (kubectl -n %s get lease %s; are ipam's Pods running?)", namespace, lease, namespace, lease)
		}
		for i := range sorted {
			if sorted[i].Name != holder {
				continue
			}
			if !ready(&sorted[i]) {
				return nil, fmt.Errorf("the ipam leader %s (holder of Lease %s/%s) is not Ready; retry when it is, or when another replica has taken over", holder, namespace, lease)
			}
			return &sorted[i], nil
		}
		return nil, fmt.Errorf("the ipam leader %q (holder of Lease %s/%s) is not one of ipam's Pods in %s; retry once a running replica holds the Lease", holder, namespace, lease, namespace)
	}
	var names []string
	for i := range sorted {
		if ready(&sorted[i]) {
			return &sorted[i], nil
		}
		names = append(names, sorted[i].Name)
	}
	return nil, fmt.Errorf("no ipam Pod is Ready in %s (%s): kubectl -n %s describe pods -l %s", namespace, strings.Join(names, ", "), namespace, PodSelector)
}

func ready(p *corev1.Pod) bool {
	if p.Status.Phase != corev1.PodRunning || p.DeletionTimestamp != nil {
		return false
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}
