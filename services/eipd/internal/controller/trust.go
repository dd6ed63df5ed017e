package controller

import (
	"context"
	"log/slog"
	"maps"

	corev1 "k8s.io/api/core/v1"

	watcherv1 "github.com/ipledger/ipledger/proto/ipledger/watcher/v1"
	"github.com/ipledger/ipledger/services/eipd/internal/decide"
)

// internalIPs are the Node's status.addresses of type InternalIP.
func internalIPs(node *watcherv1.Object) []string {
	var out []string
	for _, a := range node.GetNode().GetAddresses() {
		if a.GetType() == string(corev1.NodeInternalIP) && a.GetAddress() != "" {
			out = append(out, a.GetAddress())
		}
	}
	return out
}

// rivals are the other Nodes of the view whose providerID names instanceID.
// A scan of the view's Nodes: a few thousand string compares per sync,
// nothing next to the EC2 calls of the same sync.
func (r *NodeReconciler) rivals(node, instanceID string) []string {
	var out []string
	for _, o := range r.c.store.List(watcherv1.Kind_KIND_NODE) {
		name := o.GetMeta().GetName()
		if name == node || o.GetMeta().GetDeletionTimestamp() != 0 {
			continue
		}
		if id, err := decide.InstanceID(o.GetNode().GetProviderId()); err == nil && id == instanceID {
			out = append(out, name)
		}
	}
	return out
}

// refuse records that a Node's instance failed the trust check: nothing is
// associated, nothing given back (the refusal is not the Node's wish to give
// its address up), an Event and a metric say why, and the Node is looked at
// again every interval (a Node update requeues it sooner).
func (r *NodeReconciler) refuse(log *slog.Logger, obj *watcherv1.Object, instanceID string, refusal *decide.Refusal) {
	r.c.metrics.refusedAssociations.WithLabelValues(refusal.Reason).Inc()
	r.c.status.Set(obj.GetMeta().GetName(), StateError, "refused: "+refusal.Error())
	log.Warn("Refusing to associate an Elastic IP with the instance the Node names", "instance", instanceID,
		"reason", refusal.Reason, "why", refusal.Message)
	r.event(obj, corev1.EventTypeWarning, ReasonRefused, "No Elastic IP for instance %s (%s): %s", instanceID, refusal.Reason, refusal.Message)
	r.queue.AddAfter(obj.GetMeta().GetName(), r.c.cfg.RequeueInterval)
}

// withoutHeldOutside returns view without the addresses tagged for node that
// are associated outside the cluster (decide.HeldOutside), counting, logging
// and reporting each one left alone. known are owners already described, by
// interface ID (the Node's own instance); the owners of the other interfaces
// the Node's addresses are associated with are described in one call, made
// only when there are any. The allocation IDs left out are added to held
// (when not nil).
func (r *NodeReconciler) withoutHeldOutside(ctx context.Context, log *slog.Logger, obj *watcherv1.Object, node string, view []decide.Address,
	known map[string]decide.Instance, held map[string]bool) ([]decide.Address, error) {
	var unknown []decide.Address
	for _, a := range view {
		if _, ok := known[a.NetworkInterfaceID]; a.Node == node && a.Associated() && !ok {
			unknown = append(unknown, a)
		}
	}
	owners := map[string]decide.Instance{}
	var err error
	if len(unknown) > 0 {
		owners, err = r.c.ec2.InterfaceOwners(ctx, unknown)
	}
	if err != nil {
		return nil, err
	}
	maps.Copy(owners, known)
	out := make([]decide.Address, 0, len(view))
	for _, a := range view {
		if a.Node != node || !decide.HeldOutside(a, owners, r.c.member) {
			out = append(out, a)
			continue
		}
		if held != nil {
			held[a.AllocationID] = true
		}
		r.c.metrics.heldOutside.Inc()
		log.Warn("An Elastic IP tagged for the Node is associated outside the cluster: not eipd's doing, left alone (not released, not reassociated)",
			"allocationID", a.AllocationID, "ip", a.PublicIP, "instance", a.InstanceID, "networkInterface", a.NetworkInterfaceID)
		r.event(nodeRef(node, obj), corev1.EventTypeWarning, ReasonHeldOutside,
			"Elastic IP %s (%s) is tagged for this Node but associated with %s outside the cluster; left alone",
			a.PublicIP, a.AllocationID, holder(a))
	}
	return out, nil
}

func holder(a decide.Address) string {
	if a.InstanceID != "" {
		return "instance " + a.InstanceID
	}
	return "network interface " + a.NetworkInterfaceID
}

// warnLegacy tells, once per term, that a Node asks only through the
// deprecated label.
func (r *NodeReconciler) warnLegacy(log *slog.Logger, obj *watcherv1.Object) {
	name := obj.GetMeta().GetName()
	r.mu.Lock()
	seen := r.warned[name]
	r.warned[name] = true
	r.mu.Unlock()
	if seen {
		return
	}
	r.c.metrics.legacyOptIns.Inc()
	log.Warn("The Node asks for an Elastic IP only through the deprecated label, which its kubelet can set itself; label it "+LabelOptIn+"=true",
		"label", LabelAutoAssign)
	r.event(obj, corev1.EventTypeWarning, ReasonDeprecatedOptIn, "Opted in only by %s=true, which a kubelet can set on itself (deprecated); an operator should label the Node %s=true",
		LabelAutoAssign, LabelOptIn)
}
