// Package preview says what an IPPool change would do before it is applied.
// It decides with the leader's own code, on a copy of the state a replica
// reads: the pools parsed by objects.PoolSet, the allocator rebuilt by
// plan.Rebuild, the change applied by plan.SetPools, and every Service
// decided by plan.Decide pass after pass until nothing changes, as the
// leader's worker does. Then it compares each Service's status and each
// pool's usage before and after. It writes nothing and has no I/O.
package preview

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/ipledger/ipledger/pkg/stream/objkey"
	ipamv1 "github.com/ipledger/ipledger/proto/ipledger/ipam/v1"
	watcherv1 "github.com/ipledger/ipledger/proto/ipledger/watcher/v1"
	"github.com/ipledger/ipledger/services/ipam/internal/allocator"
	"github.com/ipledger/ipledger/services/ipam/internal/ledger"
	"github.com/ipledger/ipledger/services/ipam/internal/objects"
	"github.com/ipledger/ipledger/services/ipam/internal/plan"
	"github.com/ipledger/ipledger/services/ipam/internal/poolstate"
)

// Change is one IPPool change: a manifest applied, or a pool deleted.
type Change struct {
	// Name of the pool.
	Name string
	// Pool is the pool as the manifest gives it; nil for a delete.
	Pool *watcherv1.Object
	// Delete previews deleting the pool.
	Delete bool
	// Problems are what the API server would refuse in the manifest; a
	// change with problems would not take effect.
	Problems []string
}

// Inputs is the state a replica reads, which the leader decides from too.
// Nothing in it is changed.
type Inputs struct {
	Ledger   ledger.State
	Pools    []*watcherv1.Object // the streamed IPPools
	Services []*watcherv1.Object
	// Env finds the Namespaces and Gateways the requests depend on.
	Env objects.Env
	// PoolSet remembers each pool's last valid spec; Run parses with a
	// clone of it.
	PoolSet *objects.PoolSet
	Class   objects.Class
	// Now is when the change would be made (a new pool's creation time).
	Now time.Time
	// Overruled are ledger entries not to obey (plan.Inputs.Overruled):
	// what a term start confirms of the Suspects of a first Rebuild. A
	// preview from the stream leaves it empty.
	Overruled []ledger.Allocation
	// Gone are Services the ledger names that the API server confirmed are
	// gone: their entries are released in the first pass, as a term start
	// releases them. A preview from the stream leaves it empty.
	Gone []string
}

// ErrNoSuchPool: a delete names a pool that does not exist.
var ErrNoSuchPool = errors.New("no such IPPool")

// The changes a preview names (PreviewPoolResponse.change).
const (
	Create   = "Create"
	Update   = "Update"
	Delete   = "Delete"
	NoChange = "NoChange"
)

// The states of a pool (PoolPreview.state_before/after).
const (
	Absent      = "Absent"
	Serving     = "Serving"
	Conflicting = "Conflicting"
	Terminating = "Terminating"
	Invalid     = "Invalid"
)

// maxPasses bounds the passes a preview decides. A pool change settles in
// one; a Service whose held address no longer fits takes three (its status
// cleared, its address released, a new one given).
const maxPasses = 8

