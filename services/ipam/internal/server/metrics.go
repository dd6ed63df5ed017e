package server

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ipledger/ipledger/pkg/promreg"
)

// Parts of the read state that are built from the stream (the label
// `part` of the rebuild metrics).
const (
	partExplain = "explain" // the allocator as the leader would rebuild it, for ExplainService
	partUsage   = "usage"   // pool usage as the ledger counts it, for ListPools
	// the pool and end of each kept address, for ListAllocations and
	// GetAllocation (only while the ledger keeps addresses)
	partKept = "kept"
)

type metrics struct {
	rebuilds *prometheus.CounterVec
	duration *prometheus.HistogramVec
	parses   *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		rebuilds: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ipledger_ipam_api_rebuilds_total",
			Help: "Rebuilds of the allocator that answers ExplainService (part=explain) and ListPools (part=usage), and of the kept addresses' pools and ends that ListAllocations and GetAllocation show (part=kept, only while the ledger keeps addresses); one per change of the ledger or the IPPools, however many calls.",
		}, []string{"part"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "ipledger_ipam_api_rebuild_duration_seconds",
			Help:    "Time to rebuild the allocator that answers reads, by part.",
			Buckets: prometheus.ExponentialBuckets(0.001, 4, 8), // 1 ms .. 16 s
		}, []string{"part"}),
		parses: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ipledger_ipam_api_ledger_parses_total",
			Help: "Parses of the streamed ledger by the API, by result (ok, failed); one per change of a shard, however many calls.",
		}, []string{"result"}),
	}
	m.parses.WithLabelValues("ok")
	m.parses.WithLabelValues("failed")
	for _, p := range []string{partExplain, partUsage, partKept} {
		m.rebuilds.WithLabelValues(p)
		m.duration.WithLabelValues(p)
	}
	if err := promreg.Register(reg, m.rebuilds, m.duration, m.parses); err != nil {
		return nil, err
	}
	return m, nil
}

// rebuilt records one rebuild of part that started at start.
func (m *metrics) rebuilt(part string, start time.Time) {
	m.rebuilds.WithLabelValues(part).Inc()
	m.duration.WithLabelValues(part).Observe(time.Since(start).Seconds())
}
