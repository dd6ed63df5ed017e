package controller

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/ipledger/ipledger/pkg/convert"
	"github.com/ipledger/ipledger/pkg/parallel"
	"github.com/ipledger/ipledger/pkg/quorum"
	watcherv1 "github.com/ipledger/ipledger/proto/ipledger/watcher/v1"
	"github.com/ipledger/ipledger/services/eipd/internal/decide"
)

// sweepConfirmParallelism bounds the GETs a sweep sends at once to confirm
// the Nodes whose addresses look stale: a sweep after a failover to a
// replica that is far behind may find many, and neither a sequential chain
// of round trips nor a burst of hundreds is wanted (the client's QPS limit
// still applies on top).
const sweepConfirmParallelism = 8

// liveNode is one Node as the API server has it.
type liveNode struct {
	obj    *watcherv1.Object // converted like the stream's; nil when absent
	exists bool
	err    error
}

// liveNode reads a Node from the API server with a quorum read
// (pkg/quorum): never older than the view, however far behind the watcher
// replica serving the view is.
func (c *Controller) liveNode(ctx context.Context, name string) liveNode {
	start := time.Now()
	a := quorum.Get(ctx, c.kube.CoreV1().Nodes().Get, name)
	c.metrics.liveReadSeconds.Observe(time.Since(start).Seconds())
	switch {
	case a.Err != nil:
		c.metrics.liveReads.WithLabelValues("error").Inc()
		return liveNode{err: a.Err}
	case !a.Exists:
		c.metrics.liveReads.WithLabelValues("absent").Inc()
		return liveNode{}
	}
	c.metrics.liveReads.WithLabelValues("found").Inc()
	return liveNode{obj: convert.Node(a.Object), exists: true}
}

// liveNodes reads names from the API server, at most limit at a time;
// the results are in the order of names.
func (c *Controller) liveNodes(ctx context.Context, names []string, limit int) []liveNode {
	out := make([]liveNode, len(names))
	parallel.Each(len(names), limit, func(i int) { out[i] = c.liveNode(ctx, names[i]) })
	return out
}

// confirm reads the Node from the API server just before a destructive EC2
// call and reconciles the Node as it really is: if it is still labelled it
// keeps its address (and is synced from the live object), otherwise its
// addresses are given back. If the read fails nothing is given back: the
// sync fails and is retried with backoff.
func (r *NodeReconciler) confirm(ctx context.Context, log *slog.Logger, rd round, viewGivesBack bool) error {
	live := r.c.liveNode(ctx, rd.node)
	if live.err != nil {
		return fmt.Errorf("cannot confirm with the API server before touching Node %s's Elastic IP (nothing given back): %w", rd.node, live.err)
	}
	if viewGivesBack && live.exists && r.c.Wants(live.obj) {
		r.refused(log, "sync")
	}
	rd.obj, rd.exists, rd.confirmed = live.obj, live.exists, true
	return r.reconcile(ctx, log, rd)
}

// refused counts and logs a give-back the view asked for and the live Node
// refused.
func (r *NodeReconciler) refused(log *slog.Logger, source string) {
	r.c.metrics.refused.WithLabelValues(source).Inc()
	log.Info("The watcher's view says the Node should have no Elastic IP, but the API server has it labelled: keeping its address",
		"source", source)
}

// taggedFor counts the addresses tagged for node.
func taggedFor(node string, view []decide.Address) int {
	n := 0
	for _, a := range view {
		if a.Node == node {
			n++
		}
	}
	return n
}

// published reports whether the Node shows an address in its label or
// annotation.
func published(node *watcherv1.Object) bool {
	meta := node.GetMeta()
	return meta.GetLabels()[LabelExternalIP] != "" || meta.GetAnnotations()[AnnotationAllocationID] != ""
}
