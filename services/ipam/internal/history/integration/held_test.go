package integration

import (
	"context"
	"log/slog"
	"runtime"
	"testing"

	"github.com/ipledger/ipledger/lab/testenv"
	"github.com/ipledger/ipledger/services/ipam/internal/history"
)

// BenchmarkWriterHeld: what a term's writer holds, and allocates, over a
// stored history of 100,000 entries at 10,000 Services (10,000 held, then
// churn on fresh addresses): a new term's writer (a restart) opens the
// ledger, reads the history, compares, applies retention (the defaults)
// and writes; then, after a GC with the writer alive, the heap it holds
// (held-MB: the holders of 10,000 addresses, and whatever it keeps of the
// stored entries) and what it allocated to get there (alloc-MB).
func BenchmarkWriterHeld(b *testing.B) {
	env := testenv.Get(b)
	ctx := context.Background()
	ns := env.Namespace(b, nil)
	churn(b, ctx, env, ns, 10000, 100000)
	all, err := history.Read(ctx, env.Client, ns)
	if err != nil {
		b.Fatal(err)
	}
	st := stateOf(all)
	all = nil
	epoch := uint64(1)
	for b.Loop() {
		tctx, cancel := context.WithCancel(ctx)
		var m0, m1 runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&m0)
		epoch++
		w := history.Start(tctx, env.Client, history.Options{Namespace: ns, Term: "held", Log: slog.New(slog.DiscardHandler),
			Retention: history.DefaultRetention})
		w.Opened(st, epoch, false)
		if err := w.Drain(ctx); err != nil {
			b.Fatal(err)
		}
		runtime.GC()
		runtime.ReadMemStats(&m1)
		b.ReportMetric(float64(int64(m1.HeapAlloc)-int64(m0.HeapAlloc))/1e6, "held-MB")
		b.ReportMetric(float64(m1.TotalAlloc-m0.TotalAlloc)/1e6, "alloc-MB")
		runtime.KeepAlive(w)
		cancel()
	}
}
