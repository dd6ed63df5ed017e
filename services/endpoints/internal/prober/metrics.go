package prober

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/ipledger/ipledger/pkg/leader"
	"github.com/ipledger/ipledger/pkg/promreg"
	"github.com/ipledger/ipledger/services/endpoints/internal/probepolicy"
)

// Metrics are the prober's process-wide metrics; they outlive terms.
type Metrics struct {
	// Probes counts probes of one address by result (success, failure).
	Probes *prometheus.CounterVec
	// ProbeDuration times one probe of one address (slot wait excluded).
	ProbeDuration prometheus.Histogram
	// SlotWait is how long a due probe waited for a free slot
	// (--probe-concurrency); a growing tail means the bound is too low for
	// the workloads' periods and timeouts.
	SlotWait prometheus.Histogram
	// ConditionWrites counts Ready condition writes by result (success,
	// conflict: the workload changed since the decision, error).
	ConditionWrites *prometheus.CounterVec
	// Refused counts addresses not probed because the policy refuses them
	// (--probe-allowed-cidrs and friends), once per period, by reason.
	Refused *prometheus.CounterVec
	// Workloads is the number of workloads the leader probes; only the
	// leader exports it.
	Workloads leader.Gauge
}

// NewMetrics registers the prober's metrics on reg.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		Probes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ipledger_endpoints_probes_total",
			Help: "Readiness probes of one ExternalWorkload address, by result (success, failure).",
		}, []string{"result"}),
		ProbeDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "ipledger_endpoints_probe_duration_seconds",
			Help:    "Time one readiness probe of one address took.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 4, 10),
		}),
		SlotWait: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "ipledger_endpoints_probe_slot_wait_seconds",
			Help:    "Time a due readiness probe waited for one of --probe-concurrency slots.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 4, 10),
		}),
		ConditionWrites: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ipledger_endpoints_ready_condition_writes_total",
			Help: "ExternalWorkload Ready condition writes, by result (success, conflict, error).",
		}, []string{"result"}),
		Refused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ipledger_endpoints_probes_refused_total",
			Help: "Readiness probes of one ExternalWorkload address not sent because the prober may not reach it, by reason (pod-cidr, cloud-metadata, not-allowed, ...; see --probe-allowed-cidrs).",
		}, []string{"reason"}),
		Workloads: leader.NewGauge(prometheus.GaugeOpts{
			Name: "ipledger_endpoints_probed_workloads",
			Help: "ExternalWorkloads with a readiness probe that this replica probes (exported only while it leads).",
		}),
	}
	for _, r := range []string{resultSuccess, resultFailure} {
		m.Probes.WithLabelValues(r)
	}
	for _, r := range []string{resultSuccess, resultConflict, resultError} {
		m.ConditionWrites.WithLabelValues(r)
	}
	for _, r := range probepolicy.Reasons {
		m.Refused.WithLabelValues(r)
	}
	if err := promreg.Register(reg, m.Probes, m.ProbeDuration, m.SlotWait, m.ConditionWrites, m.Refused, m.Workloads); err != nil {
		return nil, err
	}
	return m, nil
}

const (
	resultSuccess  = "success"
	resultFailure  = "failure"
	resultConflict = "conflict"
	resultError    = "error"
)
