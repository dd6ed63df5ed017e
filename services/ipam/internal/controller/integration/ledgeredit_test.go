package integration

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ipledger/ipledger/lab/testenv"
	"github.com/ipledger/ipledger/services/ipam/internal/ledger"
)

// TestHandEditedLedgerIsNotObeyed: someone who can write the ledger
// ConfigMap replaces prod's entry by one giving the address to a Service of
// another namespace. The next term notices the foreign write (an Event on
// the shard, a metric), confirms from the API server that the statuses
// contradict the entry, and does not obey it: prod's Service keeps its
// address, the other Service gets another, and the entry leaves the ledger.
func TestHandEditedLedgerIsNotObeyed(t *testing.T) {
	h := newHarness(t)
	evil := h.env.Namespace(t, nil)
	ctx := context.Background()
	h.pool("tledit-"+h.lease[len("ipam-"):], "10.78.12.0/30")
	h.service("web", nil)
	r := h.start("ipam-0")
	web := h.waitAllocation(h.ns, "web", "Allocated")
	r.stop()

	h.serviceIn(evil, "x", nil)
	x, err := h.env.Client.CoreV1().Services(evil).Get(ctx, "x", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	webSvc, err := h.env.Client.CoreV1().Services(h.ns).Get(ctx, "web", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cm, err := h.env.Client.CoreV1().ConfigMaps(h.ledgerNS).Get(ctx, ledger.HeadName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	from := fmt.Sprintf(`"service":%q,"uid":%q`, h.ns+"/web", webSvc.UID)
	to := fmt.Sprintf(`"service":%q,"uid":%q`, evil+"/x", x.UID)
	if !strings.Contains(cm.Data["allocations.jsonl"], from) {
		t.Fatalf("the ledger has no entry %s: %q", from, cm.Data["allocations.jsonl"])
	}
	cm.Data["allocations.jsonl"] = strings.Replace(cm.Data["allocations.jsonl"], from, to, 1)
	if _, err := h.env.Client.CoreV1().ConfigMaps(h.ledgerNS).Update(ctx, cm, metav1.UpdateOptions{FieldManager: "kubectl-edit"}); err != nil {
		t.Fatal(err)
	}

	r = h.start("ipam-1")
	gotX := h.waitAllocation(evil, "x", "Allocated")
	if gotX.ips == web.ips {
		t.Fatalf("%s/x got %s/web's address %s from a hand-edited ledger entry", evil, h.ns, web.ips)
	}
	if now := h.waitAllocation(h.ns, "web", "Allocated"); now.ips != web.ips {
		t.Fatalf("%s/web moved from %s to %s after the ledger was edited", h.ns, web.ips, now.ips)
	}
	testenv.Eventually(t, wait, func() error {
		st, err := ledger.Read(ctx, h.env.Client, h.ledgerNS)
		if err != nil {
			return err
		}
		var got []string
		for _, a := range st.Allocations {
			got = append(got, a.Service.Key()+"="+a.IP.String())
		}
		slices.Sort(got)
		want := []string{evil + "/x=" + gotX.ips, h.ns + "/web=" + web.ips}
		slices.Sort(want)
		if !slices.Equal(got, want) {
			return fmt.Errorf("ledger %v, want %v", got, want)
		}
		return nil
	})
	for _, reason := range []string{"LedgerForeignWrite", "LedgerEntryOverruled"} {
		testenv.Eventually(t, wait, func() error {
			evs, err := h.env.Client.CoreV1().Events(h.ledgerNS).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + ledger.HeadName})
			if err != nil {
				return err
			}
			for _, e := range evs.Items {
				if e.Reason == reason {
					return nil
				}
			}
			return fmt.Errorf("no %s Event on %s", reason, ledger.HeadName)
		})
	}
	for name, want := range map[string]float64{"ipledger_ipam_ledger_entries_overruled_total": 1, "ipledger_ipam_ledger_foreign_writes_total": 1} {
		if got := counterSum(t, r, name); got != want {
			t.Errorf("%s = %v, want %v", name, got, want)
		}
	}
}

// counterSum is the sum of a counter family's series on r's registry.
func counterSum(t *testing.T, r *ipam, name string) float64 {
	t.Helper()
	families, err := r.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	sum := 0.0
	for _, f := range families {
		if f.GetName() == name {
			for _, m := range f.GetMetric() {
				sum += m.GetCounter().GetValue()
			}
		}
	}
	return sum
}
