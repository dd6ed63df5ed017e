package cluster_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/ipledger/ipledger/lab/testenv"
)

// namespacePool creates an IPPool (named generateName + a suffix) over
// cidr for ns alone. When the test ends it deletes the Services of ns
// first, so that ipam gives their addresses back, then the pool, and waits
// until the pool is gone, so that a later test can use the range.
func (e *env) namespacePool(t *testing.T, ns, generateName, cidr string) {
	t.Helper()
	ctx := context.Background()
	pools := e.dynamic.Resource(poolsGVR)
	created, err := pools.Create(ctx, &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "ipledger.io/v1alpha1", "kind": "IPPool",
		"metadata": map[string]any{"generateName": generateName},
		"spec": map[string]any{
			"addresses":  []any{cidr},
			"allocation": map[string]any{"namespaces": []any{ns}},
		},
	}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create IPPool %s over %s for %s: %v", generateName, cidr, ns, err)
	}
	t.Cleanup(func() {
		svcs, err := e.client.CoreV1().Services(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Error(err)
		} else {
			for _, s := range svcs.Items {
				if err := e.client.CoreV1().Services(ns).Delete(ctx, s.Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
					t.Error(err)
				}
			}
		}
		if err := pools.Delete(ctx, created.GetName(), metav1.DeleteOptions{}); err != nil {
			t.Error(err)
		}
		testenv.Eventually(t, 2*time.Minute, func() error {
			if _, err := pools.Get(ctx, created.GetName(), metav1.GetOptions{}); !apierrors.IsNotFound(err) {
				return fmt.Errorf("IPPool %s is still there (%v)", created.GetName(), err)
			}
			return nil
		})
	})
}
