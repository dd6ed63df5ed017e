package permissions

import (
	"context"
	"os"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/ipledger/ipledger/lab/testenv"
)

const (
	slicesPolicy = "ipledger-endpoints-own-slices"
	nodesPolicy  = "ipledger-eipd-node-labels"
	leasesPolicy = "ipledger-own-leases"
	// ours is endpoints' managed-by value; theirs the EndpointSlice
	// controller's.
	ours   = "endpoints.ipledger.io"
	theirs = "endpointslice-controller.k8s.io"
)

func ptrTo[T any](v T) *T { return &v }

func slice(namespace, name, managedBy string) *discoveryv1.EndpointSlice {
	labels := map[string]string{discoveryv1.LabelServiceName: name}
	if managedBy != "" {
		labels[discoveryv1.LabelManagedBy] = managedBy
	}
	return &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: name, Namespace: namespace, Labels: labels},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{"10.0.0.1"}}},
		Ports:       []discoveryv1.EndpointPort{{Name: ptrTo("https"), Port: ptrTo[int32](6443), Protocol: ptrTo(corev1.ProtocolTCP)}},
	}
}

// TestEndpointsWritesOnlyItsOwnSlices: endpoints' ClusterRole may write every
// EndpointSlice; the policy lets it write only those labelled as its own,
// before and after the write, and leaves everyone else alone (the garbage
// collector deletes slices of either kind).
func TestEndpointsWritesOnlyItsOwnSlices(t *testing.T) {
	env := testenv.Get(t)
	ctx := context.Background()
	ns := env.Namespace(t, nil)
	admin := env.Client.DiscoveryV1()
	endpoints := component(t, "endpoints").DiscoveryV1()
	enforced(t, slicesPolicy, func(ctx context.Context) error {
		_, err := endpoints.EndpointSlices(ns).Create(ctx, slice(ns, "probe", theirs), dryRun)
		return err
	})

	// default/kubernetes, as the API server writes it (this one runs with
	// --endpoint-reconciler-type=none, so the test does).
	kube, err := admin.EndpointSlices("default").Create(ctx, slice("default", "kubernetes", theirs), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = admin.EndpointSlices("default").Delete(context.Background(), "kubernetes", metav1.DeleteOptions{})
	})
	rewritten := kube.DeepCopy()
	rewritten.Endpoints[0].Addresses = []string{"203.0.113.66"}
	_, err = endpoints.EndpointSlices("default").Update(ctx, rewritten, metav1.UpdateOptions{})
	refusedByPolicy(t, "endpoints rewrites default/kubernetes's endpoints", err, slicesPolicy)
	adopted := kube.DeepCopy()
	adopted.Labels[discoveryv1.LabelManagedBy] = ours
	_, err = endpoints.EndpointSlices("default").Update(ctx, adopted, metav1.UpdateOptions{})
	refusedByPolicy(t, "endpoints relabels default/kubernetes as its own", err, slicesPolicy)
	err = endpoints.EndpointSlices("default").Delete(ctx, "kubernetes", metav1.DeleteOptions{})
	refusedByPolicy(t, "endpoints deletes default/kubernetes", err, slicesPolicy)
	_, err = endpoints.EndpointSlices(ns).Create(ctx, slice(ns, "coredns", theirs), metav1.CreateOptions{})
	refusedByPolicy(t, "endpoints creates a slice labelled as the EndpointSlice controller's", err, slicesPolicy)
	_, err = endpoints.EndpointSlices(ns).Create(ctx, slice(ns, "unlabelled", ""), metav1.CreateOptions{})
	refusedByPolicy(t, "endpoints creates a slice without managed-by", err, slicesPolicy)

	// Its own slices: the writes of services/endpoints/internal/controller
	// (owned by their Service: TestEndpointsWritesOnlySlicesOfItsServices).
	own, err := endpoints.EndpointSlices(ns).Create(ctx, sliceOf(ns, "vms", "vms", service(t, ns, "vms")), metav1.CreateOptions{})
	allowed(t, "endpoints creates its own slice", err)
	if err != nil {
		t.FailNow()
	}
	own.Endpoints[0].Addresses = []string{"10.0.0.2"}
	own, err = endpoints.EndpointSlices(ns).Update(ctx, own, metav1.UpdateOptions{})
	allowed(t, "endpoints updates its own slice", err)
	if err != nil {
		t.FailNow()
	}
	givenAway := own.DeepCopy()
	givenAway.Labels[discoveryv1.LabelManagedBy] = theirs
	_, err = endpoints.EndpointSlices(ns).Update(ctx, givenAway, metav1.UpdateOptions{})
	refusedByPolicy(t, "endpoints relabels its own slice as the EndpointSlice controller's", err, slicesPolicy)
	err = endpoints.EndpointSlices(ns).Delete(ctx, own.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &own.UID, ResourceVersion: &own.ResourceVersion}})
	allowed(t, "endpoints deletes its own slice", err)

	// Everyone else is never evaluated: the admin rewrites default/kubernetes,
	// the garbage collector deletes slices of both kinds.
	_, err = admin.EndpointSlices("default").Update(ctx, rewritten, metav1.UpdateOptions{})
	allowed(t, "the admin updates default/kubernetes", err)
	gc := serviceAccount(t, "kube-system", "generic-garbage-collector").DiscoveryV1()
	for _, s := range []*discoveryv1.EndpointSlice{slice(ns, "gc-theirs", theirs), slice(ns, "gc-ours", ours)} {
		if _, err := admin.EndpointSlices(ns).Create(ctx, s, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		allowed(t, "the garbage collector deletes "+s.Name, gc.EndpointSlices(ns).Delete(ctx, s.Name, metav1.DeleteOptions{}))
	}
}

