package controller

import (
	"context"
	"encoding/json"
	"math"
	"math/big"
	"slices"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	"github.com/ipledger/ipledger/pkg/convert"
	watcherv1 "github.com/ipledger/ipledger/proto/ipledger/watcher/v1"
	"github.com/ipledger/ipledger/services/ipam/internal/allocator"
	"github.com/ipledger/ipledger/services/ipam/internal/objects"
	"github.com/ipledger/ipledger/services/ipam/internal/poolstate"
)

// PoolGVR is the IPPool resource.
var PoolGVR = schema.GroupVersionResource{Group: "ipledger.io", Version: "v1alpha1", Resource: "ippools"}

// poolStatus is the status ipam writes on an IPPool. The fields are in
// alphabetical order, as the JSON of the map[string]any it replaced: the
// patch stays byte for byte the same.
type poolStatus struct {
	Conditions []poolCondition `json:"conditions"`
	// HeldOutside is written whenever the allocator exists, 0 included.
	HeldOutside *int `json:"heldOutside,omitempty"`
	// IPv4 and IPv6 are written only for a pool the allocator serves; a
	// merge patch without them leaves the last counts in place.
	IPv4 *familyCounts `json:"ipv4,omitempty"`
	IPv6 *familyCounts `json:"ipv6,omitempty"`
	// Kept counts the addresses kept for Services that released them,
	// written for a served pool (they count as used too, not as held).
	Kept *int `json:"kept,omitempty"`
	// NamespacesAtQuota lists the namespaces holding or requesting as many
	// addresses as the pool's maxAddressesPerNamespace allows: written for
	// a served pool, as [] when none, and as null (the merge patch removes
	// it) when the pool sets no quota.
	NamespacesAtQuota *[]namespaceUse `json:"namespacesAtQuota,omitempty"`
}

// namespaceUse is one entry of namespacesAtQuota.
type namespaceUse struct {
	Addresses int    `json:"addresses"`
	Namespace string `json:"namespace"`
}

// maxNamespacesAtQuota bounds the list in the status (the count is exact:
// the pool's Ready condition says how many there are).
const maxNamespacesAtQuota = 50

// namespacesAtQuota is the NamespacesAtQuota of a served pool.
func namespacesAtQuota(use []allocator.NamespaceUse, quota bool) *[]namespaceUse {
	if !quota {
		return new([]namespaceUse)
	}
	out := []namespaceUse{}
	for _, u := range use[:min(len(use), maxNamespacesAtQuota)] {
		out = append(out, namespaceUse{Addresses: u.Addresses, Namespace: u.Namespace})
	}
	return &out
}

// poolCondition is one IPPool condition. LastTransitionTime is left empty
// until the status is written, so that it never makes a pass look like a
// change.
type poolCondition struct {
	LastTransitionTime string `json:"lastTransitionTime,omitempty"`
	Message            string `json:"message"`
	ObservedGeneration int64  `json:"observedGeneration"`
	Reason             string `json:"reason"`
	Status             string `json:"status"`
	Type               string `json:"type"`
}

// familyCounts is a family's counts as the IPPool status shows them
// (allocator.FamilyUsage says what each counts).
type familyCounts struct {
	Available      int64  `json:"available"`
	AvailableExact string `json:"availableExact"`
	Held           int64  `json:"held"`
	Total          int64  `json:"total"`
	TotalExact     string `json:"totalExact"`
	Used           int64  `json:"used"`
}

// equal compares two statuses as written (transition times aside, which
// are not set on either).
func (s poolStatus) equal(o poolStatus) bool {
	return slices.Equal(s.Conditions, o.Conditions) && ptrEqual(s.HeldOutside, o.HeldOutside) &&
		ptrEqual(s.IPv4, o.IPv4) && ptrEqual(s.IPv6, o.IPv6) && ptrEqual(s.Kept, o.Kept) &&
		(s.NamespacesAtQuota == nil) == (o.NamespacesAtQuota == nil) &&
		(s.NamespacesAtQuota == nil || slices.Equal(*s.NamespacesAtQuota, *o.NamespacesAtQuota))
}

func ptrEqual[T comparable](a, b *T) bool {
	if a == nil || b == nil {
		return a == b
	}
	return *a == *b
}

