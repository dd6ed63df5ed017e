package leader

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

func TestGaugeIsExportedOnlyWhileSet(t *testing.T) {
	reg := prometheus.NewRegistry()
	g := NewGauge(prometheus.GaugeOpts{Name: "ipledger_test_pending", Help: "Pending."})
	reg.MustRegister(g)
	count := func() int {
		n, err := testutil.GatherAndCount(reg, "ipledger_test_pending")
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	if n := count(); n != 0 {
		t.Fatalf("exported %d series before Set, want 0", n)
	}
	g.Set(7)
	if n, v := count(), testutil.ToFloat64(g); n != 1 || v != 7 {
		t.Fatalf("after Set(7): %d series, value %v", n, v)
	}
	g.Forget()
	if n := count(); n != 0 {
		t.Fatalf("exported %d series after Forget, want 0", n)
	}
}
