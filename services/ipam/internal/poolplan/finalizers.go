package poolplan

import (
	"encoding/json"
	"slices"

	watcherv1 "github.com/ipledger/ipledger/proto/ipledger/watcher/v1"
	"github.com/ipledger/ipledger/services/ipam/internal/objects"
)

// FinalizerPatch is one pool's finalizer write.
type FinalizerPatch struct {
	Pool string
	// Patch is the merge patch of the pool's finalizers, conditional on
	// the resourceVersion it was decided on: a pool changed since is
	// decided again on its next event.
	Patch []byte
	// Releases: the patch removes objects.PoolFinalizer (the pool may go).
	Releases bool
}

// Finalizers protects every IPPool with objects.PoolFinalizer, and lets a
// Terminating pool go once no Service holds an address from it. holders
// counts, by pool, the Services holding its addresses (poolstate.Holders);
// nil when unknown (no pool is released then).
func Finalizers(pools []*watcherv1.Object, holders map[string]int) []FinalizerPatch {
	var out []FinalizerPatch
	for _, obj := range pools {
		m := obj.GetMeta()
		has := objects.HasFinalizer(obj, objects.PoolFinalizer)
		var want []string
		switch terminating := m.GetDeletionTimestamp() != 0; {
		case !terminating && !has:
			want = append(slices.Clone(m.GetFinalizers()), objects.PoolFinalizer)
		case terminating && has && holders != nil && holders[m.GetName()] == 0:
			want = slices.DeleteFunc(slices.Clone(m.GetFinalizers()), func(f string) bool { return f == objects.PoolFinalizer })
		default:
			continue
		}
		body, _ := json.Marshal(map[string]any{"metadata": map[string]any{"finalizers": want, "resourceVersion": m.GetResourceVersion()}})
		out = append(out, FinalizerPatch{Pool: m.GetName(), Patch: body, Releases: has})
	}
	return out
}
