package controller

import (
	"log/slog"
	"time"

	corev1 "k8s.io/api/core/v1"

	watcherv1 "github.com/ipledger/ipledger/proto/ipledger/watcher/v1"
	"github.com/ipledger/ipledger/services/eipd/internal/decide"
)

// StateWaiting: nothing the Node may take is free and eipd may not allocate.
const StateWaiting = "Waiting"

// serve records which reserved set serves an admitted Node ("" for none).
func (r *NodeReconciler) serve(node, set string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if set == "" {
		delete(r.served, node)
		return
	}
	r.served[node] = set
}

// ahead counts the Nodes waiting for an address of set that are served
// before obj's Node (decide.Ahead): those the set serves that want an
// address, have none and are not cordoned.
func (r *NodeReconciler) ahead(obj *watcherv1.Object, set string, tagged map[string]bool) int {
	if set == "" {
		return 0
	}
	node := obj.GetMeta().GetName()
	r.mu.Lock()
	var others []string
	for m, s := range r.served {
		if s == set && m != node {
			others = append(others, m)
		}
	}
	r.mu.Unlock()
	var waiters []decide.Waiter
	for _, m := range others {
		o, ok := r.c.store.Get(watcherv1.Kind_KIND_NODE, "", m)
		if ok && r.c.Wants(o) && !tagged[m] && !o.GetNode().GetUnschedulable() {
			waiters = append(waiters, waiterOf(o))
		}
	}
	return decide.Ahead(waiterOf(obj), waiters)
}

func waiterOf(o *watcherv1.Object) decide.Waiter {
	return decide.Waiter{Node: o.GetMeta().GetName(), Created: time.Unix(0, o.GetMeta().GetCreationTimestamp())}
}

// taggedNodes are the Nodes that have an address tagged for them.
func taggedNodes(view []decide.Address) map[string]bool {
	out := map[string]bool{}
	for _, a := range view {
		if a.Node != "" {
			out[a.Node] = true
		}
	}
	return out
}

// wait records that a Node waits on set, tells it once per wait (Event),
// and looks at it again every interval; a given-back address of its set
// wakes it sooner (wake).
func (r *NodeReconciler) wait(log *slog.Logger, obj *watcherv1.Object, set, reason string) {
	node := obj.GetMeta().GetName()
	r.mu.Lock()
	prev, was := r.waiters[node]
	r.waiters[node] = set
	r.mu.Unlock()
	if !was || prev != set {
		log.Info("Waiting for a free Elastic IP", "reservedSet", set, "reason", reason)
		r.event(obj, corev1.EventTypeWarning, ReasonWaiting, "%s", reason)
		r.countWaiters()
	}
	r.c.status.Set(node, StateWaiting, reason)
	r.queue.AddAfter(node, r.c.cfg.RequeueInterval)
}

// stopWaiting forgets a Node's wait.
func (r *NodeReconciler) stopWaiting(node string) {
	r.mu.Lock()
	_, was := r.waiters[node]
	delete(r.waiters, node)
	r.mu.Unlock()
	if was {
		r.countWaiters()
	}
}

func (r *NodeReconciler) countWaiters() {
	r.mu.Lock()
	counts := map[string]int{}
	for _, set := range r.waiters {
		counts[set]++
	}
	r.mu.Unlock()
	r.c.metrics.setWaiting(counts, r.c.reserved.SetNames())
}

// wake queues every Node waiting on set: one of its addresses came free.
func (r *NodeReconciler) wake(set string) {
	r.mu.Lock()
	var nodes []string
	for node, s := range r.waiters {
		if s == set {
			nodes = append(nodes, node)
		}
	}
	r.mu.Unlock()
	for _, node := range nodes {
		r.queue.Add(node)
	}
}

// wakeWhereFree wakes the waiters of every set (and of no set) with a
// free address in view: an address the operator added, or one freed
// outside this term.
func (r *NodeReconciler) wakeWhereFree(view []decide.Address) {
	free := map[string]bool{}
	for _, a := range view {
		if a.Node == "" && !a.Associated() {
			free[r.c.reserved.AddressSet(a)] = true
		}
	}
	for set := range free {
		r.wake(set)
	}
}
