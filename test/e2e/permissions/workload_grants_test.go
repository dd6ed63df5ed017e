package permissions

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"

	"github.com/ipledger/ipledger/lab/testenv"
)

var workloads = schema.GroupVersionResource{Group: "ipledger.io", Version: "v1alpha1", Resource: "externalworkloads"}

func workload(ns, name string, ips ...string) *unstructured.Unstructured {
	list := make([]any, 0, len(ips))
	for _, ip := range ips {
		list = append(list, map[string]any{"ip": ip})
	}
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "ipledger.io/v1alpha1", "kind": "ExternalWorkload",
		"metadata": map[string]any{"name": name, "namespace": ns},
		"spec":     map[string]any{"workloadIPs": list, "ports": []any{map[string]any{"port": int64(80)}}},
	}}
}

// warnings collects the warnings the API server sends a client.
type warnings struct {
	mu   sync.Mutex
	seen []string
}

func (w *warnings) HandleWarningHeader(_ int, _ string, text string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.seen = append(w.seen, text)
}

func (w *warnings) take() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := w.seen
	w.seen = nil
	return out
}

// A tenant names only the addresses an operator granted its namespace:
// components/workload-grants binds ipledger-externalworkload-grants to deny
// the rest, naming the address, the namespace, its grants and the fix;
// addresses an update keeps are not checked again (a workload written
// before its grants can still be relabelled); components/workload-grants-
// report only warns. Without a binding (the base), nothing is refused.
func TestWorkloadGrantsPolicy(t *testing.T) {
	env := testenv.Get(t)
	ctx := context.Background()
	ns := env.Namespace(t, nil)
	const policy = "ipledger-externalworkload-grants"
	tenant, err := dynamic.NewForConfig(rest.CopyConfig(env.Config))
	if err != nil {
		t.Fatal(err)
	}
	res := tenant.Resource(workloads).Namespace(ns)

	// Before the grants are bound: written as before, the legacy one kept.
	if _, err := res.Create(ctx, workload(ns, "legacy", "198.51.100.5"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	nsObj, err := env.Client.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	nsObj.Annotations = map[string]string{"ipledger.io/workload-cidrs": "192.0.2.0/24, 2001:db8:7::9"}
	if _, err := env.Client.CoreV1().Namespaces().Update(ctx, nsObj, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}

	bind(t, env, "workload-grants")
	enforced(t, policy, func(ctx context.Context) error {
		_, err := res.Create(ctx, workload(ns, "team-as-db", "198.51.100.7"), dryRun)
		return err
	})
	_, err = res.Create(ctx, workload(ns, "team-as-db", "198.51.100.7"), dryRun)
	refusedByPolicy(t, "a workload at another team's address", err, policy)
	for _, part := range []string{ns + "/team-as-db", "spec.workloadIPs 198.51.100.7 is not granted to namespace " + ns,
		"granted: 192.0.2.0/24,2001:db8:7::9", "Namespace annotation ipledger.io/workload-cidrs"} {
		if err == nil || !strings.Contains(err.Error(), part) {
			t.Errorf("the refusal %v does not say %q", err, part)
		}
	}
	_, err = res.Create(ctx, workload(ns, "dual", "192.0.2.8", "2001:db8:7::10"), dryRun)
	refusedByPolicy(t, "a dual-stack workload whose IPv6 address is the granted one's neighbour", err, policy)
	_, err = res.Create(ctx, workload(ns, "granted", "192.0.2.8", "2001:db8:7::9"), dryRun)
	allowed(t, "a workload inside its grants", err)

	// The legacy workload: relabelled (its address kept) passes, moved to
	// another ungranted address is refused.
	legacy, err := res.Get(ctx, "legacy", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	legacy.SetLabels(map[string]string{"app": "db"})
	_, err = res.Update(ctx, legacy, metav1.UpdateOptions{DryRun: []string{metav1.DryRunAll}})
	allowed(t, "relabelling a workload written before its grants", err)
	_ = unstructured.SetNestedSlice(legacy.Object, []any{map[string]any{"ip": "198.51.100.6"}}, "spec", "workloadIPs")
	_, err = res.Update(ctx, legacy, metav1.UpdateOptions{DryRun: []string{metav1.DryRunAll}})
	refusedByPolicy(t, "moving a workload to another ungranted address", err, policy)

	// Report only: written, with the warning.
	bind(t, env, "workload-grants-report")
	w := &warnings{}
	cfg := rest.CopyConfig(env.Config)
	cfg.WarningHandler = w
	warned, err := dynamic.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 60*time.Second, func() error {
		w.take()
		if _, err := warned.Resource(workloads).Namespace(ns).Create(ctx, workload(ns, "team-as-db", "198.51.100.7"), dryRun); err != nil {
			return err
		}
		for _, text := range w.take() {
			if strings.Contains(text, "198.51.100.7 is not granted") {
				return nil
			}
		}
		return errors.New("written without the grants' warning")
	})
}

// bind applies the binding of a shipped component, replacing the one the
// test applied before, and removes it when the test ends.
func bind(t *testing.T, env *testenv.Env, component string) {
	t.Helper()
	ctx := context.Background()
	path := filepath.Join(env.Root, "deploy/kustomize/components", component, "binding.yaml")
	if _, err := env.Kubectl(ctx, "apply", "--server-side", "--force-conflicts", "-f", path); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = env.Kubectl(context.Background(), "delete", "--ignore-not-found", "-f", path) })
}
