package controller

import (
	"context"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	"github.com/ipledger/ipledger/pkg/convert"
	watcherv1 "github.com/ipledger/ipledger/proto/ipledger/watcher/v1"
	"github.com/ipledger/ipledger/services/ipam/internal/poolplan"
	"github.com/ipledger/ipledger/services/ipam/internal/poolstate"
)

// PoolGVR is the IPPool resource.
var PoolGVR = schema.GroupVersionResource{Group: "ipledger.io", Version: "v1alpha1", Resource: "ippools"}

// poolStatusBook is what a term knows of the IPPool statuses it wrote.
type poolStatusBook struct {
	// written is, by pool, the status last written and when.
	written map[string]poolplan.Written
	// due is when a deferred status write is due (zero when none is): a
	// timer marks the dirty set then.
	due time.Time
}

// writePoolStatusesAt makes a pass run when a deferred status write is due.
func (w *worker) writePoolStatusesAt(due time.Time) {
	if !w.poolStatuses.due.IsZero() && !w.poolStatuses.due.After(due) {
		return // a pass is already due by then
	}
	w.poolStatuses.due = due
	w.markAfter(time.Until(due), w.dirty.markPoolWrites)
}

// writePoolStatuses writes what poolplan.Statuses decides: each IPPool's
// counts and Ready/Conflicting/Invalid conditions when they differ from
// what this term last wrote.
func (w *worker) writePoolStatuses(ctx context.Context, holders poolHolders) {
	if w.c.dynamic == nil {
		return
	}
	if !w.poolStatuses.due.After(time.Now()) {
		w.poolStatuses.due = time.Time{}
	}
	objs := w.store().List(watcherv1.Kind_KIND_IP_POOL)
	in := poolplan.StatusInputs{Pools: objs, Alloc: w.alloc, Invalid: w.invalidPools, Holders: holders, Written: w.poolStatuses.written, Now: time.Now()}
	if w.corrupt != nil {
		in.Corrupt = w.corrupt // not a nil *CorruptError in the interface
	}
	p := poolplan.Statuses(in)
	for _, wr := range p.Writes {
		name := wr.Pool.GetMeta().GetName()
		_, err := w.c.dynamic.Resource(PoolGVR).Patch(ctx, name, types.MergePatchType, wr.Patch, metav1.PatchOptions{FieldManager: convert.IPAMFieldManager}, "status")
		if err != nil {
			w.log.Warn("Cannot write IPPool status", "pool", name, "err", err)
			continue
		}
		w.poolStatuses.written[name] = poolplan.Written{Status: wr.Status, At: time.Now()}
		if wr.Event != nil {
			w.event(poolRef(wr.Pool), "Warning", wr.Event.Reason, wr.Event.Message)
		}
	}
	if !p.Due.IsZero() {
		w.writePoolStatusesAt(p.Due)
	}
	for _, name := range p.Forget {
		delete(w.poolStatuses.written, name)
	}
	w.c.metrics.setPoolUsage(w.alloc, objs)
}

// syncPoolFinalizers writes what poolplan.Finalizers decides: every IPPool
// protected by objects.PoolFinalizer, a Terminating pool let go once no
// Service holds an address from it.
func (w *worker) syncPoolFinalizers(ctx context.Context, holders poolHolders) {
	if w.c.dynamic == nil || w.alloc == nil || w.corrupt != nil {
		return
	}
	failed := false
	for _, fp := range poolplan.Finalizers(w.store().List(watcherv1.Kind_KIND_IP_POOL), holders) {
		_, err := w.c.dynamic.Resource(PoolGVR).Patch(ctx, fp.Pool, types.MergePatchType, fp.Patch, metav1.PatchOptions{FieldManager: convert.IPAMFieldManager})
		switch {
		case err == nil && fp.Releases:
			w.log.Info("IPPool released: no Service holds its addresses any more", "pool", fp.Pool)
		case err == nil, apierrors.IsNotFound(err):
		default:
			// A conflict is usually this pass's own status write, which the
			// stream has not shown yet: decide again shortly, from the
			// newer pool.
			if !apierrors.IsConflict(err) {
				w.log.Warn("Cannot update the IPPool's finalizers; retrying", "pool", fp.Pool, "err", err)
			}
			failed = true
		}
	}
	if failed {
		// One retry for the whole pass, however many pools failed: a pass
		// runs syncPoolFinalizers again after finalizersKey's backoff.
		w.markAfter(w.retries.failed(finalizersKey), w.dirty.markPoolWrites)
	} else {
		w.retries.forget(finalizersKey)
	}
}

// poolHolders counts, by pool, the Services holding an address that came
// from or lies in it; nil when no pool is being deleted (nobody asks).
type poolHolders map[string]int

// holders computes poolHolders once per pass, only when a pool is
// Terminating: it scans every held address.
func (w *worker) holders() poolHolders {
	return poolstate.Holders(w.alloc, w.store().List(watcherv1.Kind_KIND_IP_POOL))
}
