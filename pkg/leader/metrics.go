package leader

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
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
	isLeader := registerOrReuse(reg, prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "ipledger_leader_is_leader",
		Help: "1 while this process holds a term on the lease, else 0.",
	}, []string{"lease"}))
	transitions := registerOrReuse(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "ipledger_leader_term_transitions_total",
		Help: "Term transitions: started, and how terms ended (released, lost, worker-returned, failed).",
	}, []string{"lease", "event"}))
	acquire := registerOrReuse(reg, prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "ipledger_leader_acquire_duration_seconds",
		Help:    "Time from starting to campaign until the lease was acquired.",
		Buckets: []float64{.01, .1, .5, 1, 2.5, 5, 10, 20, 30, 60, 120, 300},
	}, []string{"lease"}))
	stop := registerOrReuse(reg, prometheus.NewHistogramVec(prometheus.HistogramOpts{
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

// registerOrReuse registers c on reg, or returns the equal collector that
// is already registered there, so that terms, queues and candidates can
// be built again and again on one registry. A nil reg registers nothing.
func registerOrReuse[C prometheus.Collector](reg prometheus.Registerer, c C) C {
	if reg == nil {
		return c
	}
	if err := reg.Register(c); err != nil {
		var are prometheus.AlreadyRegisteredError
		if errors.As(err, &are) {
			if existing, ok := are.ExistingCollector.(C); ok {
				return existing
			}
		}
		// A different collector with the same name: a programming error
		// that must not stop leadership; the metric stays unexported.
	}
	return c
}
