package testenv_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes"

	"github.com/ipledger/ipledger/lab/controlplane"
	"github.com/ipledger/ipledger/lab/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

var (
	poolsGVR     = schema.GroupVersionResource{Group: "ipledger.io", Version: "v1alpha1", Resource: "ippools"}
	workloadsGVR = schema.GroupVersionResource{Group: "ipledger.io", Version: "v1alpha1", Resource: "externalworkloads"}
)

func pool(name string, addresses ...any) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "ipledger.io/v1alpha1", "kind": "IPPool",
		"metadata": map[string]any{"name": name},
		"spec":     map[string]any{"addresses": addresses},
	}}
}

func TestIPPoolValidation(t *testing.T) {
	env := testenv.Get(t)
	ctx := context.Background()
	cases := []struct {
		name      string
		addresses []any
		valid     bool
	}{
		{"ipv4 cidr", []any{"192.0.2.0/24"}, true},
		{"ipv6 cidr", []any{"2001:db8::/64"}, true},
		{"ipv4 range", []any{"198.51.100.10-198.51.100.20"}, true},
		{"mixed families", []any{"192.0.2.0/28", "2001:db8:1::-2001:db8:1::ff"}, true},
		{"host bits set", []any{"192.0.2.1/24"}, false},
		{"not an address", []any{"banana"}, false},
		{"range across families", []any{"192.0.2.1-2001:db8::1"}, false},
		{"range with three parts", []any{"192.0.2.1-192.0.2.2-192.0.2.3"}, false},
		{"empty list", []any{}, false},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			name := fmt.Sprintf("validation-%d", i)
			created, err := env.Dynamic.Resource(poolsGVR).Create(ctx, pool(name, tc.addresses...), metav1.CreateOptions{})
			if tc.valid {
				if err != nil {
					t.Fatalf("valid pool %v rejected: %v", tc.addresses, err)
				}
				auto, found, _ := unstructured.NestedBool(created.Object, "spec", "autoAssign")
				if !found || !auto {
					t.Errorf("spec.autoAssign should default to true, got %v (found %v)", auto, found)
				}
				_ = env.Dynamic.Resource(poolsGVR).Delete(ctx, name, metav1.DeleteOptions{})
				return
			}
			if err == nil {
				_ = env.Dynamic.Resource(poolsGVR).Delete(ctx, name, metav1.DeleteOptions{})
				t.Fatalf("invalid pool %v accepted", tc.addresses)
			}
			if !strings.Contains(err.Error(), "spec.addresses") {
				t.Errorf("error should name spec.addresses: %v", err)
			}
		})
	}
}

func TestExternalWorkloadAllowsOneIPPerFamily(t *testing.T) {
	env := testenv.Get(t)
	ns := env.Namespace(t, nil)
	workload := func(name string, ips ...string) *unstructured.Unstructured {
		var list []any
		for _, ip := range ips {
			list = append(list, map[string]any{"ip": ip})
		}
		return &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "ipledger.io/v1alpha1", "kind": "ExternalWorkload",
			"metadata": map[string]any{"name": name},
			"spec":     map[string]any{"workloadIPs": list, "ports": []any{map[string]any{"name": "http", "port": int64(80)}}},
		}}
	}
	res := env.Dynamic.Resource(workloadsGVR).Namespace(ns)
	if _, err := res.Create(context.Background(), workload("dual", "192.0.2.1", "2001:db8::1"), metav1.CreateOptions{}); err != nil {
		t.Fatalf("one IPv4 and one IPv6 should be accepted: %v", err)
	}
	_, err := res.Create(context.Background(), workload("two-v4", "192.0.2.1", "192.0.2.2"), metav1.CreateOptions{})
	if err == nil || !strings.Contains(err.Error(), "spec.workloadIPs") {
		t.Fatalf("two IPv4 addresses should be rejected naming spec.workloadIPs, got %v", err)
	}
}

