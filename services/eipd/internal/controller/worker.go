package controller

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ipledger/ipledger/pkg/leader"
	"github.com/ipledger/ipledger/pkg/stream"
)

// Source is the stream the controller reads (implemented by *stream.Client).
type Source interface {
	WaitForSync(ctx context.Context) error
	AddHandler(h stream.Handler) stream.Registration
	RemoveHandler(r stream.Registration)
}

// NewWorker returns leader.Run's newWorker: every term gets a fresh queue
// and fresh expectations, registers its handler (which replays the cached
// Nodes), sweeps stale addresses at start and every requeue interval, and
// writes only with the term's context.
func (c *Controller) NewWorker(src Source, reg prometheus.Registerer) func(term *leader.Term) (leader.Worker, error) {
	return func(term *leader.Term) (leader.Worker, error) {
		queue := leader.NewQueue("eipd_nodes", reg, leader.WithRateLimiter(c.RetryLimiter())).WithLogger(c.log)
		run := c.NewTermState(queue, term.Recorder())
		return leader.WorkerFunc(func(term *leader.Term) error {
			log := c.log.With("term", term.ID())
			// Never act on a partial view: an absent Node means "give its
			// address back", so wait for the whole world first.
			if err := src.WaitForSync(term.StoppingContext()); err != nil {
				log.Info("Term ended before the stream synced")
				return nil
			}
			log.Info("Leading: reconciling Elastic IPs")
			registration := src.AddHandler(run.Handler())
			defer src.RemoveHandler(registration)

			var wg sync.WaitGroup
			wg.Go(func() { run.sweepLoop(term, log) })
			queue.Run(term, c.cfg.Workers, run.Sync)
			wg.Wait()
			c.metrics.forgetLeaderGauges()
			log.Info("Term over: stopped reconciling Elastic IPs")
			return nil
		}), nil
	}
}

func (r *TermState) sweepLoop(term *leader.Term, log *slog.Logger) {
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
