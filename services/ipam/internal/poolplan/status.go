// Package poolplan decides what a term writes on its IPPools: each pool's
// status (now, or when it is due) and its finalizer. It is a sibling of
// plan.Plan for the pools: pure, it reads the allocator and the pools as
// streamed, changes nothing and does no I/O; the controller's worker applies
// what it returns.
package poolplan

import (
	"encoding/json"
	"math"
	"math/big"
	"slices"
	"time"

	watcherv1 "github.com/ipledger/ipledger/proto/ipledger/watcher/v1"
	"github.com/ipledger/ipledger/services/ipam/internal/allocator"
	"github.com/ipledger/ipledger/services/ipam/internal/poolstate"
)

// Status is the status ipam writes on an IPPool. The fields are in
// alphabetical order, as the JSON of the map[string]any it replaced: the
// patch stays byte for byte the same.
type Status struct {
	Conditions []Condition `json:"conditions"`
	// HeldOutside is written whenever the allocator exists, 0 included.
	HeldOutside *int `json:"heldOutside,omitempty"`
	// IPv4 and IPv6 are written only for a pool the allocator serves; a
	// merge patch without them leaves the last counts in place.
	IPv4 *FamilyCounts `json:"ipv4,omitempty"`
	IPv6 *FamilyCounts `json:"ipv6,omitempty"`
	// Kept counts the addresses kept for Services that released them,
	// written for a served pool (they count as used too, not as held).
	Kept *int `json:"kept,omitempty"`
	// NamespacesAtQuota lists the namespaces holding or requesting as many
	// addresses as the pool's maxAddressesPerNamespace allows: written for
	// a served pool, as [] when none, and as null (the merge patch removes
	// it) when the pool sets no quota.
	NamespacesAtQuota *[]NamespaceUse `json:"namespacesAtQuota,omitempty"`
}

// NamespaceUse is one entry of namespacesAtQuota.
type NamespaceUse struct {
	Addresses int    `json:"addresses"`
	Namespace string `json:"namespace"`
}

// maxNamespacesAtQuota bounds the list in the status (the count is exact:
// the pool's Ready condition says how many there are).
const maxNamespacesAtQuota = 50

// namespacesAtQuota is the NamespacesAtQuota of a served pool.
func namespacesAtQuota(use []allocator.NamespaceUse, quota bool) *[]NamespaceUse {
	if !quota {
		return new([]NamespaceUse)
	}
	out := []NamespaceUse{}
	for _, u := range use[:min(len(use), maxNamespacesAtQuota)] {
		out = append(out, NamespaceUse{Addresses: u.Addresses, Namespace: u.Namespace})
	}
	return &out
}

// Condition is one IPPool condition. LastTransitionTime is left empty
// until the status is written, so that it never makes a pass look like a
// change.
type Condition struct {
	LastTransitionTime string `json:"lastTransitionTime,omitempty"`
	Message            string `json:"message"`
	ObservedGeneration int64  `json:"observedGeneration"`
	Reason             string `json:"reason"`
	Status             string `json:"status"`
	Type               string `json:"type"`
}

// FamilyCounts is a family's counts as the IPPool status shows them
// (allocator.FamilyUsage says what each counts).
type FamilyCounts struct {
	Available      int64  `json:"available"`
	AvailableExact string `json:"availableExact"`
	Held           int64  `json:"held"`
	Total          int64  `json:"total"`
	TotalExact     string `json:"totalExact"`
	Used           int64  `json:"used"`
}

