package leader

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/util/workqueue"

	"github.com/ipledger/ipledger/pkg/backoff"
	"github.com/ipledger/ipledger/pkg/promreg"
)

// Queue is a typed rate-limited workqueue bound to a term, with workqueue
// metrics on the injected registry. Build one per term (in newWorker):
// a queue that has run is shut down for good.
type Queue[T comparable] struct {
	name string
	q    workqueue.TypedRateLimitingInterface[T]
	log  *slog.Logger
}

// QueueOption configures NewQueue.
type QueueOption[T comparable] func(*queueOptions[T])

type queueOptions[T comparable] struct {
	limiter workqueue.TypedRateLimiter[T]
}

// WithRateLimiter sets how long a failed item waits before it is retried
// (AddRateLimited). The default is backoff.Queue(0), client-go's controller
// rate limiter: per item 5 ms doubling up to 1000 s, and 10 per second
// (burst 100) overall.
func WithRateLimiter[T comparable](rl workqueue.TypedRateLimiter[T]) QueueOption[T] {
	return func(o *queueOptions[T]) { o.limiter = rl }
}

// NewQueue returns an empty queue; name labels its metrics
// (ipledger_workqueue_*{name="..."}) and should be unique per process.
// Queues of successive terms with the same name share their metrics.
func NewQueue[T comparable](name string, reg prometheus.Registerer, opts ...QueueOption[T]) *Queue[T] {
	o := queueOptions[T]{limiter: backoff.Queue[T](0)}
	for _, opt := range opts {
		opt(&o)
	}
	return &Queue[T]{
		name: name,
		q: workqueue.NewTypedRateLimitingQueueWithConfig(o.limiter,
			workqueue.TypedRateLimitingQueueConfig[T]{Name: name, MetricsProvider: NewMetricsProvider(reg)}),
		log: slog.Default().With("queue", name),
	}
}

// WithLogger sets the logger of sync errors (default slog.Default()).
func (q *Queue[T]) WithLogger(log *slog.Logger) *Queue[T] {
	q.log = log.With("queue", q.name)
	return q
}

// Add enqueues item (once, however often it is added before processing).
func (q *Queue[T]) Add(item T) { q.q.Add(item) }

// AddRateLimited enqueues item after its rate limiter allows.
func (q *Queue[T]) AddRateLimited(item T) { q.q.AddRateLimited(item) }

// AddAfter enqueues item after d.
func (q *Queue[T]) AddAfter(item T, d time.Duration) { q.q.AddAfter(item, d) }

// Len is the number of items waiting (not counting delayed ones).
func (q *Queue[T]) Len() int { return q.q.Len() }

// Run processes items with workers goroutines calling sync with the term's
// context until term.Stopping() is closed. Then it stops taking new items
// and drains: when the term is still live (graceful shutdown) queued items
// are processed and in-flight ones finish; when the term's context is
// already done (lost lease) queued items are dropped without calling sync.
// Delayed items (AddAfter, AddRateLimited) are dropped in both cases: the
// next term replays the whole state anyway. sync returning nil forgets the
// item's failures; an error requeues it rate-limited.
func (q *Queue[T]) Run(term *Term, workers int, syncItem func(ctx context.Context, item T) error) {
	if workers < 1 {
		workers = 1
	}
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for q.processNext(term, syncItem) {
			}
		})
	}
	<-term.Stopping()
	if term.Context().Err() != nil {
		q.q.ShutDown()
	} else {
		q.q.ShutDownWithDrain()
	}
	wg.Wait()
}

func (q *Queue[T]) processNext(term *Term, syncItem func(ctx context.Context, item T) error) bool {
	item, shutdown := q.q.Get()
	if shutdown {
		return false
	}
	defer q.q.Done(item)
	ctx := term.Context()
	if ctx.Err() != nil {
		// The term ended: its queue is dropped, never written from.
		q.q.Forget(item)
		return true
	}
	if err := syncItem(ctx, item); err != nil {
		if ctx.Err() != nil {
			q.q.Forget(item)
			return true
		}
		q.log.Info("Sync failed; retrying", "item", item, "retries", q.q.NumRequeues(item), "err", err)
		q.q.AddRateLimited(item)
		return true
	}
	q.q.Forget(item)
	return true
}

// workqueueMetrics are the collectors of all queues on one registry,
// labelled by queue name.
type workqueueMetrics struct {
	depth          *prometheus.GaugeVec
	adds           *prometheus.CounterVec
	latency        *prometheus.HistogramVec
	workDuration   *prometheus.HistogramVec
	unfinished     *prometheus.GaugeVec
	longestRunning *prometheus.GaugeVec
	retries        *prometheus.CounterVec
}

// NewMetricsProvider returns a client-go workqueue.MetricsProvider that
// registers ipledger_workqueue_* collectors on reg, reusing those already
// registered there (so a queue per term, with the same name, is fine). Use
// it instead of workqueue.SetProvider, which is global and set-once.
func NewMetricsProvider(reg prometheus.Registerer) workqueue.MetricsProvider {
	buckets := prometheus.ExponentialBuckets(10e-6, 10, 8) // 10µs .. 100s
	label := []string{"name"}
	return &workqueueMetrics{
		depth: promreg.Reuse(reg, prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "ipledger_workqueue_depth", Help: "Current depth of the workqueue.",
		}, label)),
		adds: promreg.Reuse(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ipledger_workqueue_adds_total", Help: "Adds handled by the workqueue.",
		}, label)),
		latency: promreg.Reuse(reg, prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "ipledger_workqueue_queue_duration_seconds", Help: "Time an item stays in the workqueue before being processed.", Buckets: buckets,
		}, label)),
		workDuration: promreg.Reuse(reg, prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "ipledger_workqueue_work_duration_seconds", Help: "Time processing an item takes.", Buckets: buckets,
		}, label)),
		unfinished: promreg.Reuse(reg, prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "ipledger_workqueue_unfinished_work_seconds", Help: "Seconds of work in progress not yet observed by work_duration (large values suggest stuck workers).",
		}, label)),
		longestRunning: promreg.Reuse(reg, prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "ipledger_workqueue_longest_running_processor_seconds", Help: "Seconds the longest running processor has been running.",
		}, label)),
		retries: promreg.Reuse(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ipledger_workqueue_retries_total", Help: "Retries handled by the workqueue.",
		}, label)),
	}
}

func (m *workqueueMetrics) NewDepthMetric(name string) workqueue.GaugeMetric {
	return m.depth.WithLabelValues(name)
}

func (m *workqueueMetrics) NewAddsMetric(name string) workqueue.CounterMetric {
	return m.adds.WithLabelValues(name)
}

func (m *workqueueMetrics) NewLatencyMetric(name string) workqueue.HistogramMetric {
	return m.latency.WithLabelValues(name)
}

func (m *workqueueMetrics) NewWorkDurationMetric(name string) workqueue.HistogramMetric {
	return m.workDuration.WithLabelValues(name)
}

func (m *workqueueMetrics) NewUnfinishedWorkSecondsMetric(name string) workqueue.SettableGaugeMetric {
	return m.unfinished.WithLabelValues(name)
}

func (m *workqueueMetrics) NewLongestRunningProcessorSecondsMetric(name string) workqueue.SettableGaugeMetric {
	return m.longestRunning.WithLabelValues(name)
}

func (m *workqueueMetrics) NewRetriesMetric(name string) workqueue.CounterMetric {
	return m.retries.WithLabelValues(name)
}
