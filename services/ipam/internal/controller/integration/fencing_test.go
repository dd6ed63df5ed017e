package integration

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ipledger/ipledger/lab/testenv"
	"github.com/ipledger/ipledger/services/ipam/internal/ledger"
)

// leaseDuration is the Lease duration of the harness's in-process replicas.
const leaseDuration = 4 * time.Second

// waitForHolder returns once the test's Lease names identity as its holder.
func (h *harness) waitForHolder(identity string) {
	h.t.Helper()
	testenv.Eventually(h.t, wait, func() error {
		l, err := h.env.Client.CoordinationV1().Leases(h.ledgerNS).Get(context.Background(), h.lease, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity != identity {
			return fmt.Errorf("lease holder %v, want %s", l.Spec.HolderIdentity, identity)
		}
		return nil
	})
}

func (h *harness) deleteLease() {
	h.t.Helper()
	err := h.env.Client.CoordinationV1().Leases(h.ledgerNS).Delete(context.Background(), h.lease, metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		h.t.Fatal(err)
	}
}

// failovers runs replicas one after another (each stop releases the Lease
// to the next) so that the Lease counts transitions, and returns the last.
func (h *harness) failovers(ids ...string) *ipam {
	h.t.Helper()
	r := h.start(ids[0])
	h.waitForHolder(ids[0])
	for _, id := range ids[1:] {
		r = h.restart(r, id)
	}
	return r
}

// allocatedWithin creates a Service and fails the test unless it shows an IP
// within d.
func (h *harness) allocatedWithin(name string, d time.Duration) {
	h.t.Helper()
	start := time.Now()
	h.service(name, nil)
	deadline := start.Add(d)
	for {
		st := h.state()
		if len(st.ips[name]) > 0 {
			h.t.Logf("%s got %v after %s", name, st.ips[name], time.Since(start).Round(time.Millisecond))
			return
		}
		if time.Now().After(deadline) {
			h.t.Fatalf("%s has no IP %s after it was created (condition %q): the new leader does not allocate", name, d, st.reason[name])
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// ledgerEqualsStatuses fails the test unless the ledger's allocations of the
// test's namespace are exactly the IPs the Services show.
func (h *harness) ledgerEqualsStatuses() {
	h.t.Helper()
	testenv.Eventually(h.t, wait, func() error {
		st, err := ledger.Read(context.Background(), h.env.Client, h.ledgerNS)
		if err != nil {
			return err
		}
		var fromLedger, fromStatus []string
		for _, a := range st.Allocations {
			if a.Service.Namespace == h.ns {
				fromLedger = append(fromLedger, a.Service.Name+"="+a.IP.String())
			}
		}
		for name, ips := range h.state().ips {
			for _, ip := range ips {
				fromStatus = append(fromStatus, name+"="+ip)
			}
		}
		sort.Strings(fromLedger)
		sort.Strings(fromStatus)
		if a, b := strings.Join(fromLedger, " "), strings.Join(fromStatus, " "); a != b {
			return fmt.Errorf("ledger %s\nstatuses %s", a, b)
		}
		return nil
	})
}

// The Lease is deleted while no replica runs (an upgrade, a namespace
// recreated): its transitions count starts again from 0, below the one of
// the term written in the ledger. The next leader must fence the ledger and
// allocate, not sit fenced behind the terms of the deleted Lease. (A leader
// that is running when its Lease is deleted re-creates it with its count.)
func TestLeaseDeletedNextLeaderAllocates(t *testing.T) {
	h := newHarness(t)
	h.pool("tfence-lease", "10.77.13.0/28")
	h.watchDuplicates()
	h.service("s0", nil)
	r := h.failovers("ipam-a", "ipam-b", "ipam-c") // the Lease has seen 2 transitions
	h.expect(wait, map[string]string{"s0": "10.77.13.0"})
	r.stop()
	h.deleteLease()

	h.start("ipam-d")
	h.waitForHolder("ipam-d")
	h.allocatedWithin("s1", leaseDuration)
	h.expect(wait, map[string]string{"s0": "10.77.13.0", "s1": "10.77.13.1"})
	h.ledgerEqualsStatuses()
}

// The ledger is restored from a backup into a cluster whose Lease is new
// (here: the ledger ConfigMaps and the Lease are deleted and the
// ConfigMaps created again from their data). The first leader fences it and
// allocates.
func TestRestoredLedgerIsNotFenced(t *testing.T) {
	h := newHarness(t)
	ctx := context.Background()
	h.pool("tfence-restore", "10.77.14.0/28")
	h.watchDuplicates()
	h.service("s0", nil)
	r := h.failovers("ipam-a", "ipam-b", "ipam-c")
	h.expect(wait, map[string]string{"s0": "10.77.14.0"})
	r.stop()

	cms := h.env.Client.CoreV1().ConfigMaps(h.ledgerNS)
	list, err := cms.List(ctx, metav1.ListOptions{LabelSelector: ledger.LabelKey + "=true"})
	if err != nil {
		t.Fatal(err)
	}
	for _, cm := range list.Items {
		if err := cms.Delete(ctx, cm.Name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	h.deleteLease()
	for _, cm := range list.Items {
		restored := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: cm.Name, Labels: cm.Labels}, Data: cm.Data}
		if _, err := cms.Create(ctx, restored, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}

	h.start("ipam-d")
	h.waitForHolder("ipam-d")
	h.allocatedWithin("s1", leaseDuration)
	h.expect(wait, map[string]string{"s0": "10.77.14.0", "s1": "10.77.14.1"})
	h.ledgerEqualsStatuses()
}

// A replica that stops gracefully (the process shuts down; every ledger
// write of its term was answered) says so on the ledger's head, and the next
// leader rewrites the head alone instead of every shard. It still takes the
// next epoch and allocates. The head's word is gone once the next term
// wrote it, so a crash of that term leaves the term after it to fence
// everything.
func TestGracefulRestartFencesTheHeadOnly(t *testing.T) {
	h := newHarness(t)
	h.pool("tgrace", "10.77.12.1/32", "10.77.12.2/32")
	h.service("a", nil)
	h.watchDuplicates()
	r := h.start("ipam-0")
	h.expect(wait, map[string]string{"a": "10.77.12.1"})
	r.stop()
	head := h.ledgerHead()
	if got := head.Annotations[ledger.ReleasedAnnotation]; got != head.Data["epoch"] || got == "" {
		t.Fatalf("after a graceful stop the head says released %q, epoch %q", got, head.Data["epoch"])
	}
	r = h.start("ipam-1")
	h.service("b", nil)
	h.expect(wait, map[string]string{"a": "10.77.12.1", "b": "10.77.12.2"})
	if got := testenv.MetricValue(t, r.reg, "ipledger_ipam_ledger_opens_total", map[string]string{"fence": "head"}); got != 1 {
		t.Fatalf("the next leader fenced the head alone %v times, want 1", got)
	}
	head = h.ledgerHead()
	if _, ok := head.Annotations[ledger.ReleasedAnnotation]; ok || !strings.HasPrefix(head.Data["term"], "ipam-1/") {
		t.Fatalf("the next term's head: term %q, annotations %v; want ipam-1's, without the released word", head.Data["term"], head.Annotations)
	}
	h.ledgerEqualsStatuses()
}

// A leader whose ledger turned unreadable while it served holds no ledger
// writer; stopping it gracefully then says nothing on the head (and does
// not crash), and the next leader fences every shard once the ledger is
// readable again.
func TestGracefulStopWithoutAnOpenLedger(t *testing.T) {
	h := newHarness(t)
	ctx := context.Background()
	h.pool("tgrace-corrupt", "10.77.13.1/32", "10.77.13.2/32")
	h.service("a", nil)
	r := h.start("ipam-0")
	h.expect(wait, map[string]string{"a": "10.77.13.1"})
	head := h.ledgerHead()
	good := head.Data
	head.Data = map[string]string{"format": ledger.Format, "allocations.jsonl": "{not json\n"}
	if _, err := h.env.Client.CoreV1().ConfigMaps(h.ledgerNS).Update(ctx, head, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	h.service("b", nil) // its commit fails, and the term finds the ledger corrupt
	testenv.Eventually(t, wait, func() error {
		if v := testenv.MetricValue(t, r.reg, "ipledger_ipam_ledger_corrupt", nil); v != 1 {
			return fmt.Errorf("ledger corrupt gauge %v", v)
		}
		return nil
	})
	r.stop()
	head = h.ledgerHead()
	if v, ok := head.Annotations[ledger.ReleasedAnnotation]; ok {
		t.Fatalf("a term without an open ledger released it (%q)", v)
	}
	head.Data = good
	if _, err := h.env.Client.CoreV1().ConfigMaps(h.ledgerNS).Update(ctx, head, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	r = h.start("ipam-1")
	h.expect(wait, map[string]string{"a": "10.77.13.1", "b": "10.77.13.2"})
	if got := testenv.MetricValue(t, r.reg, "ipledger_ipam_ledger_opens_total", map[string]string{"fence": "every-shard"}); got != 1 {
		t.Fatalf("the next leader fenced every shard %v times, want 1", got)
	}
}