// ready is the Ready condition (the zero condition when there is none).
func (s poolStatus) ready() poolCondition {
	for _, c := range s.Conditions {
		if c.Type == "Ready" {
			return c
		}
	}
	return poolCondition{}
}

// poolStatusInterval is the least time between two writes of one IPPool's
// status that change only its counts. Every allocation and release changes
// them, and a write per pass cost the loop an API round trip for each one
// in steady state, before it could decide the next Service (issue 31); a
// change of the pool's conditions is written at once.
const poolStatusInterval = time.Second

// writtenPoolStatus is the status this term last wrote on a pool, and when.
type writtenPoolStatus struct {
	status poolStatus
	at     time.Time
}

// poolStatusWrite decides whether a pool's status is written now: not when
// it is what was last written; at once when nothing was written this term
// or its conditions changed; when only its counts changed, once
// poolStatusInterval has passed since the last write, and until then not,
// with the time it is due.
func poolStatusWrite(last writtenPoolStatus, written bool, status poolStatus, now time.Time) (write bool, due time.Time) {
	switch {
	case !written:
		return true, time.Time{}
	case last.status.equal(status):
		return false, time.Time{}
	case !slices.Equal(last.status.Conditions, status.Conditions):
		return true, time.Time{}
	case now.Sub(last.at) >= poolStatusInterval:
		return true, time.Time{}
	}
	return false, last.at.Add(poolStatusInterval)
}

// writePoolStatusesAt makes a pass run when a deferred status write is due.
func (w *worker) writePoolStatusesAt(due time.Time) {
	if !w.poolStatusDue.IsZero() && !w.poolStatusDue.After(due) {
		return // a pass is already due by then
	}
	w.poolStatusDue = due
	w.markAfter(time.Until(due), w.dirty.markPoolWrites)
}

// writePoolStatuses writes each IPPool's counts and Ready/Conflicting/Invalid
// conditions when they differ from what this term last wrote
// (poolStatusWrite).
func (w *worker) writePoolStatuses(ctx context.Context, holders poolHolders) {
	if w.c.dynamic == nil {
		return
	}
	if !w.poolStatusDue.After(time.Now()) {
		w.poolStatusDue = time.Time{}
	}
	objs := w.store().List(watcherv1.Kind_KIND_IP_POOL)
	seen := map[string]bool{}
	in := poolstate.Inputs{Alloc: w.alloc, Invalid: w.invalidPools, Holders: holders}
	if w.corrupt != nil {
		in.Corrupt = w.corrupt // not a nil *CorruptError in the interface
	}
	states := poolstate.Of(in, objs)
	for i, obj := range objs {
		name := obj.GetMeta().GetName()
		seen[name] = true
		status := w.poolStatus(obj, states[i])
		old, had := w.poolWritten[name]
		if write, due := poolStatusWrite(old, had, status, time.Now()); !write {
			if !due.IsZero() {
				w.writePoolStatusesAt(due)
			}
			continue
		}
		// Transition times are added only now, so they do not make every
		// pass look like a change.
		now := time.Now().UTC().Format(time.RFC3339)
		prev := map[string]*watcherv1.Condition{}
		for _, c := range obj.GetIpPool().GetConditions() {
			prev[c.GetType()] = c
		}
		written := status
		written.Conditions = slices.Clone(status.Conditions)
		for i, c := range written.Conditions {
			written.Conditions[i].LastTransitionTime = now
			if p := prev[c.Type]; p != nil && p.GetStatus() == c.Status && p.GetLastTransitionTime() != 0 {
				written.Conditions[i].LastTransitionTime = time.Unix(0, p.GetLastTransitionTime()).UTC().Format(time.RFC3339)
			}
		}
		full, _ := json.Marshal(map[string]any{"status": written})
		_, err := w.c.dynamic.Resource(PoolGVR).Patch(ctx, name, types.MergePatchType, full, metav1.PatchOptions{FieldManager: convert.IPAMFieldManager}, "status")
		if err != nil {
			w.log.Warn("Cannot write IPPool status", "pool", name, "err", err)
			continue
		}
		w.poolWritten[name] = writtenPoolStatus{status: status, at: time.Now()}
		if ready := status.ready(); (!had || old.status.ready() != ready) && ready.Status == "False" {
			w.event(poolRef(obj), "Warning", ready.Reason, ready.Message)
		}
	}
	for name := range w.poolWritten {
		if !seen[name] {
			delete(w.poolWritten, name)
		}
	}
	w.c.metrics.setPoolUsage(w.alloc, objs)
}

