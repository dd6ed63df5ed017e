package integration

import (
	"context"
	"fmt"
	"maps"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/ipledger/ipledger/lab/testenv"
	ipamv1 "github.com/ipledger/ipledger/proto/ipledger/ipam/v1"
	"github.com/ipledger/ipledger/services/ipam/internal/controller"
)

// allocation is what one Service shows: its addresses and its
// AddressAllocated condition.
type allocation struct {
	ips            string
	reason, detail string
}

func (h *harness) allocationOf(namespace, name string) (allocation, error) {
	s, err := h.env.Client.CoreV1().Services(namespace).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		return allocation{}, err
	}
	var out allocation
	out.ips = strings.Join(ingressIPs(s), ",")
	for _, c := range s.Status.Conditions {
		if c.Type == "ipledger.io/AddressAllocated" {
			out.reason, out.detail = c.Reason, c.Message
		}
	}
	return out, nil
}

// waitAllocation waits until namespace/name's condition has reason, and
// returns what it shows then.
func (h *harness) waitAllocation(namespace, name, reason string) allocation {
	h.t.Helper()
	var got allocation
	testenv.Eventually(h.t, wait, func() error {
		var err error
		if got, err = h.allocationOf(namespace, name); err != nil {
			return err
		}
		if got.reason != reason {
			return fmt.Errorf("%s/%s: %+v, want reason %s", namespace, name, got, reason)
		}
		return nil
	})
	return got
}

// sharingService creates a Service in namespace that shares under key on
// port, with more annotations.
func (h *harness) sharingService(namespace, name, key string, port int32, annotations map[string]string) {
	h.t.Helper()
	ann := map[string]string{"ipledger.io/allow-shared-ip": key}
	maps.Copy(ann, annotations)
	h.serviceIn(namespace, name, ann, func(s *corev1.Service) {
		s.Spec.Ports = []corev1.ServicePort{{Name: "p", Port: port, TargetPort: intstr.FromInt32(port), Protocol: corev1.ProtocolTCP}}
	})
}

// TestTenantCannotJoinAnotherNamespacesAddress is the CVE-2020-8554 class
// as a tenant tries it: a Service in another namespace that sets prod's
// sharing key on a free port must not get prod's address (and so receive
// its traffic), nor learn from its refusal which Service holds it or with
// which key. Operators still see the holder through ExplainService.
func TestTenantCannotJoinAnotherNamespacesAddress(t *testing.T) {
	h := newHarness(t)
	evil := h.env.Namespace(t, nil)
	h.pool("ttenant-"+h.lease[len("ipam-"):], "10.78.9.0/30")
	const key = "web-frontends"
	h.sharingService(h.ns, "web", key, 443, nil)
	r := h.start("ipam-0")
	web := h.waitAllocation(h.ns, "web", "Allocated")

	h.sharingService(evil, "asks", key, 8443, map[string]string{"ipledger.io/loadBalancerIPs": web.ips})
	h.sharingService(evil, "joins", key, 9443, nil)
	asks := h.waitAllocation(evil, "asks", "RequestedIPInUse")
	joins := h.waitAllocation(evil, "joins", "Allocated")
	if joins.ips == web.ips {
		t.Fatalf("%s/joins got %s/web's address %s by setting its sharing key", evil, h.ns, web.ips)
	}

	secrets := []string{h.ns, "web", key}
	leaks := func(what, text string) {
		t.Helper()
		for _, s := range secrets {
			if strings.Contains(text, s) {
				t.Errorf("%s names %q of another namespace: %q", what, s, text)
			}
		}
	}
	leaks("the refused Service's condition", asks.detail)
	testenv.Eventually(t, wait, func() error {
		evs, err := h.env.Client.CoreV1().Events(evil).List(context.Background(), metav1.ListOptions{FieldSelector: "involvedObject.name=asks"})
		if err != nil {
			return err
		}
		for _, e := range evs.Items {
			if e.Reason == "RequestedIPInUse" {
				leaks("the refused Service's Event", e.Message)
				return nil
			}
		}
		return fmt.Errorf("no RequestedIPInUse Event on %s/asks yet (%d events)", evil, len(evs.Items))
	})

	x, err := h.api(r).ExplainService(context.Background(), &ipamv1.ExplainServiceRequest{Service: &ipamv1.ServiceRef{Namespace: evil, Name: "asks"}})
	if err != nil || !strings.Contains(x.String(), h.ns+"/web") {
		t.Errorf("ExplainService, for operators, does not name the holder %s/web: %v, %v", h.ns, x, err)
	}
}

