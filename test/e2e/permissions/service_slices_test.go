package permissions

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ipledger/ipledger/lab/testenv"
)

// service returns namespace/name, created by the admin if missing (the API
// server makes default/kubernetes itself; kube-system/kube-dns is CoreDNS's
// in a real cluster). A Service the test created is deleted after it.
func service(t *testing.T, namespace, name string) *corev1.Service {
	t.Helper()
	env := testenv.Get(t)
	ctx := context.Background()
	services := env.Client.CoreV1().Services(namespace)
	svc, err := services.Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace},
		Spec: corev1.ServiceSpec{
			Selector: map[string]string{"app": name},
			Ports:    []corev1.ServicePort{{Name: "https", Port: 443, Protocol: corev1.ProtocolTCP}},
		},
	}, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		svc, err = services.Get(ctx, name, metav1.GetOptions{})
	} else if err == nil {
		t.Cleanup(func() { _ = services.Delete(context.Background(), name, metav1.DeleteOptions{}) })
	}
	if err != nil {
		t.Fatal(err)
	}
	return svc
}

// sliceOf is an EndpointSlice as services/endpoints/internal/planner's
// newSlice writes it for a Service labelled label: managed by endpoints,
// controlled by owner (nil: no owner reference).
func sliceOf(namespace, name, label string, owner *corev1.Service) *discoveryv1.EndpointSlice {
	s := slice(namespace, name, ours)
	s.Labels[discoveryv1.LabelServiceName] = label
	if owner != nil {
		s.OwnerReferences = []metav1.OwnerReference{{
			APIVersion: "v1", Kind: "Service", Name: owner.Name, UID: owner.UID,
			Controller: ptrTo(true), BlockOwnerDeletion: ptrTo(true),
		}}
	}
	return s
}

// refusedNaming is refusedByPolicy whose message also names field, so the
// operator reading it knows what to fix.
func refusedNaming(t *testing.T, what string, err error, field string) {
	t.Helper()
	refusedByPolicy(t, what, err, slicesPolicy)
	if err != nil && !strings.Contains(err.Error(), field) {
		t.Errorf("%s: the refusal does not name %s: %v", what, field, err)
	}
}