// poolStatus is the status written for obj, whose state is st.
func (w *worker) poolStatus(obj *watcherv1.Object, st poolstate.State) poolStatus {
	var status poolStatus
	if w.alloc != nil {
		if st.Served {
			v4, v6 := familyStatus(st.IPv4), familyStatus(st.IPv6)
			status.IPv4, status.IPv6 = &v4, &v6
			kept := st.Kept
			status.Kept = &kept
			status.NamespacesAtQuota = namespacesAtQuota(w.alloc.AtQuota(st.Name), obj.GetIpPool().GetAllocation().GetMaxAddressesPerNamespace() > 0)
		}
		n := st.HeldOutside
		status.HeldOutside = &n
	}
	gen := obj.GetMeta().GetGeneration()
	for _, c := range st.Conditions() {
		status.Conditions = append(status.Conditions, poolCondition{Type: c.Type, Status: c.Status, Reason: c.Reason, Message: c.Message, ObservedGeneration: gen})
	}
	return status
}

// familyStatus is a family's counts as the IPPool status shows them:
// integers, so that kubectl sorts and prints them as numbers, capped at
// math.MaxInt64 (an IPv6 /64 alone holds 2^64 addresses); totalExact and
// availableExact are the exact decimals, capped or not. Used is capped the
// same way, though Services and reservations never come near 2^63; held,
// at most the addresses ipam tracks, never does.
func familyStatus(f allocator.FamilyUsage) familyCounts {
	available := f.Available()
	return familyCounts{
		Total: capInt64(f.Total), Used: capInt64(f.Used), Held: f.Held, Available: capInt64(available),
		TotalExact: f.Total.String(), AvailableExact: available.String(),
	}
}

func capInt64(x *big.Int) int64 {
	if !x.IsInt64() {
		if x.Sign() < 0 {
			return 0
		}
		return math.MaxInt64
	}
	return max(x.Int64(), 0)
}

// syncPoolFinalizers protects every IPPool with objects.PoolFinalizer, and
// lets a Terminating pool go once no Service holds an address from it. Each
// patch carries the resourceVersion it was decided on: a pool changed since
// is decided again on its next event.
func (w *worker) syncPoolFinalizers(ctx context.Context, holders poolHolders) {
	if w.c.dynamic == nil || w.alloc == nil || w.corrupt != nil {
		return
	}
	failed := false
	for _, obj := range w.store().List(watcherv1.Kind_KIND_IP_POOL) {
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
		_, err := w.c.dynamic.Resource(PoolGVR).Patch(ctx, m.GetName(), types.MergePatchType, body, metav1.PatchOptions{FieldManager: convert.IPAMFieldManager})
		switch {
		case err == nil && has:
			w.log.Info("IPPool released: no Service holds its addresses any more", "pool", m.GetName())
		case err == nil, apierrors.IsNotFound(err):
		default:
			// A conflict is usually this pass's own status write, which the
			// stream has not shown yet: decide again shortly, from the
			// newer pool.
			if !apierrors.IsConflict(err) {
				w.log.Warn("Cannot update the IPPool's finalizers; retrying", "pool", m.GetName(), "err", err)
			}
			failed = true
		}
	}
	if failed {
		w.retryFinalizers() // one retry for the whole pass, however many pools failed
	} else {
		w.finalizerBackoff = 0
	}
}

// retryFinalizers runs syncPoolFinalizers again in a pass, after a delay
// that doubles with each failure (250 ms to 1 min): a conflict clears at
// once, a refusal (RBAC, an admission policy) must not become a hot loop.
func (w *worker) retryFinalizers() {
	w.finalizerBackoff = min(max(2*w.finalizerBackoff, 250*time.Millisecond), time.Minute)
	w.markAfter(w.finalizerBackoff, w.dirty.markPoolWrites)
}

// poolHolders counts, by pool, the Services holding an address that came
// from or lies in it; nil when no pool is being deleted (nobody asks).
type poolHolders map[string]int

// holders computes poolHolders once per pass, only when a pool is
// Terminating: it scans every held address.
func (w *worker) holders() poolHolders {
	return poolstate.Holders(w.alloc, w.store().List(watcherv1.Kind_KIND_IP_POOL))
}
