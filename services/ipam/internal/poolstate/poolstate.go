// Package poolstate computes the state of each IPPool from the allocator
// and the pools as streamed: its address counts by family, the addresses
// Services keep that it no longer offers, the addresses it keeps for
// Services that released them, whether it overlaps an older pool,
// and why it serves or does not (its Ready, Conflicting and Invalid
// conditions). It is the one computation behind the IPPool status the
// leader writes (controller), the pool usage ListPools answers (server) and
// a pool's state before and after a preview (preview). It is pure: it reads
// the allocator, changes nothing and does no I/O.
package poolstate

import (
	"fmt"
	"math/big"
	"strconv"

	ipamv1 "github.com/ipledger/ipledger/proto/ipledger/ipam/v1"
	watcherv1 "github.com/ipledger/ipledger/proto/ipledger/watcher/v1"
	"github.com/ipledger/ipledger/services/ipam/internal/allocator"
	"github.com/ipledger/ipledger/services/ipam/internal/objects"
)

// Phase is why a pool serves or does not: the reason of its Ready
// condition. The first that applies, in the order below from Invalid.
type Phase string

const (
	// Invalid: the pool's spec is invalid and the allocator serves no
	// earlier valid one; it serves nothing.
	Invalid Phase = "Invalid"
	// LedgerUnreadable: the ledger cannot be read; nothing is served.
	LedgerUnreadable Phase = "LedgerUnreadable"
	// Terminating: the pool is being deleted and hands out nothing new.
	Terminating Phase = "Terminating"
	// Conflicting: the pool overlaps an older one and serves nothing.
	Conflicting Phase = "Conflicting"
	// ServingLastValidSpec: the current spec is invalid; the last valid
	// one serves.
	ServingLastValidSpec Phase = "ServingLastValidSpec"
	// Serving: the pool serves Services.
	Serving Phase = "Serving"
)

// Ready reports whether a pool in phase p is Ready.
func (p Phase) Ready() bool { return p == Serving || p == ServingLastValidSpec }

// Inputs are what the states are computed from. Nothing in them is changed.
type Inputs struct {
	// Alloc holds the pools it was given; nil when there is none (the
	// leader could not read the ledger): then no pool is served, and none
	// conflicts.
	Alloc *allocator.Allocator
	// Invalid is, by pool, why its current spec is refused (the invalid
	// map of objects.PoolSet.Parse).
	Invalid map[string]error
	// Corrupt is why the ledger cannot be read; nil when it can.
	Corrupt error
	// Holders counts, by pool, the Services holding its addresses (see
	// Holders); only a Terminating pool's state reads it. Nil counts none.
	Holders map[string]int
}

// State is one pool's state.
type State struct {
	Name  string
	Phase Phase
	// Served: the allocator serves the pool (its last valid spec, or a
	// Conflicting one, which uses nothing). IPv4 and IPv6 are then its
	// counts; otherwise they are zero.
	Served     bool
	IPv4, IPv6 allocator.FamilyUsage
	// HeldOutside counts the addresses Services keep that came from the
	// pool and that it no longer offers.
	HeldOutside int
	// Kept counts the pool's addresses kept for Services that released
	// them (allocator.KeptCount); Used counts them too.
	Kept int
	// Conflicting: the pool overlaps an older one, as Conflict says; the
	// Phase may be another that comes first (Terminating).
	Conflicting bool
	Conflict    allocator.Conflict
	// Invalid is why the pool's current spec is refused; nil when valid.
	Invalid error
	// Corrupt is why the ledger cannot be read (Inputs.Corrupt).
	Corrupt error
	// Holders counts the Services holding its addresses (Inputs.Holders).
	Holders int
}

// Of is the state of each pool of objs, in their order.
func Of(in Inputs, objs []*watcherv1.Object) []State {
	var held, kept map[string]int
	if in.Alloc != nil {
		held, kept = in.Alloc.HeldOutside(), in.Alloc.KeptCount()
	}
	out := make([]State, 0, len(objs))
	for _, obj := range objs {
		out = append(out, of(in, held, kept, obj))
	}
	return out
}

