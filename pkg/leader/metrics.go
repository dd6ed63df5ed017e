package leader

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/ipledger/ipledger/pkg/promreg"
)

// metrics of one candidate, bound to its lease.
type metrics struct {
	isLeader       prometheus.Gauge
	transitions    *prometheus.CounterVec
	acquireSeconds prometheus.Observer
	stopSeconds    prometheus.Observer
	lease          string
}

func newMetrics(reg prometheus.Registerer, lease string) *metrics {
	isLeader := promreg.Reuse(reg, prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "ipledger_leader_is_leader",
		Help: "1 while this process holds a term on the lease, else 0.",
	}, []string{"lease"}))
	transitions := promreg.Reuse(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "ipledger_leader_term_transitions_total",
		Help: "Term transitions: started, and how terms ended (released, lost, worker-returned, failed).",
	}, []string{"lease", "event"}))
	acquire := promreg.Reuse(reg, prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "ipledger_leader_acquire_duration_seconds",
		Help:    "Time from starting to campaign until the lease was acquired.",
		Buckets: []float64{.01, .1, .5, 1, 2.5, 5, 10, 20, 30, 60, 120, 300},
	}, []string{"lease"}))
	stop := promreg.Reuse(reg, prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "ipledger_leader_term_stop_duration_seconds",
		Help:    "Time a term took to stop (drain on shutdown, or stop after a lost lease).",
		Buckets: []float64{.001, .01, .1, .5, 1, 2.5, 5, 10, 30, 60},
	}, []string{"lease"}))
	return &metrics{
		isLeader:       isLeader.WithLabelValues(lease),
		transitions:    transitions,
		acquireSeconds: acquire.WithLabelValues(lease),
		stopSeconds:    stop.WithLabelValues(lease),
		lease:          lease,
	}
}

func (m *metrics) transition(event string) {
	m.transitions.WithLabelValues(m.lease, event).Inc()
}
