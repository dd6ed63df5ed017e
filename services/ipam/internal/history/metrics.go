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
	// The stored history's size, as the owner last read or wrote it.
	entries, bytes, segments leader.Gauge

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
		entries: leader.NewGauge(prometheus.GaugeOpts{
			Name: "ipledger_ipam_history_entries",
			Help: "Entries the address history holds, as the leader's history writer last read or wrote it (set at its first read of the term, after each write and each trim; no read of its own); leader only.",
		}),
		bytes: leader.NewGauge(prometheus.GaugeOpts{
			Name: "ipledger_ipam_history_stored_bytes",
			Help: "Bytes of the address history's entries (their JSON lines in every history ConfigMap, without the index annotations), as the leader's history writer last read or wrote them; leader only. Retention bounds it (docs/history.md).",
		}),
		segments: leader.NewGauge(prometheus.GaugeOpts{
			Name: "ipledger_ipam_history_segments",
			Help: "History ConfigMaps (the head and the sealed segments it lists), as the leader's history writer last read or wrote them; leader only.",
		}),
	}
	if err := promreg.Register(reg, m.failures, m.unwritten, m.entries, m.bytes, m.segments); err != nil {
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
	// Unknown until the new term's writer has read the history: not the
	// last term's figures.
	m.forgetSize()
}

// setSize exports st's size while w owns the metrics.
func (m *Metrics) setSize(w *Writer, st stored) {
	if m == nil {
		return
	}
	entries, bytes, segments := st.size()
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.owner == w {
		m.entries.Set(float64(entries))
		m.bytes.Set(float64(bytes))
		m.segments.Set(float64(segments))
	}
}

func (m *Metrics) forgetSize() {
	m.entries.Forget()
	m.bytes.Forget()
	m.segments.Forget()
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
		m.forgetSize()
	}
}

func (m *Metrics) failed() {
	if m != nil {
		m.failures.Inc()
	}
}
