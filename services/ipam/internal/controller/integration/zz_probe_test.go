package integration

import (
	"context"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

func TestZZProbeStatusAnnotation(t *testing.T) {
	h := newHarness(t)
	ctx := context.Background()
	s := h.service("p", map[string]string{"keep": "me"})
	body := `{"metadata":{"resourceVersion":"` + s.ResourceVersion + `","annotations":{"ipledger.io/allocated-from-pool":"x"}},"status":{"loadBalancer":{"ingress":[{"ip":"1.2.3.4","ipMode":"VIP"}]}}}`
	out, err := h.env.Client.CoreV1().Services(h.ns).Patch(ctx, "p", types.MergePatchType, []byte(body), metav1.PatchOptions{FieldManager: "ipledger-ipam"}, "status")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("patch returned rv %s -> %s ann=%v ingress=%v", s.ResourceVersion, out.ResourceVersion, out.Annotations, out.Status.LoadBalancer.Ingress)
	g, _ := h.env.Client.CoreV1().Services(h.ns).Get(ctx, "p", metav1.GetOptions{})
	t.Logf("GET rv %s ann=%v ingress=%v", g.ResourceVersion, g.Annotations, g.Status.LoadBalancer.Ingress)
	body = `{"metadata":{"annotations":{"ipledger.io/allocated-from-pool":null}},"status":{"loadBalancer":{"ingress":null}}}`
	out, err = h.env.Client.CoreV1().Services(h.ns).Patch(ctx, "p", types.MergePatchType, []byte(body), metav1.PatchOptions{FieldManager: "ipledger-ipam"}, "status")
	if err != nil {
		t.Fatal(err)
	}
	g, _ = h.env.Client.CoreV1().Services(h.ns).Get(ctx, "p", metav1.GetOptions{})
	t.Logf("after clear: patch rv %s GET rv %s ann=%v ingress=%v", out.ResourceVersion, g.ResourceVersion, g.Annotations, g.Status.LoadBalancer.Ingress)
	// annotation-only change via status
	body = `{"metadata":{"annotations":{"ipledger.io/allocated-from-pool":"y"}}}`
	out, err = h.env.Client.CoreV1().Services(h.ns).Patch(ctx, "p", types.MergePatchType, []byte(body), metav1.PatchOptions{FieldManager: "ipledger-ipam"}, "status")
	g, _ = h.env.Client.CoreV1().Services(h.ns).Get(ctx, "p", metav1.GetOptions{})
	t.Logf("annot-only: err=%v patch rv %s GET rv %s ann=%v", err, out.ResourceVersion, g.ResourceVersion, g.Annotations)
}
