package integration

import (
	"context"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ipledger/ipledger/lab/testenv"
	"github.com/ipledger/ipledger/services/ipam/internal/history"
	"github.com/ipledger/ipledger/services/ipam/internal/ledger"
)

// stateOf is a ledger holding what entries say (so that a term opened on
// it records nothing as recovered).
func stateOf(entries []history.Entry) ledger.State {
	var st ledger.State
	for ip, s := range history.Replay(entries) {
		for _, h := range s.Allocs {
			st.Allocations = append(st.Allocations, ledger.Allocation{IP: ip, Pool: h.Pool,
				Service: ledger.ServiceRef{Namespace: h.Namespace, Name: h.Name, UID: h.UID}})
		}
	}
	return st
}

// A term's writer, which keeps only the head's entries decoded, trims the
// sealed segments as retention over the whole history would: reading them
// again one at a time, rewriting the segments that lose entries and
// deleting those left empty. Two terms after ≈ 12,000 entries in several
// segments: one with --history-max-per-address 1 (every segment of the
// churn rewritten), one an hour later (for its clock) with
// --history-max-age 1m (only the entries of the present holders left, the
// emptied segments deleted). Each leaves exactly Retention.Trim of what
// was stored, and no ConfigMap the head does not list.
func TestWriterTrimsSealedSegments(t *testing.T) {
	env := testenv.Get(t)
	ctx := context.Background()
	ns := env.Namespace(t, nil)
	churn(t, ctx, env, ns, 2000, 12000)
	before, err := history.Read(ctx, env.Client, ns)
	if err != nil {
		t.Fatal(err)
	}
	later := time.Now().Add(time.Hour)
	for i, tc := range []struct {
		r   history.Retention
		now time.Time
	}{
		{history.Retention{MaxPerAddress: 1}, time.Now()},
		{history.Retention{MaxAge: time.Minute}, later},
	} {
		tctx, cancel := context.WithCancel(ctx)
		w := history.Start(tctx, env.Client, history.Options{Namespace: ns, Term: "trim", Log: slog.New(slog.DiscardHandler),
			Retention: tc.r, Now: func() time.Time { return tc.now }})
		w.Opened(stateOf(before), uint64(2+i), false)
		if err := w.Drain(ctx); err != nil {
			t.Fatal(err)
		}
		cancel()
		want, dropped := tc.r.Trim(before, tc.now)
		if !dropped {
			t.Fatalf("term %d: retention %+v drops nothing of %d entries: the test proves nothing", i, tc.r, len(before))
		}
		got, err := history.Read(ctx, env.Client, ns)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.EqualFunc(got, want, func(a, b history.Entry) bool {
			return a.At.Equal(b.At) && a.IP == b.IP && a.Action == b.Action && a.UID == b.UID
		}) {
			t.Fatalf("term %d (%+v): %d entries stored, want the %d Retention.Trim keeps of %d", i, tc.r, len(got), len(want), len(before))
		}
		list, err := env.Client.CoreV1().ConfigMaps(ns).List(ctx, metav1.ListOptions{LabelSelector: history.LabelKey + "=true"})
		if err != nil {
			t.Fatal(err)
		}
		var head string
		for _, cm := range list.Items {
			if cm.Name == history.HeadName {
				head = cm.Data["segments"]
			}
		}
		if n := len(strings.Fields(head)) + 1; n != len(list.Items) {
			t.Fatalf("term %d: %d history ConfigMaps, the head lists %d and itself", i, len(list.Items), n-1)
		}
		t.Logf("term %d (%+v): %d → %d entries, %d ConfigMaps", i, tc.r, len(before), len(got), len(list.Items))
		before = got
	}
}