// equal compares two statuses as written (transition times aside, which
// are not set on either).
func (s Status) equal(o Status) bool {
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
func (s Status) ready() Condition {
	for _, c := range s.Conditions {
		if c.Type == "Ready" {
			return c
		}
	}
	return Condition{}
}

// Interval is the least time between two writes of one IPPool's status
// that change only its counts. Every allocation and release changes them,
// and a write per pass cost the loop an API round trip for each one in
// steady state, before it could decide the next Service (issue 31); a
// change of the pool's conditions is written at once.
const Interval = time.Second

// Written is the status a term last wrote on a pool, and when.
type Written struct {
	Status Status
	At     time.Time
}

// writeNow decides whether a pool's status is written now: not when it is
// what was last written; at once when nothing was written this term or its
// conditions changed; when only its counts changed, once Interval has
// passed since the last write, and until then not, with the time it is due.
func writeNow(last Written, written bool, status Status, now time.Time) (write bool, due time.Time) {
	switch {
	case !written:
		return true, time.Time{}
	case last.Status.equal(status):
		return false, time.Time{}
	case !slices.Equal(last.Status.Conditions, status.Conditions):
		return true, time.Time{}
	case now.Sub(last.At) >= Interval:
		return true, time.Time{}
	}
	return false, last.At.Add(Interval)
}

// StatusInputs are what the pools' statuses are decided from. Nothing in
// them is changed.
type StatusInputs struct {
	// Pools are the IPPools as streamed.
	Pools []*watcherv1.Object
	// Alloc, Invalid, Corrupt and Holders are poolstate.Inputs.
	Alloc   *allocator.Allocator
	Invalid map[string]error
	Corrupt error
	Holders map[string]int
	// Written is what this term last wrote on each pool.
	Written map[string]Written
	Now     time.Time
}

// StatusPlan is what to write on the pools' statuses.
type StatusPlan struct {
	// Writes are the statuses to write now.
	Writes []StatusWrite
	// Due is when the earliest deferred write is due (zero when none is):
	// the statuses are decided again then.
	Due time.Time
	// Forget are the pools written this term that are gone.
	Forget []string
}

// StatusWrite is one pool's status write.
type StatusWrite struct {
	Pool *watcherv1.Object
	// Status is what is written, to remember as Written once it is.
	Status Status
	// Patch is the merge patch of the status subresource: Status with the
	// conditions' transition times.
	Patch []byte
	// Event, when set, is told on the pool once the write succeeded (a
	// Warning): its Ready condition turned False.
	Event *Event
}

// Event is an Event's reason and message.
type Event struct{ Reason, Message string }

// Statuses decides each pool's status and whether it is written now
// (writeNow).
func Statuses(in StatusInputs) StatusPlan {
	var p StatusPlan
	seen := map[string]bool{}
	states := poolstate.Of(poolstate.Inputs{Alloc: in.Alloc, Invalid: in.Invalid, Corrupt: in.Corrupt, Holders: in.Holders}, in.Pools)
	for i, obj := range in.Pools {
		name := obj.GetMeta().GetName()
		seen[name] = true
		status := StatusOf(in.Alloc, obj, states[i])
		old, had := in.Written[name]
		if write, due := writeNow(old, had, status, in.Now); !write {
			if !due.IsZero() && (p.Due.IsZero() || due.Before(p.Due)) {
				p.Due = due
			}
			continue
		}
		wr := StatusWrite{Pool: obj, Status: status, Patch: patch(obj, status, in.Now)}
		if ready := status.ready(); (!had || old.Status.ready() != ready) && ready.Status == "False" {
			wr.Event = &Event{Reason: ready.Reason, Message: ready.Message}
		}
		p.Writes = append(p.Writes, wr)
	}
	for name := range in.Written {
		if !seen[name] {
			p.Forget = append(p.Forget, name)
		}
	}
	slices.Sort(p.Forget)
	return p
}

// patch is the merge patch writing status on obj. Transition times are
// added only now, so they do not make every pass look like a change: a
// condition whose status the pool shows already keeps its time.
func patch(obj *watcherv1.Object, status Status, now time.Time) []byte {
	at := now.UTC().Format(time.RFC3339)
	prev := map[string]*watcherv1.Condition{}
	for _, c := range obj.GetIpPool().GetConditions() {
		prev[c.GetType()] = c
	}
	written := status
	written.Conditions = slices.Clone(status.Conditions)
	for i, c := range written.Conditions {
		written.Conditions[i].LastTransitionTime = at
		if p := prev[c.Type]; p != nil && p.GetStatus() == c.Status && p.GetLastTransitionTime() != 0 {
			written.Conditions[i].LastTransitionTime = time.Unix(0, p.GetLastTransitionTime()).UTC().Format(time.RFC3339)
		}
	}
	full, _ := json.Marshal(map[string]any{"status": written})
	return full
}

// StatusOf is the status written for obj, whose state is st; alloc is nil
// when the term has none (the ledger could not be read).
func StatusOf(alloc *allocator.Allocator, obj *watcherv1.Object, st poolstate.State) Status {
	var status Status
	if alloc != nil {
		if st.Served {
			v4, v6 := familyStatus(st.IPv4), familyStatus(st.IPv6)
			status.IPv4, status.IPv6 = &v4, &v6
			kept := st.Kept
			status.Kept = &kept
			status.NamespacesAtQuota = namespacesAtQuota(alloc.AtQuota(st.Name), obj.GetIpPool().GetAllocation().GetMaxAddressesPerNamespace() > 0)
		}
		n := st.HeldOutside
		status.HeldOutside = &n
	}
	gen := obj.GetMeta().GetGeneration()
	for _, c := range st.Conditions() {
		status.Conditions = append(status.Conditions, Condition{Type: c.Type, Status: c.Status, Reason: c.Reason, Message: c.Message, ObservedGeneration: gen})
	}
	return status
}

// familyStatus is a family's counts as the IPPool status shows them:
// integers, so that kubectl sorts and prints them as numbers, capped at
// math.MaxInt64 (an IPv6 /64 alone holds 2^64 addresses); totalExact and
// availableExact are the exact decimals, capped or not. Used is capped the
// same way, though Services and reservations never come near 2^63; held,
// at most the addresses ipam tracks, never does.
func familyStatus(f allocator.FamilyUsage) FamilyCounts {
	available := f.Available()
	return FamilyCounts{
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
