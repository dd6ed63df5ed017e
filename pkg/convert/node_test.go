package convert

import (
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// eipd gates Nodes on its startup taint and leaves cordoned ones without a
// new address: the compact Node carries both.
func TestNodeCarriesCordonAndTaintKeys(t *testing.T) {
	o := Node(&corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: "n1"},
		Spec: corev1.NodeSpec{ProviderID: "aws:///us-east-1a/i-1", Unschedulable: true, Taints: []corev1.Taint{
			{Key: "node.kubernetes.io/not-ready", Effect: corev1.TaintEffectNoSchedule},
			{Key: "ipledger.io/eip-not-ready", Value: "x", Effect: corev1.TaintEffectNoExecute},
		}},
	})
	n := o.GetNode()
	if !n.GetUnschedulable() || n.GetProviderId() != "aws:///us-east-1a/i-1" {
		t.Fatalf("node %v: want unschedulable and the providerID", n)
	}
	if want := []string{"node.kubernetes.io/not-ready", "ipledger.io/eip-not-ready"}; !slices.Equal(n.GetTaintKeys(), want) {
		t.Fatalf("taint keys %v, want %v", n.GetTaintKeys(), want)
	}
}