// Run previews c.
func Run(in Inputs, c Change) (*ipamv1.PreviewPoolResponse, error) {
	afterObjs, change, err := apply(in.Pools, c, in.Now)
	if err != nil {
		return nil, err
	}
	resp := &ipamv1.PreviewPoolResponse{Pool: c.Name, Change: change}
	if len(c.Problems) > 0 {
		resp.ValidationErrors = slices.Clone(c.Problems)
		resp.Summary = []string{fmt.Sprintf("The API server would refuse this IPPool (%d errors); nothing would change.", len(c.Problems))}
		return resp, nil
	}

	ps := in.PoolSet.Clone()
	before, invalidBefore := ps.Parse(in.Pools)
	a := rebuild(in, before).Alloc
	poolsBefore := poolStates(a, in.Pools, invalidBefore)

	after, invalidAfter := ps.Parse(afterObjs)
	plan.SetPools(a, after, in.Services, in.Env, in.Class)
	statuses, _, _ := settle(a, in)
	poolsAfter := poolStates(a, afterObjs, invalidAfter)

	services := slices.Clone(in.Services)
	slices.SortFunc(services, objects.Less)
	for _, obj := range services {
		sp, changed := servicePreview(obj, statuses[objkey.Of(obj)])
		switch {
		case !changed:
		case len(sp.IpsBefore) == 0 && len(sp.IpsAfter) > 0:
			resp.Allocated = append(resp.Allocated, sp)
		case sp.ReasonAfter == string(allocator.ReasonHeldOutsidePool) && sp.ReasonBefore != sp.ReasonAfter:
			resp.HeldOutside = append(resp.HeldOutside, sp)
		default:
			resp.OtherChanges = append(resp.OtherChanges, sp)
		}
	}
	names := slices.Sorted(maps.Keys(poolsBefore))
	for n := range poolsAfter {
		if _, ok := poolsBefore[n]; !ok {
			names = append(names, n)
		}
	}
	slices.Sort(names)
	for _, n := range names {
		pb, pa := poolsBefore[n], poolsAfter[n]
		if pb.state == "" {
			pb = absent()
		}
		if pa.state == "" {
			pa = absent()
		}
		if n != c.Name && pb == pa {
			continue
		}
		resp.Pools = append(resp.Pools, &ipamv1.PoolPreview{
			Name: n, StateBefore: pb.state, StateAfter: pa.state,
			Ipv4Before: pb.v4.proto(), Ipv4After: pa.v4.proto(), Ipv6Before: pb.v6.proto(), Ipv6After: pa.v6.proto(),
			HeldOutsideBefore: int64(pb.heldOutside), HeldOutsideAfter: int64(pa.heldOutside), ConflictAfter: pa.conflict,
			KeptBefore: int64(pb.kept), KeptAfter: int64(pa.kept),
		})
	}
	resp.Summary = summary(resp, a)
	return resp, nil
}

// Outcome is what a new term would make of in, the world as it stands.
type Outcome struct {
	// Statuses is each Service's status as the term would write it, by
	// key; a Service it would not write keeps its status as it is.
	Statuses map[string]plan.Status
	// Ledger is the ledger's allocations by Service key after the term's
	// passes.
	Ledger map[string][]ledger.Allocation
	// Unfit says, by Service key, why an address a Service held no longer
	// fit it (plan.Unfit): its status cleared, the address released.
	Unfit map[string]string
	// Conflicts are what the term start would report (IPConflict Events).
	Conflicts []plan.Conflict
	// Suspects are the ledger entries the statuses contradict
	// (plan.Rebuilt.Suspects); a term start confirms them from the API
	// server and rebuilds with them Overruled.
	Suspects []plan.Suspect
}

// Decide says what a new leader would do at the start of its term with in,
// pools as they are: the same Rebuild, then every Service decided pass after
// pass until nothing changes, as Run decides after a pool change. Nothing
// of in is changed; in.PoolSet is cloned.
func Decide(in Inputs) Outcome {
	pools, _ := in.PoolSet.Clone().Parse(in.Pools)
	r := rebuild(in, pools)
	statuses, byService, unfit := settle(r.Alloc, in)
	return Outcome{Statuses: statuses, Ledger: byService, Unfit: unfit, Conflicts: r.Conflicts, Suspects: r.Suspects}
}

// rebuild is the term start's Rebuild of in.
func rebuild(in Inputs, pools []*allocator.Pool) plan.Rebuilt {
	return plan.Rebuild(plan.Inputs{Ledger: in.Ledger, Pools: pools, Services: slices.Values(in.Services), Env: in.Env,
		LBClass: in.Class.Name, RequireLBClass: in.Class.Required, Overruled: in.Overruled})
}

