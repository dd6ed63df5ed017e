package controller

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/ipledger/ipledger/pkg/leader"
	"github.com/ipledger/ipledger/pkg/promreg"
	"github.com/ipledger/ipledger/services/eipd/internal/decide"
)

type metrics struct {
	managed, associated, orphaned leader.Gauge
	duplicates                    prometheus.Counter
	syncs                         *prometheus.CounterVec
	refused                       *prometheus.CounterVec
	liveReads                     *prometheus.CounterVec
	liveReadSeconds               prometheus.Histogram
	sweeps                        *prometheus.CounterVec
	refusedAssociations           *prometheus.CounterVec
	heldOutside                   prometheus.Counter
	legacyOptIns                  prometheus.Counter
	// reserved and waiting are per term, like managed: reset when it ends.
	reserved      *prometheus.GaugeVec
	waiting       *prometheus.GaugeVec
	taintsRemoved prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		managed: leader.NewGauge(prometheus.GaugeOpts{
			Name: "ipledger_eipd_addresses_managed", Help: "Elastic IPs tagged as managed by this cluster, at the last listing.",
		}),
		associated: leader.NewGauge(prometheus.GaugeOpts{
			Name: "ipledger_eipd_addresses_associated", Help: "Managed Elastic IPs that are associated, at the last listing.",
		}),
		orphaned: leader.NewGauge(prometheus.GaugeOpts{
			Name: "ipledger_eipd_addresses_orphaned", Help: "Managed Elastic IPs tagged for no Node and not associated, at the last listing.",
		}),
		duplicates: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "ipledger_eipd_duplicates_removed_total", Help: "Extra Elastic IPs tagged for a Node that already had one, released (or orphaned).",
		}),
		syncs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ipledger_eipd_node_syncs_total", Help: "Node reconciliations by result.",
		}, []string{"result"}),
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ipledger_eipd_give_backs_refused_total",
			Help: "Elastic IPs the watcher's view said to give back while the live Node (read from the API server) still wanted them; kept. By where the view's word came from: a sync or the sweep.",
		}, []string{"source"}),
		liveReads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ipledger_eipd_live_node_reads_total",
			Help: "Nodes read from the API server to confirm a destructive action, by result: found, absent, error.",
		}, []string{"result"}),
		liveReadSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "ipledger_eipd_live_node_read_duration_seconds",
			Help:    "Time to read one Node from the API server.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 14),
		}),
		sweeps: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ipledger_eipd_sweeps_total", Help: "Sweeps of this cluster's Elastic IPs for Nodes that no longer want them, by result: ok, error.",
		}, []string{"result"}),
		refusedAssociations: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ipledger_eipd_associations_refused_total",
			Help: "Syncs in which eipd refused to associate an Elastic IP with the instance a Node names, by reason: instance-not-found, not-in-cluster, wrong-vpc, no-internal-ip, internal-ip-mismatch, instance-claimed-twice.",
		}, []string{"reason"}),
		heldOutside: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "ipledger_eipd_addresses_held_outside_total",
			Help: "Times an Elastic IP tagged for one of the cluster's Nodes was found associated outside the cluster (another cluster's or an untagged instance, a NAT gateway) and left alone: neither released nor reassociated.",
		}),
		legacyOptIns: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "ipledger_eipd_legacy_opt_ins_total",
			Help: "Nodes (once per term each) that asked for an Elastic IP only through the deprecated label ipledger.io/externalip-auto-assign, honoured with --legacy-opt-in=accept.",
		}),
		reserved: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "ipledger_eipd_reserved_addresses",
			Help: "Elastic IPs of each reserved set (--reserved-sets) at the last listing, by state: free (a Node may take it) or taken.",
		}, []string{"reserved_set", "state"}),
		waiting: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "ipledger_eipd_nodes_waiting",
			Help: "Nodes that want an Elastic IP and wait because nothing they may take is free and eipd may not allocate, by the reserved set they wait on (empty: Nodes no set serves, with otherNodes: none).",
		}, []string{"reserved_set"}),
		taintsRemoved: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "ipledger_eipd_startup_taints_removed_total",
			Help: "Startup taints (--startup-taint) removed from Nodes whose Elastic IP EC2 listed associated and the Node showed published.",
		}),
	}
	for _, reason := range decide.RefusalReasons {
		m.refusedAssociations.WithLabelValues(reason)
	}
	// Both sources are exported from the start, at 0, so that the first
	// refusal is an increase an alert or a dashboard can see.
	for _, source := range []string{"sync", "sweep"} {
		m.refused.WithLabelValues(source)
	}
	if err := promreg.Register(reg, m.managed, m.associated, m.orphaned, m.duplicates, m.syncs, m.refused, m.liveReads, m.liveReadSeconds,
		m.sweeps, m.refusedAssociations, m.heldOutside, m.legacyOptIns, m.reserved, m.waiting, m.taintsRemoved); err != nil {
		return nil, err
	}
	return m, nil
}

func (m *metrics) observe(view []decide.Address, reserved decide.Reservations) {
	var associated, orphaned int
	for _, a := range view {
		switch {
		case a.Associated():
			associated++
		case a.Node == "":
			orphaned++
		}
	}
	m.managed.Set(float64(len(view)))
	m.associated.Set(float64(associated))
	m.orphaned.Set(float64(orphaned))
	free, taken := map[string]int{}, map[string]int{}
	for _, a := range view {
		switch set := reserved.AddressSet(a); {
		case set == "":
		case a.Node == "" && !a.Associated():
			free[set]++
		default:
			taken[set]++
		}
	}
	for _, set := range reserved.SetNames() {
		m.reserved.WithLabelValues(set, "free").Set(float64(free[set]))
		m.reserved.WithLabelValues(set, "taken").Set(float64(taken[set]))
	}
}

// setWaiting exports the waiting Nodes by set, every set (and "") at zero
// when none waits.
func (m *metrics) setWaiting(counts map[string]int, sets []string) {
	for _, set := range append([]string{""}, sets...) {
		m.waiting.WithLabelValues(set).Set(float64(counts[set]))
	}
}

// forgetLeaderGauges stops exporting the address counts of the last listing
// when a term ends: a standby must not report a former leader's view.
func (m *metrics) forgetLeaderGauges() {
	m.managed.Forget()
	m.associated.Forget()
	m.orphaned.Forget()
	m.reserved.Reset()
	m.waiting.Reset()
}