// TestEndpointsWritesOnlySlicesOfItsServices: a slice labelled as
// endpoints' own is not enough. kube-proxy merges every slice labelled
// kubernetes.io/service-name: X into Service X, whoever manages it, so
// endpoints' token could add addresses to cluster DNS or to the API
// server's Service. Its creates and updates are bound to the Service that
// controls the slice (an owner reference of that name, which the garbage
// collector also checks), never in the namespaces ipledger serves nothing
// in, never for default/kubernetes; the label cannot move to another Service.
func TestEndpointsWritesOnlySlicesOfItsServices(t *testing.T) {
	env := testenv.Get(t)
	ctx := context.Background()
	endpoints := component(t, "endpoints").DiscoveryV1()
	enforced(t, slicesPolicy, func(ctx context.Context) error {
		_, err := endpoints.EndpointSlices(system).Create(ctx, slice(system, "probe", theirs), dryRun)
		return err
	})

	// The forgeries measured against the policy before this rule, with
	// everything else right: the label managed-by endpoints, the owner
	// reference to the real Service. Only the namespace and name refuse them.
	dns := service(t, "kube-system", "kube-dns")
	_, err := endpoints.EndpointSlices("kube-system").Create(ctx, sliceOf("kube-system", "kube-dns-ipledger", "kube-dns", dns), dryRun)
	refusedNaming(t, "endpoints adds a slice to kube-system/kube-dns", err, "kube-system")
	kube := service(t, "default", "kubernetes")
	_, err = endpoints.EndpointSlices("default").Create(ctx, sliceOf("default", "kubernetes-ipledger", "kubernetes", kube), dryRun)
	refusedNaming(t, "endpoints adds a slice to default/kubernetes", err, "default/kubernetes")
	for _, ns := range []string{"kube-public", "kube-node-lease", system} {
		svc := service(t, ns, "vms")
		_, err = endpoints.EndpointSlices(ns).Create(ctx, sliceOf(ns, "vms-ipledger", "vms", svc), dryRun)
		refusedNaming(t, "endpoints adds a slice in namespace "+ns, err, ns)
	}

	// A tenant's Service, as the planner writes its slices.
	ns := env.Namespace(t, nil)
	web, other := service(t, ns, "web"), service(t, ns, "other")
	own, err := endpoints.EndpointSlices(ns).Create(ctx, sliceOf(ns, "web-1", "web", web), metav1.CreateOptions{})
	allowed(t, "endpoints creates a slice of the Service that owns it", err)
	if err != nil {
		t.FailNow()
	}

	_, err = endpoints.EndpointSlices(ns).Create(ctx, sliceOf(ns, "web-2", "web", nil), dryRun)
	refusedNaming(t, "endpoints creates a slice without an owner", err, "metadata.ownerReferences")
	_, err = endpoints.EndpointSlices(ns).Create(ctx, sliceOf(ns, "web-3", "web", other), dryRun)
	refusedNaming(t, "endpoints creates a slice labelled web, owned by other", err, "metadata.ownerReferences")
	notService := sliceOf(ns, "web-4", "web", web)
	notService.OwnerReferences[0].Kind, notService.OwnerReferences[0].APIVersion = "ConfigMap", "v1"
	_, err = endpoints.EndpointSlices(ns).Create(ctx, notService, dryRun)
	refusedNaming(t, "endpoints creates a slice owned by a ConfigMap named web", err, "metadata.ownerReferences")
	notController := sliceOf(ns, "web-5", "web", web)
	notController.OwnerReferences[0].Controller = nil
	_, err = endpoints.EndpointSlices(ns).Create(ctx, notController, dryRun)
	refusedNaming(t, "endpoints creates a slice web merely references", err, "metadata.ownerReferences")
	unlabelled := sliceOf(ns, "web-6", "web", web)
	delete(unlabelled.Labels, discoveryv1.LabelServiceName)
	_, err = endpoints.EndpointSlices(ns).Create(ctx, unlabelled, dryRun)
	refusedNaming(t, "endpoints creates a slice of no Service", err, discoveryv1.LabelServiceName)

	// Updates: its own endpoints, yes; the slice moved to another Service,
	// by its label alone or with its owner, no.
	own.Endpoints[0].Addresses = []string{"10.0.0.2"}
	own, err = endpoints.EndpointSlices(ns).Update(ctx, own, metav1.UpdateOptions{})
	allowed(t, "endpoints updates the endpoints of its slice", err)
	if err != nil {
		t.FailNow()
	}
	moved := own.DeepCopy()
	moved.Labels[discoveryv1.LabelServiceName] = "other"
	_, err = endpoints.EndpointSlices(ns).Update(ctx, moved, metav1.UpdateOptions{DryRun: []string{metav1.DryRunAll}})
	refusedNaming(t, "endpoints relabels web's slice as other's", err, discoveryv1.LabelServiceName)
	moved.OwnerReferences[0].Name, moved.OwnerReferences[0].UID = other.Name, other.UID
	_, err = endpoints.EndpointSlices(ns).Update(ctx, moved, metav1.UpdateOptions{DryRun: []string{metav1.DryRunAll}})
	refusedNaming(t, "endpoints gives web's slice, label and owner, to other", err, discoveryv1.LabelServiceName)
	orphaned := own.DeepCopy()
	orphaned.OwnerReferences = nil
	_, err = endpoints.EndpointSlices(ns).Update(ctx, orphaned, metav1.UpdateOptions{DryRun: []string{metav1.DryRunAll}})
	refusedNaming(t, "endpoints removes the owner of its slice", err, "metadata.ownerReferences")

	// Its own slices it still deletes.
	err = endpoints.EndpointSlices(ns).Delete(ctx, own.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &own.UID, ResourceVersion: &own.ResourceVersion}})
	allowed(t, "endpoints deletes its slice", err)
}