// apply returns the IPPools as the API server would store them after c, and
// the kind of change.
func apply(pools []*watcherv1.Object, c Change, now time.Time) ([]*watcherv1.Object, string, error) {
	i := slices.IndexFunc(pools, func(o *watcherv1.Object) bool { return o.GetMeta().GetName() == c.Name })
	out := slices.Clone(pools)
	switch {
	case c.Delete && i < 0:
		return nil, "", fmt.Errorf("%w: IPPool %q does not exist; `kubectl get ippools` lists them", ErrNoSuchPool, c.Name)
	case c.Delete:
		old := pools[i]
		switch {
		case old.GetMeta().GetDeletionTimestamp() != 0:
			// Already being deleted.
		case len(old.GetMeta().GetFinalizers()) == 0:
			out = slices.Delete(out, i, i+1)
		default:
			// Kept, Terminating, by ipam's finalizer until no Service holds
			// its addresses.
			p := proto.Clone(old).(*watcherv1.Object)
			p.Meta.DeletionTimestamp = now.UnixNano()
			out[i] = p
		}
		return out, Delete, nil
	case c.Pool == nil:
		// Refused by validation (not even an IPPool's types): nothing to apply.
		if i < 0 {
			return out, Create, nil
		}
		return out, Update, nil
	case i < 0:
		p := proto.Clone(c.Pool).(*watcherv1.Object)
		// Younger than every pool that exists, as it will be once created:
		// an overlap makes it, not them, Conflicting.
		created := now.Truncate(time.Second).UnixNano()
		for _, o := range pools {
			created = max(created, o.GetMeta().GetCreationTimestamp()+int64(time.Second))
		}
		p.Meta = &watcherv1.ObjectMeta{Name: c.Name, Uid: "preview-" + c.Name, Generation: 1, CreationTimestamp: created,
			Labels: p.GetMeta().GetLabels(), Annotations: p.GetMeta().GetAnnotations()}
		return append(out, p), Create, nil
	default:
		old := pools[i]
		p := proto.Clone(old).(*watcherv1.Object)
		spec := proto.Clone(c.Pool.GetIpPool()).(*watcherv1.IPPool)
		spec.Conditions = old.GetIpPool().GetConditions()
		if proto.Equal(spec, old.GetIpPool()) {
			return out, NoChange, nil
		}
		p.Body = &watcherv1.Object_IpPool{IpPool: spec}
		p.Meta.Generation++
		out[i] = p
		return out, Update, nil
	}
}

// settle decides every Service, pass after pass, as the leader's worker
// does after a pool change (every Service marked; Services whose status
// write removes addresses, or that were released, decided again), and
// returns each Service's status as it would be written, by key, and the
// ledger's allocations by Service key after the passes, and why each
// Service whose held address no longer fits lost it. The first pass
// also releases what in.Gone held, as a term start's first pass does.
func settle(a *allocator.Allocator, in Inputs) (map[string]plan.Status, map[string][]ledger.Allocation, map[string]string) {
	todo := slices.Clone(in.Services)
	slices.SortFunc(todo, objects.Less)
	byKey := map[string]*watcherv1.Object{}
	current := map[string]plan.Status{}
	for _, s := range todo {
		k := objkey.Of(s)
		byKey[k], current[k] = s, plan.StatusOf(s)
	}
	// The ledger as stored, overruled entries included: the passes release
	// them, as the leader's do.
	ledgerBySvc := ledger.IndexByService(in.Ledger.Allocations)
	pending := map[string]bool{}
	var unfit map[string]string
	gone := in.Gone
	for pass := 0; (len(todo) > 0 || len(gone) > 0) && pass < maxPasses; pass++ {
		p := plan.Decide(a, plan.Batch{Services: todo, Current: current, Env: in.Env, Ledger: ledgerBySvc, Class: in.Class, Now: in.Now,
			Gone: gone, Absent: gone})
		gone = nil
		ledgerBySvc.Apply(p.Change)
		for _, u := range p.Unfit {
			if unfit == nil {
				unfit = map[string]string{}
			}
			unfit[u.Service] = u.Reason
		}
		for _, k := range p.Settled {
			delete(pending, k)
		}
		for _, pd := range p.Pending {
			pending[pd.Service] = true
		}
		next := map[string]bool{}
		for _, k := range plan.AfterCommit(a, p, pending) {
			next[k] = true
		}
		for _, w := range p.Writes {
			if w.DecideAgain(current[w.Key]) {
				next[w.Key] = true
			}
			current[w.Key] = w.Want
		}
		todo = todo[:0:0]
		for k := range next {
			if obj := byKey[k]; obj != nil {
				todo = append(todo, obj)
			}
		}
		slices.SortFunc(todo, objects.Less)
	}
	return current, ledgerBySvc, unfit
}

