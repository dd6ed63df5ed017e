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
