package integration

import (
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ipledger/ipledger/lab/testenv"
	"github.com/ipledger/ipledger/services/ipam/internal/history"
	"github.com/ipledger/ipledger/services/ipam/internal/ledger"
)

// historySize is the stored history's size, as the gauges say it or as
// the API server holds it.
type historySize struct{ entries, bytes, segments float64 }

// sizeGauges reads the history's size gauges from reg (ok false when the
// writer exports none).
func sizeGauges(t *testing.T, reg *prometheus.Registry) (historySize, bool) {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var got historySize
	found := 0
	for _, f := range families {
		var into *float64
		switch f.GetName() {
		case "ipledger_ipam_history_entries":
			into = &got.entries
		case "ipledger_ipam_history_stored_bytes":
			into = &got.bytes
		case "ipledger_ipam_history_segments":
			into = &got.segments
		default:
			continue
		}
		for _, m := range f.GetMetric() {
			*into = m.GetGauge().GetValue()
			found++
		}
	}
	return got, found == 3
}

// storedSize is what the API server holds: the history's entries (Read),
// the bytes of their JSON lines in every history ConfigMap, and the
// ConfigMaps.
func storedSize(t *testing.T, ctx context.Context, env *testenv.Env, ns string) historySize {
	t.Helper()
	entries, err := history.Read(ctx, env.Client, ns)
	if err != nil {
		t.Fatal(err)
	}
	list, err := env.Client.CoreV1().ConfigMaps(ns).List(ctx, metav1.ListOptions{LabelSelector: history.LabelKey + "=true"})
	if err != nil {
		t.Fatal(err)
	}
	s := historySize{entries: float64(len(entries)), segments: float64(len(list.Items))}
	for _, cm := range list.Items {
		s.bytes += float64(len(cm.Data["entries.jsonl"]))
	}
	return s
}

// The leader's history writer exports the stored history's size —
// entries, bytes of entries, ConfigMaps — from what it read and wrote, and
// keeps it true: after a term's first write (2,000 grants, sealed into
// segments), after a change, after a new term's read of the history (a
// new process's metrics), and after a trim (--history-max-per-address 1,
// which drops the grants of the released addresses), and for a writer
// that only read it (fenced by a newer term's epoch). A term that ends
// stops exporting them.
func TestSizeGaugesFollowTheStoredHistory(t *testing.T) {
	env := testenv.Get(t)
	ctx := context.Background()
	ns := env.Namespace(t, nil)
	svc := func(i int) ledger.ServiceRef {
		return ledger.ServiceRef{Namespace: "shop", Name: fmt.Sprintf("svc-%05d", i), UID: fmt.Sprintf("7f0c3b2a-5d1e-4c8b-9a6f-%012d", i)}
	}
	var st ledger.State
	ip := netip.MustParseAddr("10.0.0.0")
	for i := range 2000 {
		st.Allocations = append(st.Allocations, ledger.Allocation{IP: ip, Pool: "public", Service: svc(i), AllocatedAt: time.Now()})
		ip = ip.Next()
	}
	term := func(reg *prometheus.Registry, epoch uint64, r history.Retention) (*history.Writer, context.CancelFunc) {
		m, err := history.NewMetrics(reg)
		if err != nil {
			t.Fatal(err)
		}
		tctx, cancel := context.WithCancel(ctx)
		w := history.Start(tctx, env.Client, history.Options{Namespace: ns, Term: fmt.Sprint("t", epoch),
			Log: slog.New(slog.DiscardHandler), Metrics: m, Retention: r})
		w.Opened(st, epoch, false)
		return w, cancel
	}
	check := func(step string, reg *prometheus.Registry) historySize {
		t.Helper()
		want := storedSize(t, ctx, env, ns)
		got, ok := sizeGauges(t, reg)
		if !ok || got != want {
			t.Fatalf("%s: the gauges say %+v (exported: %v), the API server holds %+v", step, got, ok, want)
		}
		t.Logf("%s: %+v", step, got)
		return got
	}
	drain := func(w *history.Writer) {
		t.Helper()
		if err := w.Drain(ctx); err != nil {
			t.Fatal(err)
		}
	}

	reg := prometheus.NewRegistry()
	w, cancel := term(reg, 1, history.Retention{})
	drain(w)
	first := check("term 1, first write", reg)
	if first.segments < 2 {
		t.Fatalf("2,000 grants in %v ConfigMaps: the test needs sealed segments", first.segments)
	}
	var ch ledger.Change
	for i := range 300 {
		ch.Release = append(ch.Release, st.Allocations[i])
		a := ledger.Allocation{IP: ip, Pool: "public", Service: svc(2000 + i), AllocatedAt: time.Now()}
		ch.Allocate = append(ch.Allocate, a)
		ip = ip.Next()
	}
	st.Allocations = append(st.Allocations[300:], ch.Allocate...)
	w.Committed(ch, time.Now(), history.IPAM)
	drain(w)
	if got := check("term 1, after 300 releases and 300 grants", reg); got.entries != first.entries+600 {
		t.Fatalf("after 600 entries written the gauge says %v entries, was %v", got.entries, first.entries)
	}
	cancel()
	testenv.Eventually(t, 10*time.Second, func() error {
		if got, ok := sizeGauges(t, reg); ok {
			return fmt.Errorf("term 1 ended and still exports %+v", got)
		}
		return nil
	})

	// A new process: what its term's writer read.
	reg = prometheus.NewRegistry()
	w, cancel = term(reg, 2, history.Retention{})
	drain(w)
	check("term 2, after reading the history", reg)
	cancel()

	// A trim: the 300 released addresses keep only their release.
	reg = prometheus.NewRegistry()
	w, cancel = term(reg, 3, history.Retention{MaxPerAddress: 1})
	drain(w)
	trimmed := check("term 3, after the trim", reg)
	if trimmed.entries != first.entries+600-300 {
		t.Fatalf("after a trim the history holds %v entries, want %v (the grants of the 300 released addresses dropped)", trimmed.entries, first.entries+300)
	}
	cancel()

	// A writer that only reads: an older term's (epoch 1 < 3), fenced by
	// the head, writes nothing; its gauges are what it read.
	reg = prometheus.NewRegistry()
	w, cancel = term(reg, 1, history.Retention{})
	defer cancel()
	drain(w)
	check("a fenced term, after reading the history", reg)
}
