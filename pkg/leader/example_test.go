package leader_test

import (
	"context"
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/kubernetes"

	"github.com/ipledger/ipledger/pkg/leader"
)

// controller is the per-term state of a service: built fresh by newWorker
// on every term, so no tracker or expectation survives into the next term.
type controller struct {
	queue    *leader.Queue[string]
	expected map[string]int64 // e.g. generations this term wrote
}

func (c *controller) Run(term *leader.Term) error {
	// Register stream handlers here (they replay the cached state as adds
	// and only enqueue keys), and remove them when Stopping closes:
	//   reg := streamClient.AddHandler(handlers)
	//   defer streamClient.RemoveHandler(reg)
	c.queue.Run(term, 4, func(ctx context.Context, key string) error {
		// Every write uses ctx (the term's context): once the term has
		// ended it fails before reaching the API server.
		_ = ctx
		return nil
	})
	return nil
}

func Example() {
	var (
		ctx    context.Context
		client kubernetes.Interface
		reg    = prometheus.NewRegistry()
		log    = slog.Default()
	)
	cfg := leader.Config{LeaseName: "ipledger-ipam", LeaseNamespace: "ipledger-system"}
	_ = func() error { // in the service's Run, under its errgroup
		return leader.Run(ctx, client, cfg, func(term *leader.Term) (leader.Worker, error) {
			return &controller{
				queue:    leader.NewQueue[string]("ipam_services", reg),
				expected: map[string]int64{},
			}, nil
		}, log, reg)
	}
}
