package controller

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/ipledger/ipledger/pkg/leader"
	"github.com/ipledger/ipledger/pkg/stream"
)

// Source is the stream the controller reads (implemented by *stream.Client).
type Source interface {
	WaitForSync(ctx context.Context) error
	AddHandler(h stream.Handler) stream.Registration
	RemoveHandler(r stream.Registration)
}

// NewWorker builds the fresh state of one term (a queue and a
// NodeReconciler, expectations included); it is leader.Run's newWorker.
func (c *Controller) NewWorker(term *leader.Term) (leader.Worker, error) {
	queue := leader.NewQueue("eipd_nodes", c.reg, leader.WithRateLimiter(c.RetryLimiter())).WithLogger(c.log)
	return &worker{c: c, queue: queue, run: c.NewNodeReconciler(queue, term.Recorder())}, nil
}

// worker is one term of eipd, endpoints' shape (docs/architecture.md, "One
// shape for term workers and entry points"), not ipam's dirty-set loop: a
// leader.Queue of Node keys, each synced on its own. It registers its
// handler (which replays the cached Nodes into the queue) once the stream
// has synced, sweeps stale addresses at start and every requeue interval
// beside the queue, and writes only with the term's context.
type worker struct {
	c     *Controller
	queue *leader.Queue[string]
	run   *NodeReconciler
}

// Run is the body of a term.
func (w *worker) Run(term *leader.Term) error {
	log := w.c.log.With("term", term.ID())
	// Never act on a partial view: an absent Node means "give its address
	// back", so wait for the whole world first.
	if err := w.c.source.WaitForSync(term.StoppingContext()); err != nil {
		log.Info("Term ended before the stream synced")
		return nil
	}
	log.Info("Leading: reconciling Elastic IPs")
	registration := w.c.source.AddHandler(w.run.Handler())
	defer w.c.source.RemoveHandler(registration)

	var wg sync.WaitGroup
	wg.Go(func() { w.run.sweepLoop(term, log) })
	w.queue.Run(term, w.c.cfg.Workers, w.run.Sync)
	wg.Wait()
	w.c.metrics.forgetLeaderGauges()
	log.Info("Term over: stopped reconciling Elastic IPs")
	return nil
}

func (r *NodeReconciler) sweepLoop(term *leader.Term, log *slog.Logger) {
	ticker := time.NewTicker(r.c.cfg.RequeueInterval)
	defer ticker.Stop()
	for {
		switch err := r.Sweep(term.Context()); {
		case err == nil:
			r.c.metrics.sweeps.WithLabelValues("ok").Inc()
		case term.Context().Err() == nil:
			r.c.metrics.sweeps.WithLabelValues("error").Inc()
			log.Warn("Sweep of stale Elastic IPs failed; retrying at the next interval", "err", err)
		}
		select {
		case <-term.Stopping():
			return
		case <-ticker.C:
		}
	}
}
