package integration

import (
	"context"
	"errors"
	"log/slog"
	"net/netip"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ipledger/ipledger/lab/testenv"
	"github.com/ipledger/ipledger/services/ipam/internal/history"
	"github.com/ipledger/ipledger/services/ipam/internal/ledger"
)

// A writer started with WaitForBegin reads and writes nothing until Begin
// (ipam calls it once the term's first passes are done, to keep the
// history's read and comparison off the restart's memory peak); then it
// writes what it was told, in order.
func TestWriterWaitsForBegin(t *testing.T) {
	env := testenv.Get(t)
	ns := env.Namespace(t, nil)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	w := history.Start(ctx, env.Client, history.Options{Namespace: ns, Term: "t1", Log: slog.New(slog.DiscardHandler), WaitForBegin: true})
	svc := ledger.ServiceRef{Namespace: "shop", Name: "web", UID: "u1"}
	a := ledger.Allocation{IP: netip.MustParseAddr("10.9.0.1"), Pool: "lan", Service: svc, AllocatedAt: time.Now()}
	w.Opened(ledger.State{}, 1, false)
	w.Committed(ledger.Change{Allocate: []ledger.Allocation{a}}, time.Now(), history.IPAM)

	// Not begun: Drain cannot finish, and nothing is written.
	short, stop := context.WithTimeout(ctx, 300*time.Millisecond)
	defer stop()
	if err := w.Drain(short); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Drain before Begin = %v, want it to wait (context.DeadlineExceeded)", err)
	}
	list, err := env.Client.CoreV1().ConfigMaps(ns).List(ctx, metav1.ListOptions{LabelSelector: history.LabelKey + "=true"})
	if err != nil {
		t.Fatal(err)
	}
	if len(list.Items) != 0 {
		t.Fatalf("%d history ConfigMaps written before Begin, want none", len(list.Items))
	}

	w.Begin()
	w.Begin() // idempotent
	if err := w.Drain(ctx); err != nil {
		t.Fatal(err)
	}
	entries, err := history.Read(ctx, env.Client, ns)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 1 || entries[0].Action != history.Granted || entries[0].Name != "web" {
		t.Fatalf("history after Begin: %+v, want web granted", entries)
	}
}
