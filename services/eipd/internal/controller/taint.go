package controller

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	watcherv1 "github.com/ipledger/ipledger/proto/ipledger/watcher/v1"
	"github.com/ipledger/ipledger/services/eipd/internal/decide"
)

// liftStartupTaint removes the startup taint from a Node whose address is
// on: EC2 listed it associated with the Node's instance before this sync
// acted (seen), and the Node — as the view shows it and as the API server
// answers just before the patch — publishes it. Until both sides agree
// the Node is looked at again shortly; nothing is kept in memory, so a new
// leader after a restart decides the same from EC2 and the Node.
func (r *NodeReconciler) liftStartupTaint(ctx context.Context, log *slog.Logger, obj *watcherv1.Object, addr decide.Address, seen bool) error {
	key := r.c.cfg.StartupTaint
	if !slices.Contains(obj.GetNode().GetTaintKeys(), key) {
		return nil
	}
	node := obj.GetMeta().GetName()
	if !seen || !publishes(obj.GetMeta().GetLabels(), obj.GetMeta().GetAnnotations(), addr) {
		r.c.status.Set(node, StateAssociated, "waiting for EC2 and the Node to show the address before removing the startup taint "+key)
		r.queue.AddAfter(node, r.c.cfg.PendingPoll)
		return nil
	}
	live, err := r.c.kube.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("get node %s before removing its startup taint: %w", node, err)
	}
	if !publishes(live.Labels, live.Annotations, addr) {
		r.queue.AddAfter(node, r.c.cfg.PendingPoll)
		return nil
	}
	i := slices.IndexFunc(live.Spec.Taints, func(t corev1.Taint) bool { return t.Key == key })
	if i < 0 {
		return nil
	}
	// test-then-remove: the patch fails (and the sync is retried) if
	// anyone changed the taints since the GET, instead of removing theirs.
	path := fmt.Sprintf("/spec/taints/%d", i)
	patch, err := json.Marshal([]map[string]any{
		{"op": "test", "path": path, "value": live.Spec.Taints[i]},
		{"op": "remove", "path": path},
	})
	if err != nil {
		return err
	}
	if _, err := r.c.kube.CoreV1().Nodes().Patch(ctx, node, types.JSONPatchType, patch, metav1.PatchOptions{FieldManager: FieldManager}); err != nil {
		return fmt.Errorf("remove startup taint %s from node %s: %w", key, node, err)
	}
	r.c.metrics.taintsRemoved.Inc()
	log.Info("Removed the startup taint: the Elastic IP is associated and published", "taint", key, "ip", addr.PublicIP)
	r.event(obj, corev1.EventTypeNormal, ReasonTaintLifted, "Elastic IP %s is associated and published: removed startup taint %s", addr.PublicIP, key)
	return nil
}

func publishes(labels, annotations map[string]string, addr decide.Address) bool {
	return labels[LabelExternalIP] == addr.PublicIP && annotations[AnnotationAllocationID] == addr.AllocationID
}