// servicePreview compares a Service's status now with after; changed is
// false when its addresses, condition reason and pool stay the same.
func servicePreview(obj *watcherv1.Object, after plan.Status) (*ipamv1.ServicePreview, bool) {
	before := plan.StatusOf(obj)
	sp := &ipamv1.ServicePreview{
		Service:   &ipamv1.ServiceRef{Namespace: obj.GetMeta().GetNamespace(), Name: obj.GetMeta().GetName(), Uid: obj.GetMeta().GetUid()},
		IpsBefore: before.Ingress, IpsAfter: after.Ingress,
		PoolAfter: after.Pool,
	}
	if before.Cond != nil {
		sp.ReasonBefore = before.Cond.Reason
	}
	if after.Cond != nil {
		sp.ReasonAfter, sp.MessageAfter = after.Cond.Reason, after.Cond.Message
	}
	changed := !slices.Equal(before.Ingress, after.Ingress) || sp.ReasonBefore != sp.ReasonAfter || before.Pool != after.Pool
	return sp, changed
}

// poolState is what a preview shows of one pool.
type poolState struct {
	state       string
	v4, v6      familyUsage
	heldOutside int
	kept        int // addresses kept for Services that released them
	conflict    string
}

// familyUsage is a family's counts as PreviewPool answers them
// (poolstate.FamilyProto), comparable.
type familyUsage struct{ total, used, held, available string }

func familyOf(p *ipamv1.FamilyUsage) familyUsage {
	return familyUsage{p.GetTotal(), p.GetUsed(), p.GetHeld(), p.GetAvailable()}
}

func (f familyUsage) proto() *ipamv1.FamilyUsage {
	return &ipamv1.FamilyUsage{Total: f.total, Used: f.used, Held: f.held, Available: f.available}
}

func absent() poolState {
	zero := familyOf(poolstate.ZeroProto())
	return poolState{state: Absent, v4: zero, v6: zero}
}

// poolStates is each pool of objs as a holds it (poolstate.Of). A
// Terminating pool from which no Service holds an address is Absent: ipam
// lets it go at once.
func poolStates(a *allocator.Allocator, objs []*watcherv1.Object, invalid map[string]error) map[string]poolState {
	out := map[string]poolState{}
	for i, ps := range poolstate.Of(poolstate.Inputs{Alloc: a, Invalid: invalid, Holders: poolstate.Holders(a, objs)}, objs) {
		st := poolState{heldOutside: ps.HeldOutside, kept: ps.Kept,
			v4: familyOf(poolstate.FamilyProto(ps.IPv4)), v6: familyOf(poolstate.FamilyProto(ps.IPv6))}
		switch ps.Phase {
		case poolstate.Invalid:
			st.state = Invalid
		case poolstate.Terminating:
			st.state = Terminating
			others := slices.ContainsFunc(objs[i].GetMeta().GetFinalizers(), func(f string) bool { return f != objects.PoolFinalizer })
			if ps.Holders == 0 && !others {
				st = absent()
			}
		case poolstate.Conflicting:
			st.state, st.conflict = Conflicting, ps.Conflict.Message
		default: // Serving, ServingLastValidSpec; never LedgerUnreadable (no Corrupt)
			st.state = Serving
		}
		out[ps.Name] = st
	}
	return out
}

