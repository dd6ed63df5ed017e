package integration

import (
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/ipledger/ipledger/lab/testenv"
	"github.com/ipledger/ipledger/services/ipam/internal/history"
	"github.com/ipledger/ipledger/services/ipam/internal/ledger"
)

// A writer paces ipam's own changes (at most one write every WriteEvery:
// here an hour, so nothing of ipam's is written by the clock): they wait
// for the next write a person's change, or a Drain, makes at once — in one
// write with them, nothing lost.
func TestWriterPacesIPAMsChanges(t *testing.T) {
	env := testenv.Get(t)
	ns := env.Namespace(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	w := history.Start(ctx, env.Client, history.Options{Namespace: ns, Term: "t1", Log: slog.New(slog.DiscardHandler), WriteEvery: time.Hour})
	grant := func(name, ip string) ledger.Change {
		return ledger.Change{Allocate: []ledger.Allocation{{IP: netip.MustParseAddr(ip), Pool: "lan",
			Service: ledger.ServiceRef{Namespace: "shop", Name: name, UID: "u-" + name}, AllocatedAt: time.Now()}}}
	}
	names := func() []string {
		t.Helper()
		entries, err := history.Read(ctx, env.Client, ns)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, e := range entries {
			out = append(out, e.Name)
		}
		return out
	}
	// The head's resourceVersion: its writes are counted after it.
	headRV := func() string {
		t.Helper()
		head, err := env.Client.CoreV1().ConfigMaps(ns).List(ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + history.HeadName})
		if err != nil || len(head.Items) != 1 {
			t.Fatalf("the head: %v (%d)", err, len(head.Items))
		}
		return head.Items[0].ResourceVersion
	}

	// The ledger opened and the first change: written at once.
	w.Opened(ledger.State{}, 1, false)
	w.Committed(grant("a", "10.9.0.1"), time.Now(), history.IPAM)
	testenv.Eventually(t, time.Minute, func() error {
		if got := names(); !slices.Equal(got, []string{"a"}) {
			return fmt.Errorf("history names %v, want [a]", got)
		}
		return nil
	})
	heads, err := env.Client.CoreV1().ConfigMaps(ns).Watch(ctx, metav1.ListOptions{ResourceVersion: headRV(),
		FieldSelector: "metadata.name=" + history.HeadName})
	if err != nil {
		t.Fatal(err)
	}
	defer heads.Stop()

	// ipam's next changes wait (an hour, for this writer).
	w.Committed(grant("b", "10.9.0.2"), time.Now(), history.IPAM)
	w.Committed(grant("c", "10.9.0.3"), time.Now(), history.IPAM)
	if got := names(); !slices.Equal(got, []string{"a"}) {
		t.Fatalf("history names %v right after ipam's changes b and c, want [a]: they are written with the next write, not one write each", got)
	}
	// A person's change is written at once, with what waited.
	w.Committed(grant("d", "10.9.0.4"), time.Now(), "alice")
	testenv.Eventually(t, time.Minute, func() error {
		if got := names(); !slices.Equal(got, []string{"a", "b", "c", "d"}) {
			return fmt.Errorf("history names %v, want [a b c d]", got)
		}
		return nil
	})
	last := headRV()
	writes := 0
	for ev := range heads.ResultChan() {
		cm, ok := ev.Object.(metav1.Object)
		if ev.Type != watch.Modified || !ok {
			t.Fatalf("watching the head: %s %v", ev.Type, ev.Object)
		}
		writes++
		if cm.GetResourceVersion() == last {
			break
		}
	}
	if writes != 1 {
		t.Fatalf("the head was written %d times for b, c and d, want once: ipam's changes b and c were not held for the next write", writes)
	}

	// A Drain does not wait for the pace either.
	w.Committed(grant("e", "10.9.0.5"), time.Now(), history.IPAM)
	if err := w.Drain(ctx); err != nil {
		t.Fatalf("Drain with ipam's change e waiting: %v (it must write at once)", err)
	}
	if got := names(); !slices.Equal(got, []string{"a", "b", "c", "d", "e"}) {
		t.Fatalf("history names %v after Drain, want [a b c d e]", got)
	}
}
