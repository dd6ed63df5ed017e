package informers

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/metadata/metadatainformer"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"

	"github.com/ipledger/ipledger/pkg/backoff"
	"github.com/ipledger/ipledger/pkg/convert"
	"github.com/ipledger/ipledger/services/watcher/internal/store"
)

// DefaultLedgerReadInterval is how often, at most, one ledger shard is read
// while ipam keeps writing it.
const DefaultLedgerReadInterval = 500 * time.Millisecond

// ledgerShards feeds the ledger ConfigMaps into the Sink without receiving
// every write of them whole. ipam rewrites a shard (up to ~480 KiB) at each
// allocation; watching the ConfigMaps brought every such write to the
// watcher and on to ipam, which cost each status write ipam makes beside it
// ~2.7 ms on a 2-core node at 50 allocations/s (BENCHMARKS.md, steady
// state). Here a metadata-only informer says which shard changed, and the
// shard is read: at once when it was not read within the interval, else
// when the interval has passed (readDelay). A burst of writes to one shard
// costs one read per interval, and the Sink always ends with a shard's
// latest content. A shard is read by one reader at a time, and a read
// without a resourceVersion is served from etcd, so each read of a shard is
// at least as new as the one before. (A shard deleted and created again
// while a read of it was under way may show the old content until the read
// that follows, which the create scheduled.)
type ledgerShards struct {
	client   kubernetes.Interface
	sink     Sink
	log      *slog.Logger
	reads    *prometheus.CounterVec
	interval time.Duration
	informer cache.SharedIndexInformer
	reg      cache.ResourceEventHandlerRegistration
	queue    workqueue.TypedRateLimitingInterface[string]

	// mu orders a read's Upsert against the Delete of the same shard.
	mu sync.Mutex
	// sent is the last state of each shard given to the Sink.
	sent map[string]*store.Object
	// readAt is when each shard was last read.
	readAt map[string]time.Time
	// unread are shards of the initial list not read yet: until none is
	// left, the kind is not synced.
	unread map[string]struct{}
}

func newLedgerShards(meta metadata.Interface, client kubernetes.Interface, namespace string, interval time.Duration,
	sink Sink, log *slog.Logger, reads *prometheus.CounterVec) (*ledgerShards, error) {
	l := &ledgerShards{client: client, sink: sink, log: log, reads: reads, interval: interval,
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(backoff.Queue[string](0),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "ledger_shards"}),
		sent: map[string]*store.Object{}, readAt: map[string]time.Time{}, unread: map[string]struct{}{}}
	l.informer = metadatainformer.NewFilteredMetadataInformer(meta, corev1.SchemeGroupVersion.WithResource("configmaps"), namespace, 0, cache.Indexers{},
		func(o *metav1.ListOptions) { o.LabelSelector = LedgerLabelSelector }).Informer()
	reg, err := l.informer.AddEventHandler(cache.ResourceEventHandlerDetailedFuncs{
		AddFunc: func(obj any, initial bool) {
			key, ok := keyOf(obj)
			if !ok {
				return
			}
			if initial {
				l.mu.Lock()
				l.unread[key] = struct{}{}
				l.mu.Unlock()
			}
			l.enqueue(key)
		},
		UpdateFunc: func(oldObj, newObj any) {
			o, okOld := oldObj.(metav1.Object)
			n, okNew := newObj.(metav1.Object)
			if okOld && okNew && o.GetResourceVersion() == n.GetResourceVersion() {
				return
			}
			if key, ok := keyOf(newObj); ok {
				l.enqueue(key)
			}
		},
		DeleteFunc: func(obj any) {
			if key, ok := keyOf(obj); ok {
				l.deleted(key)
			}
		},
	})
	if err != nil {
		return nil, err
	}
	l.reg = reg
	return l, nil
}

// keyOf is obj's namespace/name, a deleted one's too.
func keyOf(obj any) (string, bool) {
	key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj)
	return key, err == nil
}

// readDelay is how long to wait before reading a shard last read at last
// (zero: never), so that it is read at most once per interval.
func readDelay(last, now time.Time, interval time.Duration) time.Duration {
	if last.IsZero() {
		return 0
	}
	return max(last.Add(interval).Sub(now), 0)
}

// enqueue schedules a read of key. A read already scheduled stays (the
// queue keeps the earliest), and one under way is followed by another.
func (l *ledgerShards) enqueue(key string) {
	l.mu.Lock()
	d := readDelay(l.readAt[key], time.Now(), l.interval)
	l.mu.Unlock()
	l.queue.AddAfter(key, d)
}

// deleted removes a shard the informer no longer shows.
func (l *ledgerShards) deleted(key string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if o := l.sent[key]; o != nil {
		l.sink.Delete(o)
	}
	delete(l.sent, key)
	delete(l.readAt, key)
	delete(l.unread, key)
}

// synced reports whether the initial list is known and every shard of it
// read (or gone).
func (l *ledgerShards) synced() bool {
	if !l.reg.HasSynced() {
		return false
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.unread) == 0
}

// ledgerReaders is how many shards are read at once: a restarted watcher
// reads every shard before it is synced (66 at 100,000 Services). The
// queue never hands one shard to two readers at once.
const ledgerReaders = 4

func (l *ledgerShards) run(ctx context.Context) {
	go l.informer.Run(ctx.Done())
	for range ledgerReaders {
		go func() {
			for l.readNext(ctx) {
			}
		}()
	}
	<-ctx.Done()
	l.queue.ShutDown()
}

// read reads the shard key, or nil if it is gone or no longer labelled as
// a shard. It lists by name (which the API server reads as one key, from
// etcd) rather than getting: the Role that lets the watcher list and watch
// the namespace's ConfigMaps needs no get, so a watcher of this release
// runs under an older release's RBAC too.
func (l *ledgerShards) read(ctx context.Context, key string) (*corev1.ConfigMap, error) {
	ns, name, _ := cache.SplitMetaNamespaceKey(key)
	list, err := l.client.CoreV1().ConfigMaps(ns).List(ctx, metav1.ListOptions{LabelSelector: LedgerLabelSelector,
		FieldSelector: fields.OneTermEqualSelector("metadata.name", name).String()})
	if err != nil || len(list.Items) == 0 {
		return nil, err
	}
	return &list.Items[0], nil
}

// readNext reads one scheduled shard and gives it to the Sink, unless the
// informer no longer shows it (deleted, or its label removed, meanwhile).
func (l *ledgerShards) readNext(ctx context.Context) bool {
	key, quit := l.queue.Get()
	if quit {
		return false
	}
	defer l.queue.Done(key)
	l.mu.Lock()
	l.readAt[key] = time.Now()
	l.mu.Unlock()
	cm, err := l.read(ctx, key)
	switch {
	case err == nil && cm == nil:
		l.reads.WithLabelValues("gone").Inc()
		l.queue.Forget(key)
		return true // its delete is on its way
	case err != nil:
		l.reads.WithLabelValues("error").Inc()
		if ctx.Err() == nil {
			l.log.Warn("Cannot read a ledger shard; retrying", "configMap", key, "err", err)
			l.queue.AddRateLimited(key)
		}
		return true
	}
	l.reads.WithLabelValues("ok").Inc()
	l.queue.Forget(key)
	o := store.Encode(convert.ConfigMap(cm))
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, shown, _ := l.informer.GetIndexer().GetByKey(key); !shown {
		return true
	}
	l.sink.Upsert(o)
	l.sent[key] = o
	delete(l.unread, key)
	return true
}
