package integration

import (
	"context"
	"fmt"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/ipledger/ipledger/lab/testenv"
	ipamv1 "github.com/ipledger/ipledger/proto/ipledger/ipam/v1"
	"github.com/ipledger/ipledger/services/ipam/internal/controller"
)

// TestExclusionsInYAML: spec.exclude keeps a new Service off the excluded
// addresses and refuses one requested; an exclusion added over an address a
// Service holds leaves it there, held outside its pool with a condition
// saying why, counted out of the pool's total and in its heldOutside; and
// removing the exclusion ends the hold.
func TestExclusionsInYAML(t *testing.T) {
	h := newHarness(t)
	ctx := context.Background()
	pool := "texcl-" + h.lease[len("ipam-"):]
	h.poolIn(pool, []string{h.ns}, "10.78.13.0/29")
	if err := h.patchPool(pool, `{"spec":{"exclude":["10.78.13.0-10.78.13.1"]}}`); err != nil {
		t.Fatal(err)
	}
	h.watchDuplicates()
	r := h.start("ipam-0")

	// 1. A new Service skips the excluded addresses; a requested one is refused.
	h.service("a", nil)
	h.expect(wait, map[string]string{"a": "10.78.13.2"})
	h.service("req", map[string]string{"ipledger.io/loadBalancerIPs": "10.78.13.1"})
	h.expect(wait, map[string]string{"req": "RequestedIPNotInPool"})
	if msg := h.state().msg["req"]; !strings.Contains(msg, `pool `+pool+` never hands out 10.78.13.1: it is excluded by spec.exclude[0] "10.78.13.0-10.78.13.1"`) {
		t.Fatalf("req's condition: %q", msg)
	}
	h.expectPoolTotal(pool, 6)

	// 2. An exclusion over b's address: b keeps it, held outside its pool,
	// and the next Service is not given it.
	h.service("b", nil)
	h.expect(wait, map[string]string{"b": "10.78.13.3"})
	if err := h.patchPool(pool, `{"spec":{"exclude":["10.78.13.0-10.78.13.1","10.78.13.3"]}}`); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, wait, func() error {
		st := h.state()
		if st.reason["b"] != "HeldOutsidePool" || !strings.Contains(st.msg["b"], `10.78.13.3 is in pool `+pool+`, which no longer hands it out (it is excluded by spec.exclude[1] "10.78.13.3")`) {
			return fmt.Errorf("b: condition %s %q, want HeldOutsidePool naming spec.exclude[1]", st.reason["b"], st.msg["b"])
		}
		if n := h.poolStatusInt(pool, "heldOutside"); n != 1 {
			return fmt.Errorf("pool status heldOutside = %d, want 1 (b)", n)
		}
		return nil
	})
	h.expect(wait, map[string]string{"a": "10.78.13.2", "b": "10.78.13.3"})
	h.expectPoolTotal(pool, 5)
	h.expectEvent("b", "HeldOutsidePool")
	h.service("c", nil)
	h.expect(wait, map[string]string{"c": "10.78.13.4"})
	testenv.Eventually(t, wait, func() error {
		pools, err := h.api(r).ListPools(ctx, &ipamv1.ListPoolsRequest{})
		if err != nil {
			return err
		}
		for _, p := range pools.GetPools() {
			if p.GetName() == pool && (p.GetHeldOutside() != 1 || p.GetIpv4().GetTotal() != "5" || p.GetIpv4().GetUsed() != "2") {
				return fmt.Errorf("ListPools: %s held_outside %d, IPv4 %s of %s used; want 1, 2 of 5", pool, p.GetHeldOutside(), p.GetIpv4().GetUsed(), p.GetIpv4().GetTotal())
			}
		}
		return nil
	})

	// 3. The exclusion removed: b's address is an ordinary allocation again.
	if err := h.patchPool(pool, `{"spec":{"exclude":["10.78.13.0-10.78.13.1"]}}`); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, wait, func() error {
		st := h.state()
		if st.reason["b"] != "Allocated" {
			return fmt.Errorf("b: condition %s %q, want Allocated", st.reason["b"], st.msg["b"])
		}
		if n := h.poolStatusInt(pool, "heldOutside"); n != 0 {
			return fmt.Errorf("pool status heldOutside = %d, want 0", n)
		}
		return nil
	})
	h.expect(wait, map[string]string{"a": "10.78.13.2", "b": "10.78.13.3", "c": "10.78.13.4"})
	h.expectPoolTotal(pool, 6)
}

// expectPoolTotal waits for the pool's status.ipv4.total to be n.
func (h *harness) expectPoolTotal(pool string, n int64) {
	h.t.Helper()
	testenv.Eventually(h.t, wait, func() error {
		p, err := h.env.Dynamic.Resource(controller.PoolGVR).Get(context.Background(), pool, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if got, _, _ := unstructured.NestedInt64(p.Object, "status", "ipv4", "total"); got != n {
			return fmt.Errorf("pool %s status.ipv4.total = %d, want %d", pool, got, n)
		}
		return nil
	})
}
