package leader

import "github.com/prometheus/client_golang/prometheus"

// Gauge is a gauge only the lease holder exports: pool usage, pending work,
// a corrupt ledger. Set exports it; Forget, at the end of a term, removes the
// series, so that a standby never reports a value a former leader computed
// (an alert on it would fire on every replica, or on one that cannot act).
// Register it like any collector.
type Gauge struct {
	*prometheus.GaugeVec
}

// NewGauge returns an unexported (never Set) leader-only gauge.
func NewGauge(opts prometheus.GaugeOpts) Gauge {
	return Gauge{prometheus.NewGaugeVec(opts, nil)}
}

// Set exports the gauge with value v.
func (g Gauge) Set(v float64) { g.WithLabelValues().Set(v) }

// Forget stops exporting the gauge until the next Set.
func (g Gauge) Forget() { g.Reset() }
