package integration

import (
	"context"
	"fmt"
	"net/netip"
	"reflect"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ipledger/ipledger/lab/testenv"
	"github.com/ipledger/ipledger/services/ipam/internal/ledger"
)

const wait = 60 * time.Second

// restart stops r and starts a new replica, returning once the new term has
// fenced the ledger.
func (h *harness) restart(r *ipam, identity string) *ipam {
	h.t.Helper()
	r.stop()
	next := h.start(identity)
	testenv.Eventually(h.t, wait, func() error {
		if term := h.ledgerTerm(); !strings.HasPrefix(term, identity+"/") {
			return fmt.Errorf("ledger term is %q, want one of %s", term, identity)
		}
		return nil
	})
	return next
}

// MetalLB #1984 and its request-annotation variant, across 5 restarts: two
// single-IP pools; A holds IP1 in its status, B only requests IP2 by
// annotation (empty status); C and D are pending and older than both. A keeps
// IP1, B gets IP2, C and D stay PoolExhausted, and no IP ever shows on two
// Services.
func TestPendingNeverTakesANamedIP(t *testing.T) {
	h := newHarness(t)
	h.pool("t1984-one", "10.77.1.1/32")
	h.pool("t1984-two", "10.77.1.2/32")
	h.service("c", nil)
	h.service("d", nil)
	h.service("a", nil)
	h.setStatus("a", "10.77.1.1")
	h.service("b", map[string]string{"ipledger.io/loadBalancerIPs": "10.77.1.2"})
	h.watchDuplicates()

	want := map[string]string{"a": "10.77.1.1", "b": "10.77.1.2", "c": "PoolExhausted", "d": "PoolExhausted"}
	r := h.start("ipam-0")
	h.expect(wait, want)
	for i := 1; i <= 5; i++ {
		r = h.restart(r, fmt.Sprintf("ipam-%d", i))
		h.expect(wait, want)
	}

	// The ledger equals the statuses.
	st, err := ledger.Read(context.Background(), h.env.Client, h.ledgerNS)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, a := range st.Allocations {
		got = append(got, a.Service.Name+"="+a.IP.String())
	}
	if want := []string{"a=10.77.1.1", "b=10.77.1.2"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("ledger = %v, want %v", got, want)
	}
	// Pending Services say why, in words.
	if msg := h.state().msg["c"]; !strings.Contains(msg, "t1984") {
		t.Errorf("condition message of c = %q, want it to name the pools", msg)
	}
}

// More Services wait than one pass decides (a batch of one), and the pool
// has one address: the oldest Service gets it, although its name sorts
// last. A pass orders the waiting Services by creation time without
// decoding them all from the stream's store.
func TestOldestServiceFirstAcrossBatches(t *testing.T) {
	h := newHarness(t)
	h.batchSize = 1
	h.pool("t-oldest-first", "10.77.3.1/32")
	older := h.service("z-older", nil)
	// creationTimestamp counts whole seconds: the younger Service must be
	// created in a later one.
	testenv.Eventually(t, 5*time.Second, func() error {
		if !time.Now().After(older.CreationTimestamp.Add(time.Second)) {
			return fmt.Errorf("still within the second z-older was created in")
		}
		return nil
	})
	younger := h.service("a-younger", nil)
	if !older.CreationTimestamp.Before(&younger.CreationTimestamp) {
		t.Fatalf("z-older created at %v, a-younger at %v: not older", older.CreationTimestamp, younger.CreationTimestamp)
	}
	h.start("ipam-0")
	h.expect(wait, map[string]string{"z-older": "10.77.3.1", "a-younger": "PoolExhausted"})
}

// A status wiped by hand while the ledger still names the Service: it gets
// its IP back, across a restart too, and nobody else takes it.
func TestWipedStatusRestoredFromLedger(t *testing.T) {
	h := newHarness(t)
	h.pool("twipe-one", "10.77.2.1/32")
	h.service("a", nil)
	h.watchDuplicates()
	r := h.start("ipam-0")
	h.expect(wait, map[string]string{"a": "10.77.2.1"})

	// Stop ipam, wipe A's status, add a pending Service older in the queue.
	r.stop()
	h.setStatus("a")
	h.service("c", nil)
	r = h.restart(r, "ipam-1")
	h.expect(wait, map[string]string{"a": "10.77.2.1", "c": "PoolExhausted"})

	// Wiped while running: restored again.
	h.setStatus("a")
	h.expect(wait, map[string]string{"a": "10.77.2.1", "c": "PoolExhausted"})

	// A second pass writes nothing: the status's resourceVersion holds still.
	s1, _ := h.env.Client.CoreV1().Services(h.ns).Get(context.Background(), "a", metav1.GetOptions{})
	r = h.restart(r, "ipam-2")
	h.expect(wait, map[string]string{"a": "10.77.2.1", "c": "PoolExhausted"})
	s2, _ := h.env.Client.CoreV1().Services(h.ns).Get(context.Background(), "a", metav1.GetOptions{})
	if s1.ResourceVersion != s2.ResourceVersion {
		t.Errorf("a restart rewrote an already-correct Service (rv %s -> %s): %+v", s1.ResourceVersion, s2.ResourceVersion, s2.Status)
	}
	_ = r
}

