package promreg

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

func TestRegisterNamesTheCollectorRegisteredTwice(t *testing.T) {
	reg := prometheus.NewRegistry()
	a := prometheus.NewCounter(prometheus.CounterOpts{Name: "ipledger_test_a_total", Help: "a"})
	b := prometheus.NewCounter(prometheus.CounterOpts{Name: "ipledger_test_b_total", Help: "b"})
	if err := Register(reg, a, b); err != nil {
		t.Fatal(err)
	}
	again := prometheus.NewCounter(prometheus.CounterOpts{Name: "ipledger_test_b_total", Help: "b"})
	err := Register(reg, again)
	if err == nil || !strings.Contains(err.Error(), "ipledger_test_b_total") {
		t.Errorf("err %v, want one naming ipledger_test_b_total", err)
	}
	if err := Register(nil, again); err != nil {
		t.Errorf("a nil registry: %v", err)
	}
}

func TestReuseReturnsTheRegisteredCollector(t *testing.T) {
	reg := prometheus.NewRegistry()
	opts := prometheus.GaugeOpts{Name: "ipledger_test_term", Help: "t"}
	first := Reuse(reg, prometheus.NewGauge(opts))
	second := Reuse(reg, prometheus.NewGauge(opts))
	if first != second {
		t.Error("a second term got a collector of its own: its samples would not be exported")
	}
	// Another shape under the same name: kept, unexported, no panic.
	other := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "ipledger_test_term", Help: "t"}, []string{"result"})
	if got := Reuse(reg, other); got != other {
		t.Error("a conflicting collector was not returned as it is")
	}
	if got := Reuse(nil, other); got != other {
		t.Error("a nil registry changed the collector")
	}
}
