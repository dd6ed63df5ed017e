package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"

	"github.com/ipledger/ipledger/lab/testenv"
	ipamv1 "github.com/ipledger/ipledger/proto/ipledger/ipam/v1"
	watcherv1 "github.com/ipledger/ipledger/proto/ipledger/watcher/v1"
	"github.com/ipledger/ipledger/services/ipam/internal/controller"
	"github.com/ipledger/ipledger/services/ipam/internal/objects"
)

// TestPreviewAgreesWithApply previews an IPPool change through the API of a
// running ipam, applies the same manifest to the API server (server-side
// apply, as `kubectl apply --server-side`) or deletes the pool, waits for
// ipam to settle, and checks that every Service and every previewed pool
// shows what the preview said: addresses, condition reasons, pool states,
// usage and held-outside counts.
func TestPreviewAgreesWithApply(t *testing.T) {
	t.Run("growing a full pool gives pending Services addresses", func(t *testing.T) {
		h, r := previewWorld(t, "10.79.1.0/30", 6)
		pool := h.poolName("main")
		h.expect(wait, map[string]string{"s0": "10.79.1.0", "s1": "10.79.1.1", "s2": "10.79.1.2", "s3": "10.79.1.3", "s4": "PoolExhausted", "s5": "PoolExhausted"})
		resp := h.previewThenApply(r, poolManifest(pool, h.ns, "10.79.1.0/29"), false)
		if got := previewed(resp.GetAllocated()); got != "s4 10.79.1.4 Allocated; s5 10.79.1.5 Allocated" {
			t.Errorf("allocated: %s", got)
		}
		if p := resp.GetPools()[0]; p.GetIpv4Before().GetUsed() != "4" || p.GetIpv4After().GetUsed() != "6" || p.GetIpv4After().GetTotal() != "8" {
			t.Errorf("pool usage: %v", p)
		}
	})
	t.Run("shrinking a pool under allocated Services holds them outside it", func(t *testing.T) {
		h, r := previewWorld(t, "10.79.2.0/29", 4)
		pool := h.poolName("main")
		h.expect(wait, map[string]string{"s0": "10.79.2.0", "s1": "10.79.2.1", "s2": "10.79.2.2", "s3": "10.79.2.3"})
		resp := h.previewThenApply(r, poolManifest(pool, h.ns, "10.79.2.0/31"), false)
		if got := previewed(resp.GetHeldOutside()); got != "s2 10.79.2.2 HeldOutsidePool; s3 10.79.2.3 HeldOutsidePool" {
			t.Errorf("held outside: %s", got)
		}
		if p := resp.GetPools()[0]; p.GetHeldOutsideBefore() != 0 || p.GetHeldOutsideAfter() != 2 {
			t.Errorf("pool held outside: %v", p)
		}
	})
	t.Run("an exclusion over allocated Services holds them outside their pool", func(t *testing.T) {
		h, r := previewWorld(t, "10.79.6.0/29", 4)
		pool := h.poolName("main")
		h.expect(wait, map[string]string{"s0": "10.79.6.0", "s1": "10.79.6.1", "s2": "10.79.6.2", "s3": "10.79.6.3"})
		resp := h.previewThenApply(r, withSpec(poolManifest(pool, h.ns, "10.79.6.0/29"), "exclude", []string{"10.79.6.1", "10.79.6.3-10.79.6.4"}), false)
		if got := previewed(resp.GetHeldOutside()); got != "s1 10.79.6.1 HeldOutsidePool; s3 10.79.6.3 HeldOutsidePool" {
			t.Errorf("held outside: %s", got)
		}
		if p := resp.GetPools()[0]; p.GetHeldOutsideAfter() != 2 || p.GetIpv4After().GetUsed() != "2" || p.GetIpv4After().GetTotal() != "5" {
			t.Errorf("pool after: %v", p)
		}
	})
	t.Run("a new pool overlapping an older one is Conflicting", func(t *testing.T) {
		h, r := previewWorld(t, "10.79.3.0/30", 5)
		h.expect(wait, map[string]string{"s0": "10.79.3.0", "s1": "10.79.3.1", "s2": "10.79.3.2", "s3": "10.79.3.3", "s4": "PoolExhausted"})
		// Named to sort after the older pool: created in the same second,
		// the older one still wins by name.
		newer := h.poolName("main") + "-z"
		t.Cleanup(func() { h.deletePool(newer) })
		resp := h.previewThenApply(r, poolManifest(newer, h.ns, "10.79.3.0/29"), false)
		if len(resp.GetPools()) != 1 || resp.GetPools()[0].GetStateAfter() != "Conflicting" ||
			!strings.Contains(resp.GetPools()[0].GetConflictAfter(), "of the older pool "+h.poolName("main")) {
			t.Errorf("pools: %v", resp.GetPools())
		}
		if n := len(resp.GetAllocated()) + len(resp.GetHeldOutside()) + len(resp.GetOtherChanges()); n != 0 {
			t.Errorf("%d Services change; a Conflicting pool serves nothing", n)
		}
	})
	t.Run("deleting pools", func(t *testing.T) {
		h, r := previewWorld(t, "10.79.4.0/31", 3)
		idle := h.poolName("idle")
		h.poolIn(idle, []string{"nobody-" + h.lease}, "10.79.5.0/30")
		h.expect(wait, map[string]string{"s0": "10.79.4.0", "s1": "10.79.4.1", "s2": "PoolExhausted"})
		// Deleted before ipam has put its finalizer on it, a pool goes at
		// once (the preview says so too); here it is the protected case.
		testenv.Eventually(t, wait, func() error {
			p, ok := r.src.Store().Get(watcherv1.Kind_KIND_IP_POOL, "", h.poolName("main"))
			if !ok || !objects.HasFinalizer(p, objects.PoolFinalizer) {
				return fmt.Errorf("the stream does not show pool %s with finalizer %s yet", h.poolName("main"), objects.PoolFinalizer)
			}
			return nil
		})
		resp := h.previewThenApply(r, poolManifest(h.poolName("main"), "", ""), true)
		if p := resp.GetPools()[0]; p.GetStateAfter() != "Terminating" {
			t.Errorf("held pool: %v", p)
		}
		if got := previewed(resp.GetOtherChanges()); got != "s2  NoMatchingPool" {
			t.Errorf("other changes: %s", got)
		}
		resp = h.previewThenApply(r, poolManifest(idle, "", ""), true)
		if p := resp.GetPools()[0]; p.GetName() != idle || p.GetStateAfter() != "Absent" {
			t.Errorf("idle pool: %v", resp.GetPools())
		}
	})
}