// TestEIPDMayChangeOnlyItsNodeLabels: eipd's ClusterRole may patch every
// field of every Node; the policy lets its updates change labels and
// annotations under ipledger.io/ and remove taints under ipledger.io/ (its
// startup taint), nothing else.
func TestEIPDMayChangeOnlyItsNodeLabels(t *testing.T) {
	env := testenv.Get(t)
	ctx := context.Background()
	const name = "permissions-node"
	node, err := env.Client.CoreV1().Nodes().Create(ctx, &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{
			"kubernetes.io/hostname": name, "ipledger.io/externalip-auto-assign": "true",
		}},
		Spec: corev1.NodeSpec{
			ProviderID: "aws:///us-east-1a/i-0123456789abcdef0",
			Taints: []corev1.Taint{
				{Key: "example.com/dedicated", Value: "db", Effect: corev1.TaintEffectNoSchedule},
				{Key: "ipledger.io/eip-not-ready", Effect: corev1.TaintEffectNoSchedule},
			},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Client.CoreV1().Nodes().Delete(context.Background(), name, metav1.DeleteOptions{}) })
	eipd := component(t, "eipd").CoreV1().Nodes()
	patch := func(ctx context.Context, body string, opts ...string) error {
		_, err := eipd.Patch(ctx, name, types.MergePatchType, []byte(body), metav1.PatchOptions{FieldManager: "ipledger-eipd", DryRun: opts})
		return err
	}
	enforced(t, nodesPolicy, func(ctx context.Context) error {
		return patch(ctx, `{"spec":{"unschedulable":true}}`, metav1.DryRunAll)
	})

	// What services/eipd/internal/controller publishes, then clears.
	allowed(t, "eipd publishes its label and annotation", patch(ctx,
		`{"metadata":{"labels":{"ipledger.io/externalip":"203.0.113.7"},"annotations":{"ipledger.io/eip-allocation-id":"eipalloc-0abc"}}}`))
	allowed(t, "eipd clears its label and annotation", patch(ctx,
		`{"metadata":{"labels":{"ipledger.io/externalip":null},"annotations":{"ipledger.io/eip-allocation-id":null}}}`))

	for _, c := range []struct{ what, patch string }{
		{"eipd adds a label outside ipledger.io/", `{"metadata":{"labels":{"node-role.kubernetes.io/control-plane":""}}}`},
		// The operator's opt-in, which neither the kubelet (NodeRestriction) nor eipd may set.
		{"eipd opts the Node in itself", `{"metadata":{"labels":{"node-restriction.kubernetes.io/ipledger-externalip-auto-assign":"true"}}}`},
		{"eipd changes a label outside ipledger.io/", `{"metadata":{"labels":{"kubernetes.io/hostname":"elsewhere"}}}`},
		{"eipd removes a label outside ipledger.io/", `{"metadata":{"labels":{"kubernetes.io/hostname":null}}}`},
		{"eipd adds an annotation outside ipledger.io/", `{"metadata":{"annotations":{"node.alpha.kubernetes.io/ttl":"0"}}}`},
		{"eipd cordons the Node", `{"spec":{"unschedulable":true}}`},
		{"eipd removes every taint", `{"spec":{"taints":null}}`},
		{"eipd removes another's taint", `{"spec":{"taints":[{"key":"ipledger.io/eip-not-ready","effect":"NoSchedule"}]}}`},
		{"eipd adds a taint", `{"spec":{"taints":[{"key":"example.com/dedicated","value":"db","effect":"NoSchedule"},{"key":"ipledger.io/eip-not-ready","effect":"NoSchedule"},{"key":"ipledger.io/evict","effect":"NoExecute"}]}}`},
		{"eipd changes its own taint", `{"spec":{"taints":[{"key":"example.com/dedicated","value":"db","effect":"NoSchedule"},{"key":"ipledger.io/eip-not-ready","effect":"NoExecute"}]}}`},
		{"eipd sets a podCIDR", `{"spec":{"podCIDR":"10.244.9.0/24"}}`},
		{"eipd removes its taint and cordons at once", `{"spec":{"unschedulable":true,"taints":[{"key":"example.com/dedicated","value":"db","effect":"NoSchedule"}]}}`},
		{"eipd adds a finalizer", `{"metadata":{"finalizers":["example.com/keep"]}}`},
		{"eipd gives the Node an owner", `{"metadata":{"ownerReferences":[{"apiVersion":"v1","kind":"ConfigMap","name":"gone","uid":"00000000-0000-0000-0000-000000000001"}]}}`},
		{"eipd changes its own label and another one at once", `{"metadata":{"labels":{"ipledger.io/externalip":"203.0.113.8","topology.kubernetes.io/zone":"us-east-1z"}}}`},
	} {
		refusedByPolicy(t, c.what, patch(ctx, c.patch), nodesPolicy)
	}
	refusedByRBAC(t, "eipd deletes the Node", eipd.Delete(ctx, name, metav1.DeleteOptions{}))

	// What liftStartupTaint sends once the address is on: test, then remove.
	_, err = eipd.Patch(ctx, name, types.JSONPatchType,
		[]byte(`[{"op":"test","path":"/spec/taints/1","value":{"key":"ipledger.io/eip-not-ready","effect":"NoSchedule"}},{"op":"remove","path":"/spec/taints/1"}]`),
		metav1.PatchOptions{FieldManager: "ipledger-eipd"})
	allowed(t, "eipd removes its startup taint", err)
	node.Spec.Taints = slices.Delete(node.Spec.Taints, 1, 2)

	// The Node is as it was, and others (here the admin, elsewhere the
	// kubelet and people) still label it.
	got, err := env.Client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got.Labels, node.Labels) || !reflect.DeepEqual(got.Spec, node.Spec) || len(got.Finalizers) != 0 || len(got.OwnerReferences) != 0 {
		t.Errorf("Node changed: labels %v, spec %+v, finalizers %v, owners %v (was %v, %+v)", got.Labels, got.Spec, got.Finalizers, got.OwnerReferences, node.Labels, node.Spec)
	}
	_, err = env.Client.CoreV1().Nodes().Patch(ctx, name, types.MergePatchType, []byte(`{"metadata":{"labels":{"node-role.kubernetes.io/worker":""}}}`), metav1.PatchOptions{})
	allowed(t, "the admin labels the Node", err)
}

