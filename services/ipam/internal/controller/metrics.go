package controller

import (
	"math/big"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ipledger/ipledger/pkg/leader"
	"github.com/ipledger/ipledger/pkg/promreg"
	watcherv1 "github.com/ipledger/ipledger/proto/ipledger/watcher/v1"
	"github.com/ipledger/ipledger/services/ipam/internal/allocator"
)

type metrics struct {
	addresses    *prometheus.GaugeVec
	allocations  prometheus.Counter
	failures     *prometheus.CounterVec
	statusWrites *prometheus.CounterVec
	pending      leader.Gauge
	pendingSince *prometheus.GaugeVec
	passSeconds  prometheus.Histogram
	// decided counts the Services passes decide.
	decided       prometheus.Counter
	ledgerCorrupt leader.Gauge
	// ledgerOverruled counts ledger entries not obeyed at a term start.
	ledgerOverruled prometheus.Counter
	kept            *prometheus.CounterVec

	mu sync.Mutex
	// poolSeries and pendingReasons are the label values exported now, so
	// that only series that went away are deleted.
	poolSeries     map[[2]string]bool // pool, family
	pendingReasons map[string]bool
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		poolSeries: map[[2]string]bool{}, pendingReasons: map[string]bool{},
		addresses: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "ipledger_ipam_pool_addresses",
			Help: "Addresses of each IPPool by family and state: total; used (held, kept for a deleted Service or reserved); held (by live Services); available (total - used, what a new Service gets without taking a kept address). " +
				"IPv6 totals beyond 2^53 lose precision as floats; the IPPool status has the exact decimal.",
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
		pendingSince: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "ipledger_ipam_oldest_pending_service_timestamp_seconds",
			Help: "Unix time since which the longest-waiting LoadBalancer Service of our class, by the reason it holds no address, has held none " +
				"(from its condition's lastTransitionTime, so a new leader keeps it). No series for a reason no Service is pending for.",
		}, []string{"reason"}),
		passSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "ipledger_ipam_reconcile_duration_seconds",
			Help:    "Duration of one reconcile pass (decide a batch, commit the ledger, write statuses).",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 16),
		}),
		decided: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "ipledger_ipam_services_decided_total",
			Help: "Services decided by reconcile passes (an update that is only the echo of ipam's own status write is not decided again).",
		}),
		ledgerCorrupt: leader.NewGauge(prometheus.GaugeOpts{
			Name: "ipledger_ipam_ledger_corrupt",
			Help: "1 while the ledger cannot be read and allocation is stopped.",
		}),
		ledgerOverruled: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "ipledger_ipam_ledger_entries_overruled_total",
			Help: "Ledger entries not obeyed at a term start because the Services' statuses, read from the API server, contradict them (the ledger was edited outside ipam).",
		}),
		kept: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ipledger_ipam_kept_addresses_total",
			Help: "Addresses released by a deleted Service (or one no longer ipam's), by what became of them: kept (for that Service, for its pool's grace period), " +
				"returned (taken back by it, or under its sharing key), requested (requested and taken by another Service of its namespace: a rename), taken (by another Service: its pool had nothing else free), expired (the grace period ended).",
		}, []string{"outcome"}),
	}
	if err := promreg.Register(reg, m.addresses, m.allocations, m.failures, m.statusWrites, m.pending, m.pendingSince, m.passSeconds, m.decided, m.ledgerCorrupt, m.ledgerOverruled, m.kept); err != nil {
		return nil, err
	}
	return m, nil
}

// forgetLeaderGauges stops exporting what only the leader knows (pool
// usage, pending Services, a corrupt ledger) when a term ends: a standby must
// not report a former leader's values for alerts to fire on.
func (m *metrics) forgetLeaderGauges() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.addresses.Reset()
	clear(m.poolSeries)
	m.pending.Forget()
	m.pendingSince.Reset()
	clear(m.pendingReasons)
	m.ledgerCorrupt.Forget()
}

// pendingService is a Service of our class that holds no address: since
// when, and why.
type pendingService struct {
	since  time.Time
	reason string
}

// setPending exports how many Services are pending and, by reason, since
// when the longest-waiting one has been. Series of reasons no Service is
// pending for any more are deleted one by one, never all reset, so that a
// scrape never sees a gap an alert's `for` would restart on.
func (m *metrics) setPending(pending map[string]pendingService) {
	m.pending.Set(float64(len(pending)))
	oldest := map[string]time.Time{}
	for _, p := range pending {
		if o, ok := oldest[p.reason]; !ok || p.since.Before(o) {
			oldest[p.reason] = p.since
		}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for reason := range m.pendingReasons {
		if _, ok := oldest[reason]; !ok {
			m.pendingSince.DeleteLabelValues(reason)
			delete(m.pendingReasons, reason)
		}
	}
	for reason, since := range oldest {
		m.pendingSince.WithLabelValues(reason).Set(float64(since.UnixMilli()) / 1e3)
		m.pendingReasons[reason] = true
	}
}

func (m *metrics) setPoolUsage(a *allocator.Allocator, pools []*watcherv1.Object) {
	if a == nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	f := func(x *big.Int) float64 { v, _ := new(big.Float).SetInt(x).Float64(); return v }
	now := map[[2]string]bool{}
	for _, p := range pools {
		name := p.GetMeta().GetName()
		u, ok := a.Usage(name)
		if !ok {
			continue
		}
		for _, fam := range []struct {
			name string
			u    allocator.FamilyUsage
		}{{"IPv4", u.IPv4}, {"IPv6", u.IPv6}} {
			m.addresses.WithLabelValues(name, fam.name, "total").Set(f(fam.u.Total))
			m.addresses.WithLabelValues(name, fam.name, "used").Set(f(fam.u.Used))
			m.addresses.WithLabelValues(name, fam.name, "held").Set(float64(fam.u.Held))
			m.addresses.WithLabelValues(name, fam.name, "available").Set(f(fam.u.Available()))
			now[[2]string{name, fam.name}] = true
		}
	}
	// Pools that went away (or serve nothing) lose their series; the others
	// are never reset, so a scrape never sees a gap.
	for k := range m.poolSeries {
		if !now[k] {
			m.addresses.DeletePartialMatch(prometheus.Labels{"pool": k[0], "family": k[1]})
		}
	}
	m.poolSeries = now
}
