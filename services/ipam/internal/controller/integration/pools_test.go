package integration

import (
	"context"
	"fmt"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"

	"github.com/ipledger/ipledger/lab/testenv"
	ipamv1 "github.com/ipledger/ipledger/proto/ipledger/ipam/v1"
	"github.com/ipledger/ipledger/services/ipam/internal/controller"
)

// TestPoolEditsNeverMoveAnAddress edits an IPPool the way operators do —
// a mistyped range, a shrink below addresses in use, a delete — and checks
// that no Service's address ever moves or vanishes: a 30 ms poller fails the
// test on any IP shown by two Services, and every Service keeps exactly the
// IP it was given until it is deleted itself.
func TestPoolEditsNeverMoveAnAddress(t *testing.T) {
	h := newHarness(t)
	ctx := context.Background()
	pool := "tedit-" + h.lease[len("ipam-"):]
	h.poolIn(pool, []string{h.ns}, "10.78.1.0/29")
	given := map[string]string{"a": "10.78.1.0", "b": "10.78.1.1", "c": "10.78.1.2", "d": "10.78.1.3"}
	h.watchDuplicates()
	r := h.start("ipam-0")
	for _, name := range []string{"a", "b", "c", "d"} {
		h.service(name, nil)
		h.expect(wait, map[string]string{name: given[name]}) // one by one: the order fixes the IPs
	}

	// 1. A mistyped range is refused by the API server; nothing changes.
	err := h.patchPool(pool, `{"spec":{"addresses":["10.78.1.20-10.78.1.10"]}}`)
	if err == nil || !strings.Contains(err.Error(), "starts after it ends") {
		t.Fatalf("a reversed range was accepted: %v", err)
	}

	// 1b. An install without the admission policy (an older one) lets the
	// mistyped range through: ipam keeps serving the last valid spec and
	// says so; no Service moves.
	if err := h.env.Client.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings().Delete(ctx, "ipledger-ippool-ranges", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := h.env.Install(context.Background()); err != nil {
			t.Errorf("restore the admission policy: %v", err)
		}
	})
	testenv.Eventually(t, wait, func() error {
		return h.patchPool(pool, `{"spec":{"addresses":["10.78.1.20-10.78.1.10"]}}`)
	})
	testenv.Eventually(t, wait, func() error {
		p, err := h.env.Dynamic.Resource(controller.PoolGVR).Get(ctx, pool, metav1.GetOptions{})
		if err != nil {
			return err
		}
		ready, invalid := poolCondition(p, "Ready"), poolCondition(p, "Invalid")
		if !strings.HasPrefix(ready, "True ServingLastValidSpec") || !strings.Contains(invalid, `spec.addresses[0] "10.78.1.20-10.78.1.10": range starts after it ends; write it as 10.78.1.10-10.78.1.20`) {
			return fmt.Errorf("Ready = %s; Invalid = %s", ready, invalid)
		}
		return nil
	})
	h.service("f", nil)
	h.expect(wait, map[string]string{"f": "10.78.1.4"}) // still allocating from the last valid spec
	given["f"] = "10.78.1.4"
	h.expect(wait, given)

	// 2. Shrunk below c, d and f: they keep their addresses, held outside the
	// pool, counted in its status; a new Service gets nothing outside the
	// new range.
	if err := h.patchPool(pool, `{"spec":{"addresses":["10.78.1.0/31"]}}`); err != nil {
		t.Fatal(err)
	}
	h.service("e", nil)
	h.expect(wait, map[string]string{"e": "PoolExhausted"})
	testenv.Eventually(t, wait, func() error {
		st := h.state()
		for _, name := range []string{"c", "d", "f"} {
			if st.reason[name] != "HeldOutsidePool" || !strings.Contains(st.msg[name], "no longer in any serving IPPool") {
				return fmt.Errorf("%s: condition %s %q, want HeldOutsidePool", name, st.reason[name], st.msg[name])
			}
		}
		if n := h.poolStatusInt(pool, "heldOutside"); n != 3 {
			return fmt.Errorf("pool status heldOutside = %d, want 3 (c, d, f)", n)
		}
		return nil
	})
	h.expect(wait, given)
	h.expectEvent("c", "HeldOutsidePool")
	srv := h.api(r)
	testenv.Eventually(t, wait, func() error {
		x, err := srv.ExplainService(ctx, &ipamv1.ExplainServiceRequest{Service: &ipamv1.ServiceRef{Namespace: h.ns, Name: "c"}})
		if err != nil {
			return err
		}
		if x.GetReason() != "HeldOutsidePool" || !strings.Contains(x.GetDecision(), "The Service keeps 10.78.1.2, held outside its pool") {
			return fmt.Errorf("ExplainService(c) = %s: %s", x.GetReason(), x.GetDecision())
		}
		pools, err := srv.ListPools(ctx, &ipamv1.ListPoolsRequest{})
		if err != nil {
			return err
		}
		for _, p := range pools.GetPools() {
			if p.GetName() == pool && p.GetHeldOutside() != 3 {
				return fmt.Errorf("ListPools: %s held_outside = %d, want 3", pool, p.GetHeldOutside())
			}
		}
		return nil
	})

	// 3. Deleted while Services hold its addresses: Terminating, nothing
	// released, nothing new handed out; gone with the last holder.
	if err := h.env.Dynamic.Resource(controller.PoolGVR).Delete(ctx, pool, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, wait, func() error {
		p, err := h.env.Dynamic.Resource(controller.PoolGVR).Get(ctx, pool, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if c := poolCondition(p, "Ready"); !strings.Contains(c, "Terminating") || !strings.Contains(c, "5 Services hold its addresses") {
			return fmt.Errorf("Ready condition = %s", c)
		}
		return nil
	})
	h.expect(wait, given)
	h.expect(wait, map[string]string{"e": "NoMatchingPool"})
	for _, name := range []string{"a", "b", "c", "d", "f"} {
		if err := h.env.Client.CoreV1().Services(h.ns).Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	testenv.Eventually(t, wait, func() error {
		_, err := h.env.Dynamic.Resource(controller.PoolGVR).Get(ctx, pool, metav1.GetOptions{})
		if !apierrors.IsNotFound(err) {
			return fmt.Errorf("pool still there after its last Service went: %v", err)
		}
		return nil
	})
}

// TestClaimNeedsAnEligiblePool: a Service in a namespace the pool does not
// serve cannot block the pool's address by requesting it.
func TestClaimNeedsAnEligiblePool(t *testing.T) {
	h := newHarness(t)
	intruders := h.env.Namespace(t, nil)
	pool := "tclaim-" + h.lease[len("ipam-"):]
	h.poolIn(pool, []string{h.ns}, "10.78.2.1/32")
	h.serviceIn(intruders, "intruder", map[string]string{"ipledger.io/loadBalancerIPs": "10.78.2.1"})
	h.service("pending", nil)
	h.watchDuplicates()
	h.start("ipam-0")
	h.expect(wait, map[string]string{"pending": "10.78.2.1"})
}

func (h *harness) patchPool(name, patch string) error {
	_, err := h.env.Dynamic.Resource(controller.PoolGVR).Patch(context.Background(), name, types.MergePatchType, []byte(patch), metav1.PatchOptions{})
	return err
}

func (h *harness) poolStatusInt(name, field string) int64 {
	p, err := h.env.Dynamic.Resource(controller.PoolGVR).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		return -1
	}
	n, _, _ := unstructured.NestedInt64(p.Object, "status", field)
	return n
}