// TestEachComponentHasOnlyItsOwnLease: each leader-elected component may
// get and update its own Lease and no other; the watcher, which elects no
// leader, none. create cannot be limited by name in RBAC: a policy keeps
// each from creating another's.
func TestEachComponentHasOnlyItsOwnLease(t *testing.T) {
	env := testenv.Get(t)
	ctx := context.Background()
	elected := []string{"ipam", "endpoints", "eipd"}
	enforced(t, leasesPolicy, func(ctx context.Context) error {
		_, err := component(t, "eipd").CoordinationV1().Leases(system).Create(ctx,
			&coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "ipledger-ipam"}}, dryRun)
		return err
	})
	leases := map[string]*coordinationv1.Lease{}
	for _, c := range elected {
		l, err := env.Client.CoordinationV1().Leases(system).Create(ctx, &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Name: "ipledger-" + c},
			Spec:       coordinationv1.LeaseSpec{HolderIdentity: ptrTo(c + "-0"), LeaseDurationSeconds: ptrTo[int32](15)},
		}, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			l, err = env.Client.CoordinationV1().Leases(system).Get(ctx, "ipledger-"+c, metav1.GetOptions{})
		}
		if err != nil {
			t.Fatal(err)
		}
		leases[c] = l
	}
	for _, c := range append(elected, "watcher") {
		client := component(t, c).CoordinationV1().Leases(system)
		for _, owner := range elected {
			lease := leases[owner].Name
			got, err := client.Get(ctx, lease, metav1.GetOptions{})
			if owner != c {
				refusedByRBAC(t, c+" reads Lease "+lease, err)
				taken, err := env.Client.CoordinationV1().Leases(system).Get(ctx, lease, metav1.GetOptions{})
				if err != nil {
					t.Fatal(err)
				}
				taken.Spec.HolderIdentity = ptrTo(c + "-0")
				_, err = client.Update(ctx, taken, metav1.UpdateOptions{})
				refusedByRBAC(t, c+" takes Lease "+lease, err)
				continue
			}
			allowed(t, c+" reads its Lease "+lease, err)
			if err != nil {
				continue
			}
			got.Spec.HolderIdentity = ptrTo(c + "-1")
			_, err = client.Update(ctx, got, metav1.UpdateOptions{})
			allowed(t, c+" renews its Lease "+lease, err)
		}
		if c == "watcher" {
			_, err := client.Create(ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "ipledger-watcher"}}, dryRun)
			refusedByRBAC(t, "the watcher creates a Lease", err)
			continue
		}
		// create, which resourceNames cannot fence: the policy keeps each
		// component from another's Lease (from holding it first, when it is
		// missing); its own is not replaced; other names stay open.
		for _, owner := range elected {
			_, err := client.Create(ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "ipledger-" + owner}}, dryRun)
			if owner != c {
				refusedByPolicy(t, c+" creates Lease ipledger-"+owner, err, leasesPolicy)
			} else if !apierrors.IsAlreadyExists(err) {
				t.Errorf("%s creates its Lease over the existing one: want AlreadyExists, got %v", c, err)
			}
		}
		_, err := client.Create(ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "ipledger-" + c + "-renamed"}}, dryRun)
		allowed(t, c+" creates a Lease of another name", err)
	}
}

