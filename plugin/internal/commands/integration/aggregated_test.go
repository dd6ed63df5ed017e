package integration

import (
	"context"
	"encoding/base64"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/ipledger/ipledger/lab/testenv"
)

// TestPluginThroughTheAggregatedAPI runs a real ipam binary (a standby)
// with --aggregated-api-addr, ipam's own kubeconfig and the component's
// RBAC (components/aggregated-api/rbac.yaml), registers it with an
// APIService, and runs the plugin as a person with a client certificate
// bound only to ipledger:viewer: its reads are ipam's real answers; a
// reservation sent to this standby alone is refused (503, retried) naming
// the leader.
func TestPluginThroughTheAggregatedAPI(t *testing.T) {
	s := startSystem(t)
	env := s.env
	ctx := context.Background()
	if _, err := env.Kubectl(ctx, "apply", "--server-side", "-f", filepath.Join(env.Root, "deploy/kustomize/components/aggregated-api/rbac.yaml")); err != nil {
		t.Fatal(err)
	}

	const svcName = "ipledger-ipam-api"
	certFile, keyFile := testenv.SelfSignedCert(t, svcName+"."+testenv.SystemNamespace+".svc")
	aggAddr := testenv.FreeAddr(t)
	s.startIPAM(t, "ipam-c", "--grpc-plaintext", "--aggregated-api-addr", aggAddr,
		"--aggregated-api-tls-cert-file", certFile, "--aggregated-api-tls-key-file", keyFile)
	_, portStr, _ := net.SplitHostPort(aggAddr)
	port, _ := strconv.Atoi(portStr)

	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: svcName, Namespace: testenv.SystemNamespace},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeExternalName, ExternalName: "localhost",
			Ports: []corev1.ServicePort{{Name: "https", Port: int32(port)}}},
	}
	if _, err := env.Client.CoreV1().Services(svc.Namespace).Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	ca, err := os.ReadFile(certFile)
	if err != nil {
		t.Fatal(err)
	}
	apiServices := schema.GroupVersionResource{Group: "apiregistration.k8s.io", Version: "v1", Resource: "apiservices"}
	api := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService",
		"metadata": map[string]any{"name": "v1alpha1.api.ipledger.io"},
		"spec": map[string]any{
			"group": "api.ipledger.io", "version": "v1alpha1", "groupPriorityMinimum": int64(1000), "versionPriority": int64(15),
			"caBundle": base64.StdEncoding.EncodeToString(ca),
			"service":  map[string]any{"name": svcName, "namespace": testenv.SystemNamespace, "port": int64(port)},
		},
	}}
	if _, err := env.Dynamic.Resource(apiServices).Create(ctx, api, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = env.Dynamic.Resource(apiServices).Delete(ctx, api.GetName(), metav1.DeleteOptions{})
		_ = env.Client.CoreV1().Services(svc.Namespace).Delete(ctx, svcName, metav1.DeleteOptions{})
	})
	if _, err := env.Kubectl(ctx, "wait", "--for=condition=Available", "--timeout=60s", "apiservice/"+api.GetName()); err != nil {
		t.Fatal(err)
	}

	crb := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "test-plugin-person"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "ipledger:viewer"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: "grace"}},
	}
	if _, err := env.Client.RbacV1().ClusterRoleBindings().Create(ctx, crb, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Client.RbacV1().ClusterRoleBindings().Delete(ctx, crb.Name, metav1.DeleteOptions{}) })
	grace, err := env.CP.UserKubeconfig(t.TempDir(), "grace")
	if err != nil {
		t.Fatal(err)
	}
	as := func(args ...string) []string { return append(args, "--kubeconfig", grace, "--api", "aggregated") }
	op := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "test-plugin-operator"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "ipledger:operator"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: "heidi"}},
	}
	if _, err := env.Client.RbacV1().ClusterRoleBindings().Create(ctx, op, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = env.Client.RbacV1().ClusterRoleBindings().Delete(ctx, "test-plugin-operator", metav1.DeleteOptions{})
	})
	heidi, err := env.CP.UserKubeconfig(t.TempDir(), "heidi")
	if err != nil {
		t.Fatal(err)
	}

	// ipam's real answers: the four Services of startSystem, the pool.
	testenv.Eventually(t, wait, func() error {
		out, errOut, err := s.run(t, as("allocations", "-A")...)
		if err != nil {
			return fmt.Errorf("%v: %s", err, errOut)
		}
		for _, name := range []string{"api", "db", "web", "other"} {
			if !strings.Contains(out, name) {
				return fmt.Errorf("allocations -A has no %s:\n%s", name, out)
			}
		}
		return nil
	})
	wantAll(t, "pools", s.ok(t, as("pools")...), pool, "4/8")
	wantAll(t, "why", s.ok(t, as("why", "svc/web", "-n", s.ns)...), "10.91.0.")
	// preview and history: ipam's own PreviewPool and AddressHistory, as
	// the person.
	manifest := filepath.Join(t.TempDir(), "pool.yaml")
	if err := os.WriteFile(manifest, []byte("apiVersion: ipledger.io/v1alpha1\nkind: IPPool\nmetadata: {name: plugin-grow}\nspec: {addresses: [10.92.0.0/29]}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	wantAll(t, "preview", s.ok(t, as("preview", "-f", manifest)...), "plugin-grow (Create)")
	testenv.Eventually(t, wait, func() error { // the leader writes the history; this standby reads it
		out, errOut, err := s.run(t, as("history", s.ns+"/web")...)
		if err != nil {
			return fmt.Errorf("%v: %s", err, errOut)
		}
		if !strings.Contains(out, "granted") || !strings.Contains(out, s.ns+"/web") {
			return fmt.Errorf("history %s/web has no grant:\n%s", s.ns, out)
		}
		return nil
	})
	// Not the leader: refused after client-go's retries, naming the leader.
	_, errOut, err := s.run(t, "reserve", "10.91.0.6", "--note", "lab", "--kubeconfig", heidi, "--api", "aggregated")
	if err == nil || !strings.Contains(err.Error()+errOut, `not the leader; send reservations to the leader, "ipam-a"`) {
		t.Errorf("reserve through a standby only: %v %s", err, errOut)
	}
	// A viewer cannot release: refused by the kube-apiserver naming the
	// grant, with the fix for a person.
	_, errOut, err = s.run(t, as("release", "10.91.0.6")...)
	if err == nil || !strings.Contains(err.Error()+errOut, `cannot delete resource "reservations" in API group "api.ipledger.io"`) ||
		!strings.Contains(err.Error()+errOut, "--clusterrole=ipledger:operator --user=YOU") {
		t.Errorf("release as a viewer: %v %s", err, errOut)
	}
}