// TestSharedAcrossNamespacesSurvivesTheUpgrade: two Services of different
// namespaces that shared one address before sharing was kept within a
// namespace (their statuses show it, as ipam and MetalLB wrote them) keep it
// through the upgrade and a restart, each with a condition saying why and
// how to opt in; a newcomer with the key gets another address; opting in
// on both ends the condition.
func TestSharedAcrossNamespacesSurvivesTheUpgrade(t *testing.T) {
	h := newHarness(t)
	team := h.env.Namespace(t, nil)
	h.pool("tacross-"+h.lease[len("ipam-"):], "10.78.10.0/30")
	const key, ip = "shared", "10.78.10.2"
	h.sharingService(h.ns, "web", key, 443, nil)
	h.sharingService(team, "old", key, 8443, nil)
	h.setStatus("web", ip)
	h.setStatusIn(team, "old", ip)
	h.watchDuplicates()

	r := h.start("ipam-0")
	for _, s := range [][2]string{{h.ns, "web"}, {team, "old"}} {
		got := h.waitAllocation(s[0], s[1], "HeldSharedAcrossNamespaces")
		if got.ips != ip || !strings.Contains(got.detail, "ipledger.io/sharing-cross-namespace") {
			t.Fatalf("%s/%s: %+v, want it to keep %s and say how to opt in", s[0], s[1], got, ip)
		}
	}
	h.sharingService(team, "new", key, 9443, nil)
	if got := h.waitAllocation(team, "new", "Allocated"); got.ips == ip {
		t.Fatalf("%s/new joined the kept cross-namespace share %s", team, ip)
	}

	// Restarted, ipam finds both in the ledger and keeps them the same way.
	r.stop()
	h.start("ipam-1")
	h.waitAllocation(h.ns, "web", "HeldSharedAcrossNamespaces")
	// Both owners opt in: an ordinary share.
	h.annotate(h.ns, "web", "ipledger.io/sharing-cross-namespace", team)
	h.annotate(team, "old", "ipledger.io/sharing-cross-namespace", h.ns)
	for _, s := range [][2]string{{h.ns, "web"}, {team, "old"}} {
		if got := h.waitAllocation(s[0], s[1], "Allocated"); got.ips != ip {
			t.Fatalf("%s/%s moved to %s after opting in", s[0], s[1], got.ips)
		}
	}
}

func (h *harness) setStatusIn(namespace, name string, ips ...string) {
	h.t.Helper()
	ctx := context.Background()
	s, err := h.env.Client.CoreV1().Services(namespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		h.t.Fatal(err)
	}
	s.Status.LoadBalancer.Ingress = nil
	for _, ip := range ips {
		s.Status.LoadBalancer.Ingress = append(s.Status.LoadBalancer.Ingress, corev1.LoadBalancerIngress{IP: ip})
	}
	if _, err := h.env.Client.CoreV1().Services(namespace).UpdateStatus(ctx, s, metav1.UpdateOptions{}); err != nil {
		h.t.Fatal(err)
	}
}

func (h *harness) annotate(namespace, name, key, value string) {
	h.t.Helper()
	patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, key, value)
	if _, err := h.env.Client.CoreV1().Services(namespace).Patch(context.Background(), name, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		h.t.Fatal(err)
	}
}

// TestNamespaceQuotaOnAPool: a pool's maxAddressesPerNamespace stops one
// namespace at its cap while another still allocates from the pool, and
// the pool's status lists the namespace at its quota.
func TestNamespaceQuotaOnAPool(t *testing.T) {
	h := newHarness(t)
	other := h.env.Namespace(t, nil)
	pool := "tquota-" + h.lease[len("ipam-"):]
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "ipledger.io/v1alpha1", "kind": "IPPool",
		"metadata": map[string]any{"name": pool},
		"spec":     map[string]any{"addresses": []any{"10.78.11.0/29"}, "allocation": map[string]any{"maxAddressesPerNamespace": int64(2)}},
	}}
	if _, err := h.env.Dynamic.Resource(controller.PoolGVR).Create(context.Background(), u, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = h.patchPool(pool, `{"metadata":{"finalizers":null}}`)
		_ = h.env.Dynamic.Resource(controller.PoolGVR).Delete(context.Background(), pool, metav1.DeleteOptions{})
	})
	for _, name := range []string{"a", "b", "c"} {
		h.service(name, nil)
	}
	h.serviceIn(other, "d", nil)
	h.start("ipam-0")
	h.waitAllocation(h.ns, "a", "Allocated")
	h.waitAllocation(h.ns, "b", "Allocated")
	c := h.waitAllocation(h.ns, "c", "NamespaceQuotaExceeded")
	if !strings.Contains(c.detail, "maxAddressesPerNamespace is 2") {
		t.Errorf("c's condition does not name the quota: %q", c.detail)
	}
	h.waitAllocation(other, "d", "Allocated")
	testenv.Eventually(t, wait, func() error {
		p, err := h.env.Dynamic.Resource(controller.PoolGVR).Get(context.Background(), pool, metav1.GetOptions{})
		if err != nil {
			return err
		}
		at, _, _ := unstructured.NestedSlice(p.Object, "status", "namespacesAtQuota")
		if len(at) != 1 || fmt.Sprint(at[0].(map[string]any)["namespace"]) != h.ns {
			return fmt.Errorf("status.namespacesAtQuota = %v, want only %s", at, h.ns)
		}
		return nil
	})
	// Releasing one lets the waiter in.
	if err := h.env.Client.CoreV1().Services(h.ns).Delete(context.Background(), "a", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	h.waitAllocation(h.ns, "c", "Allocated")
}