// summary says what the preview found, one line per fact.
func summary(resp *ipamv1.PreviewPoolResponse, a *allocator.Allocator) []string {
	var out []string
	for _, p := range resp.Pools {
		switch {
		case p.StateBefore == p.StateAfter && p.StateAfter != Conflicting:
		case p.StateAfter == Conflicting:
			out = append(out, fmt.Sprintf("Pool %s would be Conflicting and serve nothing: %s.", p.Name, p.ConflictAfter))
		case p.StateAfter == Terminating:
			out = append(out, fmt.Sprintf("Pool %s would stay Terminating, handing out nothing new, while %s (finalizer %s).",
				p.Name, plural(a.ServicesFrom()[p.Name], "1 Service holds its addresses", "%d Services hold its addresses"), objects.PoolFinalizer))
		case p.StateAfter == Absent && p.StateBefore != Absent:
			out = append(out, fmt.Sprintf("Pool %s would be removed: no Service holds its addresses.", p.Name))
		default:
			out = append(out, fmt.Sprintf("Pool %s would go from %s to %s.", p.Name, p.StateBefore, p.StateAfter))
		}
	}
	if n := len(resp.Allocated); n > 0 {
		out = append(out, plural(n, "1 pending Service would get an address", "%d pending Services would get addresses")+": "+listServices(resp.Allocated)+".")
	}
	if n := len(resp.HeldOutside); n > 0 {
		out = append(out, plural(n, "1 Service would keep its addresses outside its pool", "%d Services would keep their addresses outside their pool")+
			" (HeldOutsidePool; nothing is moved): "+listServices(resp.HeldOutside)+".")
	}
	if n := len(resp.OtherChanges); n > 0 {
		out = append(out, plural(n, "1 other Service would change condition", "%d other Services would change condition")+": "+listServices(resp.OtherChanges)+".")
	}
	for _, p := range resp.Pools {
		for _, f := range []struct {
			name          string
			before, after *ipamv1.FamilyUsage
		}{{"IPv4", p.Ipv4Before, p.Ipv4After}, {"IPv6", p.Ipv6Before, p.Ipv6After}} {
			if f.before.Used != f.after.Used || f.before.Total != f.after.Total {
				out = append(out, fmt.Sprintf("Pool %s %s: %s of %s used, after %s of %s.", p.Name, f.name, f.before.Used, f.before.Total, f.after.Used, f.after.Total))
			}
		}
		if p.HeldOutsideBefore != p.HeldOutsideAfter {
			out = append(out, fmt.Sprintf("Pool %s: %d addresses held outside it, after %d.", p.Name, p.HeldOutsideBefore, p.HeldOutsideAfter))
		}
		if p.KeptBefore != p.KeptAfter {
			out = append(out, fmt.Sprintf("Pool %s: %s kept for Services that released them, after %d.",
				p.Name, plural(int(p.KeptBefore), "1 address", "%d addresses"), p.KeptAfter))
		}
	}
	if len(out) == 0 {
		out = append(out, "Nothing would change: no Service, no pool state and no usage.")
	}
	return out
}

// plural is one when n is 1, else many with n in place of its %d.
func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return fmt.Sprintf(many, n)
}

// listServices names Services as namespace/name and the addresses they
// would show, the first ten only.
func listServices(ss []*ipamv1.ServicePreview) string {
	const limit = 10
	var parts []string
	for i, s := range ss {
		if i == limit {
			parts = append(parts, fmt.Sprintf("and %d more", len(ss)-limit))
			break
		}
		p := s.GetService().GetNamespace() + "/" + s.GetService().GetName()
		switch {
		case len(s.IpsAfter) > 0:
			p += " " + strings.Join(s.IpsAfter, ",")
		case s.ReasonAfter != "":
			p += " " + s.ReasonAfter
		}
		parts = append(parts, p)
	}
	return strings.Join(parts, "; ")
}
