package integration

import (
	"context"
	"fmt"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ipledger/ipledger/lab/testenv"
	"github.com/ipledger/ipledger/services/ipam/internal/history"
)

// metricValue is the value of the one series of name in r's registry.
func metricValue(r *ipam, name string) (float64, error) {
	mfs, err := r.reg.Gather()
	if err != nil {
		return 0, err
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		if len(mf.GetMetric()) != 1 {
			return 0, fmt.Errorf("%s has %d series, want 1", name, len(mf.GetMetric()))
		}
		m := mf.GetMetric()[0]
		if c := m.GetCounter(); c != nil {
			return c.GetValue(), nil
		}
		return m.GetGauge().GetValue(), nil
	}
	return 0, fmt.Errorf("no series %s", name)
}

// A history head the API server refuses to update (made immutable before
// ipam starts): Services are given their addresses all the same, the
// failures are counted and the changes not yet written exported; once the
// head is gone (an immutable ConfigMap can only be deleted) the writer
// writes what it held and the gauge falls to 0.
func TestHistoryWriteFailuresAreCountedAndBlockNoAllocation(t *testing.T) {
	h := newHarness(t)
	ctx := context.Background()
	h.pool("thist-fail-"+h.lease[len("ipam-"):], "10.83.3.0/31")
	cms := h.env.Client.CoreV1().ConfigMaps(h.ledgerNS)
	immutable := true
	if _, err := cms.Create(ctx, &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: history.HeadName, Labels: map[string]string{history.LabelKey: "true"}},
		Immutable:  &immutable, Data: map[string]string{"format": history.Format},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	r := h.start("ipam-0")
	h.service("a", nil)
	h.expect(wait, map[string]string{"a": "10.83.3.0"})
	h.service("b", nil)
	h.expect(wait, map[string]string{"b": "10.83.3.1"})
	const failures, unwritten = "ipledger_ipam_history_write_failures_total", "ipledger_ipam_history_unwritten_changes"
	testenv.Eventually(t, wait, func() error {
		f, err := metricValue(r, failures)
		if err != nil {
			return err
		}
		u, err := metricValue(r, unwritten)
		if err != nil {
			return err
		}
		if f < 2 || u < 2 {
			return fmt.Errorf("%s = %v, %s = %v; want ≥ 2 each (the term's opening and the grants of a and b, unwritten)", failures, f, unwritten, u)
		}
		return nil
	})

	if err := cms.Delete(ctx, history.HeadName, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, wait, func() error {
		if u, err := metricValue(r, unwritten); err != nil || u != 0 {
			return fmt.Errorf("%s = %v (%v), want 0 once the head is writable", unwritten, u, err)
		}
		return nil
	})
	srv := h.api(r)
	h.expectHistory(srv, "10.83.3.0", "granted "+h.ns+"/a by ipam")
	h.expectHistory(srv, "10.83.3.1", "granted "+h.ns+"/b by ipam")

	// A standby exports neither: the counter is the process's, the gauge
	// the leader's.
	r.stop()
	if n, err := testutil.GatherAndCount(r.reg, unwritten); err != nil || n != 0 {
		t.Fatalf("%s: %d series after the term ended (%v), want 0", unwritten, n, err)
	}
}