// previewWorld runs ipam with one pool "main" of addrs serving the test's
// namespace, and n Services s0..s<n-1> created before it starts.
func previewWorld(t *testing.T, addrs string, n int) (*harness, *ipam) {
	h := newHarness(t)
	h.poolIn(h.poolName("main"), []string{h.ns}, addrs)
	for i := range n {
		h.service(fmt.Sprintf("s%d", i), nil)
	}
	// No namespace controller deletes them, and a Service of another class
	// (this harness's, next run) showing an address makes it foreign: the
	// next run (-count) would find its pool full.
	t.Cleanup(func() {
		for i := range n {
			_ = h.env.Client.CoreV1().Services(h.ns).Delete(context.Background(), fmt.Sprintf("s%d", i), metav1.DeleteOptions{})
		}
	})
	h.watchDuplicates()
	return h, h.start("ipam-0")
}

func (h *harness) poolName(role string) string { return "tprev-" + role + "-" + h.lease[len("ipam-"):] }

func (h *harness) deletePool(name string) {
	_ = h.patchPool(name, `{"metadata":{"finalizers":null}}`)
	_ = h.env.Dynamic.Resource(controller.PoolGVR).Delete(context.Background(), name, metav1.DeleteOptions{})
}

// poolManifest is an IPPool manifest in JSON; namespace and addrs are left
// out when empty.
func poolManifest(name, namespace, addrs string) []byte {
	spec := map[string]any{}
	if addrs != "" {
		spec["addresses"] = []string{addrs}
	}
	if namespace != "" {
		spec["allocation"] = map[string]any{"namespaces": []string{namespace}}
	}
	b, _ := json.Marshal(map[string]any{"apiVersion": "ipledger.io/v1alpha1", "kind": "IPPool", "metadata": map[string]any{"name": name}, "spec": spec})
	return b
}

// withSpec sets spec.<field> of a manifest from poolManifest.
func withSpec(manifest []byte, field string, v any) []byte {
	var m map[string]any
	if err := json.Unmarshal(manifest, &m); err != nil {
		panic(err)
	}
	m["spec"].(map[string]any)[field] = v
	b, _ := json.Marshal(m)
	return b
}

// previewed renders Service previews as "name ips reason", by name.
func previewed(ss []*ipamv1.ServicePreview) string {
	var out []string
	for _, s := range ss {
		out = append(out, s.GetService().GetName()+" "+strings.Join(s.GetIpsAfter(), ",")+" "+s.GetReasonAfter())
	}
	sort.Strings(out)
	return strings.Join(out, "; ")
}

// shown is what a Service shows: its IPs and its condition reason.
func (st state) shown(name string) string {
	return strings.Join(st.ips[name], ",") + " " + st.reason[name]
}