func of(in Inputs, held, kept map[string]int, obj *watcherv1.Object) State {
	name := obj.GetMeta().GetName()
	st := State{Name: name, HeldOutside: held[name], Kept: kept[name], Invalid: in.Invalid[name], Corrupt: in.Corrupt, Holders: in.Holders[name],
		IPv4: zero(), IPv6: zero()}
	if in.Alloc != nil {
		var u allocator.Usage
		if u, st.Served = in.Alloc.Usage(name); st.Served {
			st.IPv4, st.IPv6 = u.IPv4, u.IPv6
		}
		st.Conflict, st.Conflicting = in.Alloc.Conflicting(name)
	}
	_, invalid := in.Invalid[name]
	switch {
	case invalid && !st.Served:
		st.Phase = Invalid
	case in.Corrupt != nil:
		st.Phase = LedgerUnreadable
	case obj.GetMeta().GetDeletionTimestamp() != 0:
		st.Phase = Terminating
	case st.Conflicting:
		st.Phase = Conflicting
	case invalid:
		st.Phase = ServingLastValidSpec
	default:
		st.Phase = Serving
	}
	return st
}

func zero() allocator.FamilyUsage {
	return allocator.FamilyUsage{Total: new(big.Int), Used: new(big.Int)}
}

// FamilyProto is a family's counts as the gRPC API answers them (ListPools,
// PreviewPool): exact decimals. A pool not served counts zero.
func FamilyProto(f allocator.FamilyUsage) *ipamv1.FamilyUsage {
	return &ipamv1.FamilyUsage{Total: f.Total.String(), Used: f.Used.String(), Held: strconv.FormatInt(f.Held, 10), Available: f.Available().String()}
}

// ZeroProto is FamilyProto of a family with no address.
func ZeroProto() *ipamv1.FamilyUsage { return FamilyProto(zero()) }

// Holders is a.ServicesFrom() when some pool of objs is being deleted, and
// nil otherwise or without an allocator: only a Terminating pool's state
// counts its holders, and counting scans every held address.
func Holders(a *allocator.Allocator, objs []*watcherv1.Object) map[string]int {
	if a == nil {
		return nil
	}
	for _, p := range objs {
		if p.GetMeta().GetDeletionTimestamp() != 0 {
			return a.ServicesFrom()
		}
	}
	return nil
}

// Condition is one IPPool condition, without the generation it observes
// and its transition time, which the writer adds.
type Condition struct {
	Type, Status, Reason, Message string
}

// Conditions are the pool's Ready, Conflicting and Invalid conditions.
func (s State) Conditions() []Condition {
	cond := func(typ string, ok bool, reason, msg string) Condition {
		status := "False"
		if ok {
			status = "True"
		}
		return Condition{Type: typ, Status: status, Reason: reason, Message: msg}
	}
	if s.Phase == Invalid {
		return []Condition{
			cond("Ready", false, string(Invalid), "The pool serves nothing: "+s.Invalid.Error()+". Services holding its addresses keep them"),
			cond("Conflicting", false, "NoOverlap", "The pool overlaps no other pool"),
			cond("Invalid", true, "Invalid", s.Invalid.Error()),
		}
	}
	var msg string
	switch s.Phase {
	case LedgerUnreadable:
		msg = s.Corrupt.Error()
	case Terminating:
		msg = fmt.Sprintf("The pool is being deleted and hands out no new address; %d Services hold its addresses and keep them. "+
			"It is removed when the last of them is released (finalizer %s)", s.Holders, objects.PoolFinalizer)
	case Conflicting:
		msg = s.Conflict.Message
	case ServingLastValidSpec:
		msg = "The pool serves its last valid spec; the current one does not take effect: " + s.Invalid.Error()
	default:
		msg = "The pool serves Services"
	}
	conds := []Condition{cond("Ready", s.Phase.Ready(), string(s.Phase), msg)}
	if s.Conflicting {
		conds = append(conds, cond("Conflicting", true, "Overlap", s.Conflict.Message))
	} else {
		conds = append(conds, cond("Conflicting", false, "NoOverlap", "The pool overlaps no older pool"))
	}
	if s.Invalid != nil {
		conds = append(conds, cond("Invalid", true, "Invalid", s.Invalid.Error()))
	} else {
		conds = append(conds, cond("Invalid", false, "Valid", "The pool's spec is valid"))
	}
	return conds
}