// TestServiceAccountsAreLeastPrivileged asks the API server, through
// SubjectAccessReview, what each ServiceAccount of deploy/kustomize may do.
func TestServiceAccountsAreLeastPrivileged(t *testing.T) {
	env := testenv.Get(t)
	type access struct {
		sa, verb, group, resource, subresource, namespace string
		allowed                                           bool
	}
	cases := []access{
		{"watcher", "watch", "", "services", "", "", true},
		{"watcher", "list", "ipledger.io", "ippools", "", "", true},
		{"watcher", "watch", "", "configmaps", "", testenv.SystemNamespace, true},
		{"watcher", "list", "", "configmaps", "", "default", false},
		{"watcher", "patch", "", "services", "status", "default", false},
		{"watcher", "list", "", "secrets", "", "", false},
		{"watcher", "watch", "gateway.networking.k8s.io", "gateways", "", "", true},
		{"watcher", "list", "gateway.networking.k8s.io", "gatewayclasses", "", "", true},
		{"watcher", "list", "gateway.networking.k8s.io", "httproutes", "", "", false},
		{"watcher", "watch", "metallb.io", "servicel2statuses", "", "", true},
		{"watcher", "list", "metallb.io", "ipaddresspools", "", "", true},
		{"watcher", "update", "metallb.io", "ipaddresspools", "", "ipledger-system", false},
		{"watcher", "list", "metallb.io", "bgppeers", "", "", false}, // not read: its passwords' Secrets stay unnamed
		{"ipam", "patch", "", "services", "status", "default", true},
		{"ipam", "update", "", "services", "status", "default", false}, // it only patches
		{"ipam", "update", "ipledger.io", "ippools", "status", "", false},
		{"ipam", "list", "", "configmaps", "", testenv.SystemNamespace, true},
		{"ipam", "get", "", "configmaps", "", testenv.SystemNamespace, false},
		{"ipam", "update", "", "configmaps", "", testenv.SystemNamespace, true},
		{"ipam", "update", "", "configmaps", "", "default", false},
		{"ipam", "watch", "ipledger.io", "snapshots", "", "", true},
		{"ipam", "list", "", "services", "", "", false},
		{"ipam", "delete", "", "services", "", "default", false},
		{"ipam", "patch", "", "services", "", "default", false},   // the annotation travels in the status patch
		{"ipam", "patch", "ipledger.io", "ippools", "", "", true}, // the pool-protection finalizer
		{"ipam", "delete", "ipledger.io", "ippools", "", "", false},
		{"ipam", "update", "ipledger.io", "ippools", "", "", false},
		{"endpoints", "create", "discovery.k8s.io", "endpointslices", "", "default", true},
		{"endpoints", "patch", "", "services", "status", "default", false},
		{"endpoints", "update", "coordination.k8s.io", "leases", "", testenv.SystemNamespace, false}, // its own only (leases below)
		{"endpoints", "create", "coordination.k8s.io", "leases", "", testenv.SystemNamespace, true},  // cannot be named
		{"endpoints", "update", "coordination.k8s.io", "leases", "", "default", false},
		{"endpoints", "get", "discovery.k8s.io", "endpointslices", "", "default", false},      // it reads them from the stream
		{"endpoints", "patch", "ipledger.io", "externalworkloads", "status", "default", true}, // the Ready condition of probed workloads
		{"endpoints", "patch", "ipledger.io", "externalworkloads", "", "default", false},
		{"endpoints", "update", "ipledger.io", "externalworkloads", "status", "default", false},
		{"eipd", "patch", "", "nodes", "", "", true},
		{"eipd", "delete", "", "nodes", "", "", false},
		{"eipd", "create", "ipledger.io", "reservations", "", "", false},
	}
	check := func(t *testing.T, sa string, attributes *authorizationv1.ResourceAttributes, allowed bool) {
		review, err := env.Client.AuthorizationV1().SubjectAccessReviews().Create(context.Background(), &authorizationv1.SubjectAccessReview{
			Spec: authorizationv1.SubjectAccessReviewSpec{
				User:               "system:serviceaccount:" + testenv.SystemNamespace + ":ipledger-" + sa,
				Groups:             []string{"system:serviceaccounts", "system:serviceaccounts:" + testenv.SystemNamespace, "system:authenticated"},
				ResourceAttributes: attributes,
			},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if review.Status.Allowed != allowed {
			t.Errorf("allowed = %v, want %v (%s)", review.Status.Allowed, allowed, review.Status.Reason)
		}
	}
	for _, c := range cases {
		name := fmt.Sprintf("%s %s %s/%s/%s in %q", c.sa, c.verb, c.group, c.resource, c.subresource, c.namespace)
		t.Run(name, func(t *testing.T) {
			check(t, c.sa, &authorizationv1.ResourceAttributes{
				Verb: c.verb, Group: c.group, Resource: c.resource, Subresource: c.subresource, Namespace: c.namespace,
			}, c.allowed)
		})
	}
	// Leases: each leader-elected component gets and updates its own only.
	for _, sa := range []string{"watcher", "ipam", "endpoints", "eipd"} {
		for _, lease := range []string{"ipam", "endpoints", "eipd"} {
			for _, verb := range []string{"get", "update"} {
				t.Run(fmt.Sprintf("%s %s Lease ipledger-%s", sa, verb, lease), func(t *testing.T) {
					check(t, sa, &authorizationv1.ResourceAttributes{
						Verb: verb, Group: "coordination.k8s.io", Resource: "leases", Name: "ipledger-" + lease, Namespace: testenv.SystemNamespace,
					}, sa == lease)
				})
			}
		}
	}
}

// TestPodTokenNamesItsPod: a PodToken's requests carry the Pod's name, as a
// Pod's own token's do (the ledger policy asks ipam for it), and a
// ServiceAccountToken's carry none.
func TestPodTokenNamesItsPod(t *testing.T) {
	env := testenv.Get(t)
	ctx := context.Background()
	ns := env.Namespace(t, nil)
	whoami := func(token string) authenticationv1.UserInfo {
		t.Helper()
		c, err := kubernetes.NewForConfig(env.CP.TokenConfig(token))
		if err != nil {
			t.Fatal(err)
		}
		r, err := c.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return r.Status.UserInfo
	}
	for range 2 { // the second token binds to the same Pod
		token, err := env.PodToken(ctx, ns, "component")
		if err != nil {
			t.Fatal(err)
		}
		got := whoami(token)
		if want := "system:serviceaccount:" + ns + ":component"; got.Username != want {
			t.Errorf("user %q, want %q", got.Username, want)
		}
		if pod := got.Extra[controlplane.PodNameExtra]; len(pod) != 1 || pod[0] != "component-token-holder" {
			t.Errorf("extra %s = %q, want [component-token-holder]", controlplane.PodNameExtra, pod)
		}
	}
	token, err := env.ServiceAccountToken(ctx, ns, "component")
	if err != nil {
		t.Fatal(err)
	}
	if pod, ok := whoami(token).Extra[controlplane.PodNameExtra]; ok {
		t.Errorf("a ServiceAccountToken names Pod %q", pod)
	}
}
