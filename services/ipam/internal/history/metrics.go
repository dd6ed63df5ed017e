package history

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ipledger/ipledger/pkg/leader"
	"github.com/ipledger/ipledger/pkg/promreg"
)

// Metrics are the history writer's, registered once per process and
// handed to each term's Writer (Options.Metrics).
type Metrics struct {
	failures  prometheus.Counter
	unwritten leader.Gauge

	mu sync.Mutex
	// owner is the Writer whose term exports unwritten: a term's writer
	// that ends after the next term's started must not erase its gauge.
	owner *Writer
}

// NewMetrics registers the history writer's metrics on reg.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		failures: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "ipledger_ipam_history_write_failures_total",
			Help: "Attempts to write (or read before writing) the address history ConfigMaps that failed; the writer tries again every few seconds, and allocation goes on (docs/history.md).",
		}),
		unwritten: leader.NewGauge(prometheus.GaugeOpts{
			Name: "ipledger_ipam_history_unwritten_changes",
			Help: "Ledger changes (and term openings) the leader's history writer was told of and has not written yet; leader only.",
		}),
	}
	if err := promreg.Register(reg, m.failures, m.unwritten); err != nil {
		return nil, err
	}
	return m, nil
}

func (m *Metrics) own(w *Writer) {
	if m == nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.owner = w
	m.unwritten.Set(0)
}

func (m *Metrics) setUnwritten(w *Writer, n int) {
	if m == nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.owner == w {
		m.unwritten.Set(float64(n))
	}
}

func (m *Metrics) forget(w *Writer) {
	if m == nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.owner == w {
		m.owner = nil
		m.unwritten.Forget()
	}
}

func (m *Metrics) failed() {
	if m != nil {
		m.failures.Inc()
	}
}
