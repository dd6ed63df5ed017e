package controller

import (
	"math/big"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ipledger/ipledger/pkg/leader"
	watcherv1 "github.com/ipledger/ipledger/proto/ipledger/watcher/v1"
	"github.com/ipledger/ipledger/services/ipam/internal/allocator"
)

type metrics struct {
	addresses     *prometheus.GaugeVec
	allocations   prometheus.Counter
	failures      *prometheus.CounterVec
	statusWrites  *prometheus.CounterVec
	pending       leader.Gauge
	passSeconds   prometheus.Histogram
	ledgerCorrupt leader.Gauge
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		addresses: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "ipledger_ipam_pool_addresses",
			Help: "Addresses of each IPPool by family and state (total, used). IPv6 totals beyond 2^53 lose precision as floats; the IPPool status has the exact decimal.",
		}, []string{"pool", "family", "state"}),
		allocations: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "ipledger_ipam_allocations_total",
			Help: "Services given new addresses.",
		}),
		failures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ipledger_ipam_allocation_failures_total",
			Help: "Decisions that left a Service without (some of) its addresses, by condition reason.",
		}, []string{"reason"}),
		statusWrites: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ipledger_ipam_status_writes_total",
			Help: "Service status writes by result.",
		}, []string{"result"}),
		pending: leader.NewGauge(prometheus.GaugeOpts{
			Name: "ipledger_ipam_pending_services",
			Help: "LoadBalancer Services of our class holding no address.",
		}),
		passSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "ipledger_ipam_reconcile_duration_seconds",
			Help:    "Duration of one reconcile pass (decide a batch, commit the ledger, write statuses).",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 16),
		}),
		ledgerCorrupt: leader.NewGauge(prometheus.GaugeOpts{
			Name: "ipledger_ipam_ledger_corrupt",
			Help: "1 while the ledger cannot be read and allocation is stopped.",
		}),
	}
	if reg != nil {
		reg.MustRegister(m.addresses, m.allocations, m.failures, m.statusWrites, m.pending, m.passSeconds, m.ledgerCorrupt)
	}
	return m
}

// forgetLeaderGauges stops exporting what only the leader knows (pool
// usage, pending Services, a corrupt ledger) when a term ends: a standby must
// not report a former leader's values for alerts to fire on.
func (m *metrics) forgetLeaderGauges() {
	m.addresses.Reset()
	m.pending.Forget()
	m.ledgerCorrupt.Forget()
}

func (m *metrics) setPoolUsage(a *allocator.Allocator, pools []*watcherv1.Object) {
	if a == nil {
		return
	}
	m.addresses.Reset()
	f := func(x *big.Int) float64 { v, _ := new(big.Float).SetInt(x).Float64(); return v }
	for _, p := range pools {
		name := p.GetMeta().GetName()
		u, ok := a.Usage(name)
		if !ok {
			continue
		}
		m.addresses.WithLabelValues(name, "IPv4", "total").Set(f(u.IPv4.Total))
		m.addresses.WithLabelValues(name, "IPv4", "used").Set(f(u.IPv4.Used))
		m.addresses.WithLabelValues(name, "IPv6", "total").Set(f(u.IPv6.Total))
		m.addresses.WithLabelValues(name, "IPv6", "used").Set(f(u.IPv6.Used))
	}
}
