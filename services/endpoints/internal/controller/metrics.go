package controller

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/ipledger/ipledger/pkg/promreg"
	"github.com/ipledger/ipledger/services/endpoints/internal/clusternet"
)

// Metrics are the controller's process-wide metrics; they outlive terms.
type Metrics struct {
	// Syncs counts Service syncs by result: success, error, stale.
	Syncs *prometheus.CounterVec
	// SliceWrites counts EndpointSlice writes by op (create, update, delete)
	// and result (success, error).
	SliceWrites *prometheus.CounterVec
	// StaleRetries counts syncs put back because the view lagged this term's writes.
	StaleRetries prometheus.Counter
	// EndpointsManaged is the number of endpoints in the slices this replica
	// manages; zero while it does not lead.
	EndpointsManaged prometheus.Gauge
	// SyncDuration times one Service sync.
	SyncDuration prometheus.Histogram
	// WorkloadsRefused counts the ExternalWorkloads with an address no
	// EndpointSlice may hold (the cluster's own networks, clusternet), by
	// reason; zero while not leading.
	WorkloadsRefused *prometheus.GaugeVec
}

// NewMetrics registers the controller's metrics on reg.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		Syncs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ipledger_endpoints_syncs_total",
			Help: "Service syncs by result (success, error, stale).",
		}, []string{"result"}),
		SliceWrites: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ipledger_endpoints_slice_writes_total",
			Help: "EndpointSlice writes sent to the API server, by op (create, update, delete) and result (success, error).",
		}, []string{"op", "result"}),
		StaleRetries: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "ipledger_endpoints_stale_retries_total",
			Help: "Syncs retried because the stream had not yet shown this term's own writes.",
		}),
		EndpointsManaged: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "ipledger_endpoints_managed_endpoints",
			Help: "Endpoints in the EndpointSlices this replica manages (zero while not leading).",
		}),
		SyncDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "ipledger_endpoints_sync_duration_seconds",
			Help:    "Time to sync one Service, writes included.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16),
		}),
		WorkloadsRefused: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "ipledger_endpoints_workloads_refused",
			Help: "ExternalWorkloads with an address that never enters an EndpointSlice (the cluster's own networks: service-cidr, pod-cidr, node-address, api-server; or loopback, link-local, multicast, cloud-metadata, unspecified; not-granted with --workload-grants=enforce) or would not once grants are enforced (not-granted-report-only), by reason (zero while not leading).",
		}, []string{"reason"}),
	}
	for _, r := range append(clusternet.Reasons, refusedNotGranted, refusedNotGrantedReportOnly) {
		m.WorkloadsRefused.WithLabelValues(r)
	}
	for _, op := range []string{opCreate, opUpdate, opDelete} {
		for _, r := range []string{resultSuccess, resultError} {
			m.SliceWrites.WithLabelValues(op, r)
		}
	}
	for _, r := range []string{resultSuccess, resultError, resultStale} {
		m.Syncs.WithLabelValues(r)
	}
	if err := promreg.Register(reg, m.Syncs, m.SliceWrites, m.StaleRetries, m.EndpointsManaged, m.SyncDuration, m.WorkloadsRefused); err != nil {
		return nil, err
	}
	return m, nil
}

const (
	opCreate = "create"
	opUpdate = "update"
	opDelete = "delete"

	resultSuccess = "success"
	resultError   = "error"
	resultStale   = "stale"
)
