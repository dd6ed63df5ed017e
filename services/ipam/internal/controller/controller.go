// Package controller is ipam's leader: each lease term it fences the ledger,
// rebuilds every allocation already made (plan.Rebuild: ledger, then Service
// status, then Service requests), and only then allocates pending Services —
// in batches decided by plan.Decide, one ledger write for many allocations,
// then the Services' statuses written concurrently. It reads the cluster only
// through pkg/stream and writes with client-go under the term's context.
package controller

import (
	"time"

	"context"
	"log/slog"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/ipledger/ipledger/pkg/leader"
	"github.com/ipledger/ipledger/pkg/stream"
	watcherv1 "github.com/ipledger/ipledger/proto/ipledger/watcher/v1"
	"github.com/ipledger/ipledger/services/ipam/internal/history"
	"github.com/ipledger/ipledger/services/ipam/internal/ledger"
	"github.com/ipledger/ipledger/services/ipam/internal/objects"
)

// Source is what the controller reads the cluster through: a *stream.Client.
type Source interface {
	Store() *stream.Store
	Follow(h stream.Handler) stream.Registration
	RemoveHandler(r stream.Registration)
	WaitForSync(ctx context.Context) error
}

// Config tunes the controller.
type Config struct {
	// Namespace holds the ledger.
	Namespace string
	// LBClass is the loadBalancerClass served (besides unset, unless
	// RequireLBClass).
	LBClass string
	// RequireLBClass serves only Services of LBClass, never class-less ones.
	RequireLBClass bool
	// WriteKubeVIPAnnotation writes kube-vip.io/loadbalancerIPs, the
	// addresses kube-vip announces, with each status: the Service's granted
	// addresses (plan.Batch.WriteKubeVIPAnnotation).
	WriteKubeVIPAnnotation bool
	// StatusWorkers write Service statuses concurrently.
	StatusWorkers int
	// BatchSize caps the Services decided per ledger write.
	BatchSize int
	// ShardLimit is the ledger shard size limit (0 = default).
	ShardLimit int
	// GatewayServiceNamespaces are the namespaces whose Services may serve a
	// Gateway of another namespace (objects.LinkedGateway).
	GatewayServiceNamespaces []string
	// KeepReleased is the grace period of the IPPools that set none
	// (--keep-released-addresses; objects.PoolSet): 0 frees released
	// addresses at once.
	KeepReleased time.Duration
	// History bounds the address history (--history-max-age,
	// --history-max-per-address).
	History history.Retention
	// HistoryNow is the clock the history's retention is applied by (nil:
	// time.Now); tests move it forward instead of waiting.
	HistoryNow func() time.Time
}

// Defaults fills unset fields.
func (c *Config) Defaults() {
	if c.LBClass == "" {
		c.LBClass = objects.DefaultLBClass
	}
	if c.StatusWorkers <= 0 {
		c.StatusWorkers = 32
	}
	if c.BatchSize <= 0 {
		c.BatchSize = 2000
	}
}

// Controller lives as long as the process; it builds a fresh worker for
// every lease term.
type Controller struct {
	cfg     Config
	client  kubernetes.Interface
	dynamic dynamic.Interface
	source  Source
	log     *slog.Logger
	metrics *metrics
	ledgerM *ledger.Metrics
	histM   *history.Metrics
	reg     prometheus.Registerer

	// pools remembers each IPPool's last valid spec across terms.
	pools objects.PoolSet

	mu      sync.Mutex
	current *worker // the term's worker once it has rebuilt, else nil
}

// New builds the controller. Its Events go through each term's recorder
// (leader.Term.Recorder).
func New(cfg Config, client kubernetes.Interface, dyn dynamic.Interface, source Source,
	log *slog.Logger, reg prometheus.Registerer) (*Controller, error) {
	cfg.Defaults()
	m, err := newMetrics(reg)
	if err != nil {
		return nil, err
	}
	ledgerM, err := ledger.NewMetrics(reg)
	if err != nil {
		return nil, err
	}
	histM, err := history.NewMetrics(reg)
	if err != nil {
		return nil, err
	}
	source.Store().AddAttribute(watcherv1.Kind_KIND_SERVICE, attrCreated, func(o *watcherv1.Object) any {
		return o.GetMeta().GetCreationTimestamp()
	})
	return &Controller{
		cfg: cfg, client: client, dynamic: dyn, source: source, log: log,
		metrics: m, ledgerM: ledgerM, histM: histM, reg: reg, pools: objects.PoolSet{KeepReleased: cfg.KeepReleased},
	}, nil
}

// attrCreated is the store attribute holding each Service's
// creationTimestamp (int64): a pass orders the dirty Services by it
// (objects.Less) without decoding every one of them from the store, of
// which it decides only a batch.
const attrCreated = "ipam.ipledger.io/created"

// class is the set of Services served.
func (c *Controller) class() objects.Class {
	return objects.Class{Name: c.cfg.LBClass, Required: c.cfg.RequireLBClass}
}

// NewWorker is the leader.Run factory: a fresh worker (allocator, ledger
// writer, expectations) for every term.
func (c *Controller) NewWorker(term *leader.Term) (leader.Worker, error) {
	return newWorker(c, term), nil
}

// Run is the body of a term: sync, fence, rebuild, then batches until the
// term stops.
func (w *worker) Run(term *leader.Term) error {
	log := w.log
	ctx := term.StoppingContext()
	if err := w.c.source.WaitForSync(ctx); err != nil {
		return nil // the term ended before the stream synced
	}

	// Handlers only mark keys dirty; registering before the rebuild means
	// nothing that happens during it is missed, and the rebuild marks
	// every Service itself (no replay: it would decode every object).
	// The history is written beside the term, never in its loop: a slow
	// or failing history write delays no allocation.
	w.hist = history.Start(term.Context(), w.c.client, history.Options{
		Namespace: w.c.cfg.Namespace, Term: term.ID(), Retention: w.c.cfg.History, Log: w.log,
		Metrics: w.c.histM, Now: w.c.cfg.HistoryNow, WaitForBegin: true})
	// The writer reads the history and compares it with the ledger once
	// the term has decided every Service the rebuild marked (the loop
	// finds nothing ready: beginHistory), or historyBeginBound after the
	// term started if a storm of changes keeps it busy: that comparison
	// holds three maps of every address (and reads the sealed history
	// segments one at a time), and made during the first passes it adds to
	// the restart's peak at 10,000 Services (BENCHMARKS.md).
	begin := time.AfterFunc(historyBeginBound, w.hist.Begin)
	defer begin.Stop()
	reg := w.c.source.Follow(w.handler())
	defer w.c.source.RemoveHandler(reg)

	// Opening: until the ledger is read, fenced and rebuilt from, the term
	// neither decides nor takes mutations (it is not active yet).
	w.loop(ctx, term, func(p phase) bool { return p == serving || p == fenced })
	if w.phase != serving {
		<-term.Stopping() // fenced, or the term ended while opening
		return nil
	}
	log.Info("Term started: ledger fenced and allocations rebuilt",
		"services", w.ldg.ServiceCount(), "conflicts", len(w.conflicts))
	w.c.setActive(w)
	defer w.c.setActive(nil)
	defer w.c.metrics.forgetLeaderGauges()
	defer w.c.ledgerM.Forget()
	defer w.writes.wait()
	w.loop(term.Context(), term, func(phase) bool { return false })
	w.drainHistory(term.Context())
	w.release(term.Context())
	return nil
}