// previewThenApply waits until r's stream shows the Services as the API
// server does, previews the manifest (or deleting its pool) through r's
// API, applies it, and waits until every Service of the test and every
// previewed pool is what the preview said. The caller has waited for ipam
// to settle (every Service's address or reason), or the preview would
// count what ipam was still doing.
func (h *harness) previewThenApply(r *ipam, manifest []byte, del bool) *ipamv1.PreviewPoolResponse {
	t, ctx := h.t, context.Background()
	t.Helper()
	before := h.state()
	testenv.Eventually(t, wait, func() error {
		for _, s := range r.src.Store().ListNamespace(watcherv1.Kind_KIND_SERVICE, h.ns) {
			var ips []string
			for _, in := range s.GetService().GetIngress() {
				ips = append(ips, in.GetIp())
			}
			reason := ""
			for _, c := range s.GetService().GetConditions() {
				if c.GetType() == "ipledger.io/AddressAllocated" {
					reason = c.GetReason()
				}
			}
			if got := strings.Join(ips, ",") + " " + reason; got != before.shown(s.GetMeta().GetName()) {
				return fmt.Errorf("the stream shows %s as %q, the API server %q", s.GetMeta().GetName(), got, before.shown(s.GetMeta().GetName()))
			}
		}
		return nil
	})
	resp, err := h.api(r).PreviewPool(ctx, &ipamv1.PreviewPoolRequest{Manifest: manifest, Delete: del})
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.GetValidationErrors()) > 0 {
		t.Fatalf("validation errors: %v", resp.GetValidationErrors())
	}
	t.Logf("preview of %s:\n%s", resp.GetPool(), strings.Join(resp.GetSummary(), "\n"))

	want := map[string]string{}
	for name := range before.reason {
		want[name] = before.shown(name)
	}
	for _, list := range [][]*ipamv1.ServicePreview{resp.GetAllocated(), resp.GetHeldOutside(), resp.GetOtherChanges()} {
		for _, s := range list {
			if s.GetService().GetNamespace() == h.ns {
				want[s.GetService().GetName()] = strings.Join(s.GetIpsAfter(), ",") + " " + s.GetReasonAfter()
			}
		}
	}

	pools := h.env.Dynamic.Resource(controller.PoolGVR)
	if del {
		err = pools.Delete(ctx, resp.GetPool(), metav1.DeleteOptions{})
	} else {
		force := true
		_, err = pools.Patch(ctx, resp.GetPool(), types.ApplyPatchType, manifest, metav1.PatchOptions{FieldManager: "preview-test", Force: &force})
	}
	if err != nil {
		t.Fatal(err)
	}

	testenv.Eventually(t, wait, func() error {
		st := h.state()
		for name, w := range want {
			if got := st.shown(name); got != w {
				return fmt.Errorf("Service %s shows %q; the preview said %q", name, got, w)
			}
		}
		for _, p := range resp.GetPools() {
			obj, err := pools.Get(ctx, p.GetName(), metav1.GetOptions{})
			if err := poolAgrees(obj, err, p); err != nil {
				return err
			}
		}
		return nil
	})
	return resp
}

// poolAgrees checks an IPPool as the API server has it against its preview.
func poolAgrees(obj *unstructured.Unstructured, err error, p *ipamv1.PoolPreview) error {
	switch {
	case p.GetStateAfter() == "Absent" && apierrors.IsNotFound(err):
		return nil
	case p.GetStateAfter() == "Absent":
		return fmt.Errorf("pool %s still exists (%v); the preview said it would be removed", p.GetName(), err)
	case err != nil:
		return err
	}
	ready := poolCondition(obj, "Ready")
	used, _, _ := unstructured.NestedInt64(obj.Object, "status", "ipv4", "used")
	total, _, _ := unstructured.NestedString(obj.Object, "status", "ipv4", "totalExact")
	held, _, _ := unstructured.NestedInt64(obj.Object, "status", "heldOutside")
	got := fmt.Sprintf("Ready %s; ipv4 %d/%s; heldOutside %d", strings.SplitN(ready, ":", 2)[0], used, total, held)
	want := fmt.Sprintf("Ready %s %s; ipv4 %s/%s; heldOutside %d", map[bool]string{true: "True", false: "False"}[p.GetStateAfter() == "Serving"],
		p.GetStateAfter(), p.GetIpv4After().GetUsed(), p.GetIpv4After().GetTotal(), p.GetHeldOutsideAfter())
	if got != want {
		return fmt.Errorf("pool %s: %s; the preview said %s", p.GetName(), got, want)
	}
	return nil
}