func poolCondition(p *unstructured.Unstructured, typ string) string {
	conds, _, _ := unstructured.NestedSlice(p.Object, "status", "conditions")
	for _, c := range conds {
		if m, ok := c.(map[string]any); ok && m["type"] == typ {
			return fmt.Sprintf("%v %v: %v", m["status"], m["reason"], m["message"])
		}
	}
	return ""
}

func (h *harness) expectEvent(service, reason string) {
	h.t.Helper()
	testenv.Eventually(h.t, wait, func() error {
		evs, err := h.env.Client.CoreV1().Events(h.ns).List(context.Background(), metav1.ListOptions{FieldSelector: "involvedObject.name=" + service})
		if err != nil {
			return err
		}
		for _, e := range evs.Items {
			if e.Reason == reason {
				return nil
			}
		}
		return fmt.Errorf("no %s Event on Service %s (%d events)", reason, service, len(evs.Items))
	})
}

// poolIn creates an IPPool serving only namespaces; the cleanup lets it go
// even when no ipam is left to remove the pool-protection finalizer.
func (h *harness) poolIn(name string, namespaces []string, addrs ...string) {
	h.t.Helper()
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "ipledger.io/v1alpha1", "kind": "IPPool",
		"metadata": map[string]any{"name": name},
		"spec":     map[string]any{"addresses": toAny(addrs), "allocation": map[string]any{"namespaces": toAny(namespaces)}},
	}}
	if _, err := h.env.Dynamic.Resource(controller.PoolGVR).Create(context.Background(), u, metav1.CreateOptions{}); err != nil {
		h.t.Fatal(err)
	}
	h.t.Cleanup(func() {
		_ = h.patchPool(name, `{"metadata":{"finalizers":null}}`)
		_ = h.env.Dynamic.Resource(controller.PoolGVR).Delete(context.Background(), name, metav1.DeleteOptions{})
	})
}