// TestNodeSpecFieldsAreAllFenced: ipledger-eipd-node-labels compares every
// field of NodeSpec but taints one by one (CEL cannot compare an object
// less one field); a field k8s.io/api adds would be open to eipd until the
// policy names it.
func TestNodeSpecFieldsAreAllFenced(t *testing.T) {
	policy, err := os.ReadFile("../../../deploy/kustomize/base/rbac/own-objects.yaml")
	if err != nil {
		t.Fatal(err)
	}
	spec := reflect.TypeFor[corev1.NodeSpec]()
	for i := range spec.NumField() {
		name, _, _ := strings.Cut(spec.Field(i).Tag.Get("json"), ",")
		if name == "taints" {
			continue
		}
		if !strings.Contains(string(policy), "object.spec."+name+" == oldObject.spec."+name) {
			t.Errorf("ipledger-eipd-node-labels does not compare NodeSpec.%s (json %q): add it to the spec check", spec.Field(i).Name, name)
		}
	}
}

// TestWatcherListsOnlyCiliumsNamespacesLeases: the watcher may list and
// watch the Leases of Cilium's namespace (kube-system, where Cilium's L2
// announcer holds one per Service) and nothing more of Leases: not read one
// by name, not write one there, not list them elsewhere or everywhere.
func TestWatcherListsOnlyCiliumsNamespacesLeases(t *testing.T) {
	ctx := context.Background()
	leases := component(t, "watcher").CoordinationV1()
	_, err := leases.Leases(metav1.NamespaceSystem).List(ctx, metav1.ListOptions{})
	allowed(t, "the watcher lists kube-system's Leases", err)
	_, err = leases.Leases(metav1.NamespaceSystem).Watch(ctx, metav1.ListOptions{TimeoutSeconds: ptrTo[int64](1)})
	allowed(t, "the watcher watches kube-system's Leases", err)
	_, err = leases.Leases(metav1.NamespaceSystem).Get(ctx, "kube-scheduler", metav1.GetOptions{})
	refusedByRBAC(t, "the watcher gets a Lease of kube-system by name", err)
	_, err = leases.Leases(metav1.NamespaceSystem).Create(ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "cilium-l2announce-shop-web"}}, dryRun)
	refusedByRBAC(t, "the watcher creates a Lease in kube-system", err)
	for _, ns := range []string{"kube-node-lease", system, metav1.NamespaceAll} {
		_, err = leases.Leases(ns).List(ctx, metav1.ListOptions{})
		refusedByRBAC(t, "the watcher lists the Leases of namespace "+strconv.Quote(ns), err)
	}
}
