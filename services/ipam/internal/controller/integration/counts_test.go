package integration

import (
	"context"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"

	"github.com/ipledger/ipledger/lab/testenv"
	ipamv1 "github.com/ipledger/ipledger/proto/ipledger/ipam/v1"
)

// poolCounts is what a pool's IPv4 used, held and available count.
type poolCounts struct{ used, held, available int64 }

// TestPoolCountsHeldAndAvailable: a pool's counts as its Services come and
// go, alike in the IPPool's status, `kubectl get ippools -o wide`,
// ListPools and the metrics. Deleting Services leaves used as it was (their
// addresses are kept) and lowers held at once; available rises only when a
// keep ends (an operator's release, the grace period's end). A Service of
// the namespace taking a kept address makes it held again, not available.
func TestPoolCountsHeldAndAvailable(t *testing.T) {
	h := newHarness(t)
	h.keepReleased = time.Hour
	pool := "tcounts-" + h.lease[len("ipam-"):]
	h.pool(pool, "10.81.6.0/29", "2001:db8:81:6::/125")
	r := h.start("ipam-0")
	for _, s := range []string{"a", "b", "c"} {
		h.service(s, nil)
	}
	h.expect(wait, map[string]string{"a": "10.81.6.0", "b": "10.81.6.1", "c": "10.81.6.2"})
	h.expectCounts(r, pool, poolCounts{used: 3, held: 3, available: 5})

	h.deleteService("a", "b")
	h.expectKept(h.ns+"/a=10.81.6.0", h.ns+"/b=10.81.6.1")
	h.expectCounts(r, pool, poolCounts{used: 3, held: 1, available: 5})

	h.service("a2", map[string]string{"ipledger.io/loadBalancerIPs": "10.81.6.0"})
	h.expect(wait, map[string]string{"a2": "10.81.6.0", "c": "10.81.6.2"})
	h.expectCounts(r, pool, poolCounts{used: 3, held: 2, available: 5})

	if _, err := h.api(r).ReleaseReservation(context.Background(), &ipamv1.ReleaseReservationRequest{Ip: "10.81.6.1"}); err != nil {
		t.Fatalf("release b's kept address: %v", err)
	}
	h.expectCounts(r, pool, poolCounts{used: 2, held: 2, available: 6})

	// c's keep ends with the grace period, shortened now to a second.
	h.deleteService("c")
	h.expectKept(h.ns + "/c=10.81.6.2")
	h.expectCounts(r, pool, poolCounts{used: 2, held: 1, available: 6})
	patch := []byte(`{"spec":{"allocation":{"keepReleasedSeconds":1}}}`)
	if _, err := h.env.Dynamic.Resource(poolGVR()).Patch(context.Background(), pool, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	h.expectKept()
	h.expectCounts(r, pool, poolCounts{used: 1, held: 1, available: 7})
}

// expectCounts waits until every place that shows pool's IPv4 counts shows
// want (total 8), and its IPv6 (2001:db8:81:6::/125 hands out 7) none used.
func (h *harness) expectCounts(r *ipam, pool string, want poolCounts) {
	h.t.Helper()
	ctx := context.Background()
	v4 := map[string]int64{"total": 8, "used": want.used, "held": want.held, "available": want.available}
	v6 := map[string]int64{"total": 7, "used": 0, "held": 0, "available": 7}
	testenv.Eventually(h.t, wait, func() error {
		p, err := h.env.Dynamic.Resource(poolGVR()).Get(ctx, pool, metav1.GetOptions{})
		if err != nil {
			return err
		}
		for fam, w := range map[string]map[string]int64{"ipv4": v4, "ipv6": v6} {
			for k, n := range w {
				if got, _, _ := unstructured.NestedInt64(p.Object, "status", fam, k); got != n {
					return fmt.Errorf("status.%s.%s = %d, want %d", fam, k, got, n)
				}
			}
		}
		return nil
	})
	testenv.Eventually(h.t, wait, func() error {
		out, err := h.env.Kubectl(ctx, "get", "ippools", pool, "-o", "wide")
		if err != nil {
			return err
		}
		cols := printedColumns(string(out))
		for col, n := range map[string]int64{"IPV4 USED": v4["used"], "IPV4 HELD": v4["held"], "IPV4 AVAILABLE": v4["available"], "IPV4 TOTAL": 8,
			"IPV6 USED": 0, "IPV6 HELD": 0, "IPV6 AVAILABLE": 7} {
			if cols[col] != strconv.FormatInt(n, 10) {
				return fmt.Errorf("kubectl get ippools -o wide: %s = %q, want %d\n%s", col, cols[col], n, out)
			}
		}
		return nil
	})
	testenv.Eventually(h.t, wait, func() error {
		resp, err := h.api(r).ListPools(ctx, &ipamv1.ListPoolsRequest{})
		if err != nil {
			return err
		}
		for _, p := range resp.GetPools() {
			if p.GetName() != pool {
				continue
			}
			for fam, got := range map[string]*ipamv1.FamilyUsage{"IPv4": p.GetIpv4(), "IPv6": p.GetIpv6()} {
				w := v4
				if fam == "IPv6" {
					w = v6
				}
				if g := []string{got.GetTotal(), got.GetUsed(), got.GetHeld(), got.GetAvailable()}; strings.Join(g, " ") != fmt.Sprint(w["total"], w["used"], w["held"], w["available"]) {
					return fmt.Errorf("ListPools %s: total, used, held, available = %v, want %d %d %d %d", fam, g, w["total"], w["used"], w["held"], w["available"])
				}
			}
			return nil
		}
		return fmt.Errorf("ListPools has no %s", pool)
	})
	testenv.Eventually(h.t, wait, func() error {
		families, err := r.reg.Gather()
		if err != nil {
			return err
		}
		got := map[string]float64{}
		for _, mf := range families {
			if mf.GetName() != "ipledger_ipam_pool_addresses" {
				continue
			}
			for _, m := range mf.GetMetric() {
				l := map[string]string{}
				for _, lp := range m.GetLabel() {
					l[lp.GetName()] = lp.GetValue()
				}
				if l["pool"] == pool && l["family"] == "IPv4" {
					got[l["state"]] = m.GetGauge().GetValue()
				}
			}
		}
		for state, n := range v4 {
			if got[state] != float64(n) {
				return fmt.Errorf("ipledger_ipam_pool_addresses{family=IPv4} = %v, want %v", got, v4)
			}
		}
		return nil
	})
}

// printedColumns maps each column of a one-row kubectl table to its cell.
// Headers may hold a space; kubectl pads columns with three or more, and no
// cell here holds two in a row.
func printedColumns(out string) map[string]string {
	lines := strings.Split(strings.TrimSpace(out), "\n")
	sep := regexp.MustCompile(`\s{2,}`)
	cols := map[string]string{}
	if len(lines) != 2 {
		return cols
	}
	header, row := sep.Split(lines[0], -1), sep.Split(lines[1], -1)
	for i, name := range header {
		if i < len(row) {
			cols[name] = row[i]
		}
	}
	return cols
}