// A ledger that cannot be parsed stops allocation: an Event names the
// ConfigMap, the pool's Ready condition says why, and the bytes stay as
// they were.
func TestCorruptLedgerStopsAllocation(t *testing.T) {
	h := newHarness(t)
	ctx := context.Background()
	bad := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: ledger.HeadName, Namespace: h.ledgerNS, Labels: map[string]string{ledger.LabelKey: "true"}},
		Data:       map[string]string{"format": ledger.Format, "allocations.jsonl": "{not json\n"},
	}
	created, err := h.env.Client.CoreV1().ConfigMaps(h.ledgerNS).Create(ctx, bad, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	h.pool("tcorrupt-one", "10.77.3.0/30")
	h.service("a", nil)
	h.start("ipam-0")

	testenv.Eventually(t, wait, func() error {
		evs, err := h.env.Client.CoreV1().Events(h.ledgerNS).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + ledger.HeadName})
		if err != nil {
			return err
		}
		for _, e := range evs.Items {
			if e.Reason == "LedgerCorrupt" && strings.Contains(e.Message, "allocations.jsonl line 1") {
				return nil
			}
		}
		return fmt.Errorf("no LedgerCorrupt Event yet (%d events)", len(evs.Items))
	})
	testenv.Eventually(t, wait, func() error {
		p, err := h.env.Dynamic.Resource(poolGVR()).Get(ctx, "tcorrupt-one", metav1.GetOptions{})
		if err != nil {
			return err
		}
		conds, _, _ := unstructuredSlice(p.Object, "status", "conditions")
		for _, c := range conds {
			m := c.(map[string]any)
			if m["type"] == "Ready" && m["status"] == "False" && m["reason"] == "LedgerUnreadable" {
				return nil
			}
		}
		return fmt.Errorf("pool conditions %v", conds)
	})
	if ips := h.state().ips["a"]; len(ips) != 0 {
		t.Fatalf("a got %v from a corrupt ledger", ips)
	}
	got, err := h.env.Client.CoreV1().ConfigMaps(h.ledgerNS).Get(ctx, ledger.HeadName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got.ResourceVersion != created.ResourceVersion || !reflect.DeepEqual(got.Data, bad.Data) {
		t.Fatalf("the corrupt ledger was rewritten: %v", got.Data)
	}

	// Repaired by a person: allocation resumes.
	if err := h.env.Client.CoreV1().ConfigMaps(h.ledgerNS).Delete(ctx, ledger.HeadName, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	h.expect(wait, map[string]string{"a": "10.77.3.0"})
}

// Bad input gets a condition (and Event) naming the field.
func TestBadInputNamesTheField(t *testing.T) {
	h := newHarness(t)
	h.pool("tbad-one", "10.77.4.0/29")
	h.service("unparsable", map[string]string{"ipledger.io/loadBalancerIPs": "10.77.4.300"})
	h.service("outside", map[string]string{"ipledger.io/loadBalancerIPs": "192.0.2.1"})
	h.service("both", map[string]string{"ipledger.io/loadBalancerIPs": "10.77.4.1"}, func(s *corev1.Service) { s.Spec.LoadBalancerIP = "10.77.4.1" })
	h.service("unknownpool", map[string]string{"ipledger.io/address-pool": "nope"})
	h.service("twov4", map[string]string{"ipledger.io/loadBalancerIPs": "10.77.4.2,10.77.4.3"})
	h.start("ipam-0")
	h.expect(wait, map[string]string{
		"unparsable": "InvalidRequest", "outside": "RequestedIPNotInPool", "both": "InvalidRequest",
		"unknownpool": "NoMatchingPool", "twov4": "InvalidRequest",
	})
	st := h.state()
	for name, field := range map[string]string{
		"unparsable": "ipledger.io/loadBalancerIPs", "outside": "192.0.2.1", "both": "spec.loadBalancerIP",
		"unknownpool": "nope", "twov4": "ipledger.io/loadBalancerIPs",
	} {
		if !strings.Contains(st.msg[name], field) {
			t.Errorf("%s: message %q does not name %q", name, st.msg[name], field)
		}
	}
}

// A reservation survives restarts and is never auto-assigned; released, the
// waiting Service takes the IP.
func TestReservationSurvivesRestart(t *testing.T) {
	h := newHarness(t)
	ctx := context.Background()
	h.pool("tres-one", "10.77.5.1/32")
	r := h.start("ipam-0")
	testenv.Eventually(t, wait, func() error {
		_, err := r.ctrl.Reserve(ctx, ledger.Reservation{IP: netip.MustParseAddr("10.77.5.1"), Note: "lab router", CreatedAt: time.Now()})
		return err
	})
	h.service("waiting", nil)
	h.expect(wait, map[string]string{"waiting": "PoolExhausted"})
	r = h.restart(r, "ipam-1")
	h.expect(wait, map[string]string{"waiting": "PoolExhausted"})
	st, err := ledger.Read(ctx, h.env.Client, h.ledgerNS)
	if err != nil || len(st.Reservations) != 1 || st.Reservations[0].Note != "lab router" {
		t.Fatalf("ledger reservations = %+v, %v", st.Reservations, err)
	}
	var res ledger.Reservation
	testenv.Eventually(t, wait, func() error {
		res, err = r.ctrl.Unreserve(ctx, netip.MustParseAddr("10.77.5.1"))
		return err
	})
	if res.Note != "lab router" {
		t.Fatalf("released %+v", res)
	}
	h.expect(wait, map[string]string{"waiting": "10.77.5.1"})
}

// A Service that stops being our LoadBalancer has its status cleared first
// and its ledger entry removed after; a deleted one is released too; the
// pending Service then takes the IP.
func TestReleaseOnTypeChangeAndDelete(t *testing.T) {
	h := newHarness(t)
	ctx := context.Background()
	h.pool("trel-one", "10.77.8.1/32")
	h.service("a", nil)
	h.watchDuplicates()
	h.start("ipam-0")
	h.expect(wait, map[string]string{"a": "10.77.8.1"})
	testenv.Eventually(t, wait, func() error {
		s, err := h.env.Client.CoreV1().Services(h.ns).Get(ctx, "a", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if got := s.Annotations["ipledger.io/allocated-from-pool"]; got != "trel-one" {
			return fmt.Errorf("allocated-from-pool = %q", got)
		}
		return nil
	})
	h.service("b", nil)
	h.expect(wait, map[string]string{"a": "10.77.8.1", "b": "PoolExhausted"})

	// a becomes a ClusterIP Service.
	patch := []byte(`{"spec":{"type":"ClusterIP","loadBalancerClass":null,"externalTrafficPolicy":null,"allocateLoadBalancerNodePorts":null,"ports":[{"name":"http","port":80,"targetPort":8080,"protocol":"TCP","nodePort":null}]}}`)
	if _, err := h.env.Client.CoreV1().Services(h.ns).Patch(ctx, "a", "application/merge-patch+json", patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	h.expect(wait, map[string]string{"b": "10.77.8.1"})
	testenv.Eventually(t, wait, func() error {
		s, err := h.env.Client.CoreV1().Services(h.ns).Get(ctx, "a", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if len(s.Status.Conditions) > 0 || len(s.Status.LoadBalancer.Ingress) > 0 || s.Annotations["ipledger.io/allocated-from-pool"] != "" {
			return fmt.Errorf("a still shows ipam's marks: %+v %v", s.Status, s.Annotations)
		}
		return nil
	})

	// b is deleted: c takes the IP, and the ledger names only c.
	h.service("c", nil)
	h.expect(wait, map[string]string{"b": "10.77.8.1", "c": "PoolExhausted"})
	if err := h.env.Client.CoreV1().Services(h.ns).Delete(ctx, "b", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	h.expect(wait, map[string]string{"c": "10.77.8.1"})
	st, err := ledger.Read(ctx, h.env.Client, h.ledgerNS)
	if err != nil || len(st.Allocations) != 1 || st.Allocations[0].Service.Name != "c" {
		t.Fatalf("ledger = %+v, %v", st.Allocations, err)
	}
}
