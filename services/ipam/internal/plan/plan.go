// Package plan owns ipam's decisions about Services, with no I/O: what was
// already handed out at a term start (Rebuild: ledger, then Service status,
// then Service requests), and what one pass of the controller does with a
// batch of Services (Decide: the ledger edits, the status writes and their
// Events, the Services to release once the ledger says so and the Services
// to decide again), which absent Services are gone (ConfirmGone), which
// suspect ledger entries are overruled (Overrule), and what a reservation
// writes (Reserve, Unreserve). The controller gathers the inputs, calls
// these, and applies the result; poolplan decides the same for the
// IPPools.
package plan

import (
	"cmp"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/ipledger/ipledger/pkg/stream/objkey"
	watcherv1 "github.com/ipledger/ipledger/proto/ipledger/watcher/v1"
	"github.com/ipledger/ipledger/services/ipam/internal/allocator"
	"github.com/ipledger/ipledger/services/ipam/internal/ledger"
	"github.com/ipledger/ipledger/services/ipam/internal/objects"
)

// Batch is what one pass decides from.
type Batch struct {
	// Services are the batch's Services the stream shows, in allocation
	// order (objects.Less).
	Services []*watcherv1.Object
	// Current is each Service's status as far as the term knows, by key
	// (what it wrote, until the stream shows it).
	Current map[string]Status
	// Env finds the Namespaces (their labels select pools) and the
	// Gateways the Services' requests depend on.
	Env objects.Env
	// Gone are the Services the API server confirmed are gone.
	Gone []string
	// Absent are the Services of the batch the stream no longer shows (Gone
	// are those of them that held an address): what another controller's
	// status showed for them is forgotten.
	Absent []string
	// Ledger is what the ledger records for each Service (nil: nothing).
	Ledger ledger.Entries
	// Class is the set of Services served.
	Class objects.Class
	// Now stamps new ledger entries and starts the wait of new pending
	// Services.
	Now time.Time
	// WriteKubeVIPAnnotation: each of our Services' statuses comes with
	// kube-vip.io/loadbalancerIPs naming its addresses, for kube-vip to
	// announce (kubeVIPOf); off, what ipam wrote of it is removed.
	WriteKubeVIPAnnotation bool
}

// entries is what the ledger records for the Service key.
func (b Batch) entries(key string) []ledger.Allocation {
	if b.Ledger == nil {
		return nil
	}
	return b.Ledger.Of(key)
}

// Write is one Service's status write: status and allocated-from-pool
// annotation in one status-subresource patch.
type Write struct {
	Service *watcherv1.Object
	Key     string
	Want    Status
	// Release: clear our IPs and condition, the Service is no longer ours;
	// its addresses are released on the next pass, once the write shows.
	Release bool
	// Event is posted on the Service once the write succeeded, if set.
	Event *Event
}

// Event is a Kubernetes Event on a Service.
type Event struct{ Type, Reason, Message string }

// Pending is a Service of the batch that holds no address after the pass.
type Pending struct {
	Service string
	// Reason is the reason decided for it ("Unknown" when none).
	Reason string
	// Since is when it started to wait, unless the caller knew it already:
	// Now, or the lastTransitionTime of a condition that already said False
	// (a Service that waited before this term began keeps its age).
	Since time.Time
}

// Unfit is a Service that holds an address which no longer fits it: its
// status is cleared first, the address released after.
type Unfit struct {
	Service string
	Reason  string
}

// Plan is what a pass does, in order: commit Change; then release
// Release's Services from the allocator, keep Keep and unreserve Expired;
// mark Reask (and, when anything was released or expired, every pending
// Service) to be decided again; write Writes.
type Plan struct {
	Change  ledger.Change
	Release []string
	// Keep are the addresses of released Services kept for them
	// (allocator.KeepOnRelease); Expired the kept addresses whose grace
	// period ended.
	Keep    []allocator.Reservation
	Expired []allocator.Reservation
	Reask   []string
	Writes  []Write
	// Pending are the Services that hold nothing after the pass; Settled
	// those that are no longer pending (they hold an address, or are not
	// ours).
	Pending []Pending
	Settled []string
	// Failures has the reason of every Service that could not be served.
	Failures []allocator.Reason
	// Allocated counts the addresses handed out anew.
	Allocated int
	Unfit     []Unfit
	// KeptReturned counts the kept addresses their Services took back;
	// KeptRequested those another Service of their namespace requested and
	// took (allocator.TookOnRequest: a rename); KeptTaken those taken by
	// another Service when the pool had nothing else (allocator.Result.Kept).
	KeptReturned, KeptRequested, KeptTaken int
	// keeping are the released Services whose addresses are kept.
	keeping []string
}

// Decide decides a batch. It claims what every Service of the batch
// requests before allocating any of them, and allocates with a; nothing is
// released from a (that waits for the ledger commit).
func Decide(a *allocator.Allocator, b Batch) Plan {
	var p Plan
	for _, key := range b.Gone {
		p.release(b, key, true)
	}
	for _, key := range b.Absent {
		a.SetForeign(key, nil)
	}
	// What other controllers gave out is marked before anything of this
	// batch is claimed or allocated.
	for _, obj := range b.Services {
		if b.Class.Serves(obj) {
			a.SetForeign(objkey.Of(obj), nil)
		} else {
			a.SetForeign(objkey.Of(obj), foreignIPs(a, objkey.Of(obj), objects.StatusIPs(obj)))
		}
	}
	// Claim what every Service of the batch requests before allocating any
	// of them, so an older pending Service is never handed an IP that a
	// younger one in the same batch asks for (Rebuild does the same for all
	// Services at the start of a term).
	asks := make([]ask, len(b.Services))
	for i, obj := range b.Services {
		if !b.Class.Serves(obj) {
			continue
		}
		asks[i].req, asks[i].err = objects.Request(obj, b.Env)
		if asks[i].err == nil {
			_ = a.Claim(asks[i].req) // a refused claim: Allocate says why
		}
	}
	for i, obj := range b.Services {
		if b.Class.Serves(obj) {
			p.decide(a, b, obj, asks[i])
		} else {
			p.notOurs(a, b, obj)
		}
	}
	p.keep(a, b)
	// What no Service of the batch took back and has outlived its grace
	// period is free.
	for _, r := range a.ExpiredKept(b.Now) {
		p.Change.Unreserve = append(p.Change.Unreserve, r.IP)
		p.Expired = append(p.Expired, r)
	}
	return p
}

// release gives the Service's addresses back: from the ledger in this
// commit, from the allocator after it. keep: the Service is gone or no
// longer ours, and what it held is kept for it (keep).
func (p *Plan) release(b Batch, key string, keep bool) {
	p.Change.Release = append(p.Change.Release, b.entries(key)...)
	p.Release = append(p.Release, key)
	if keep {
		p.keeping = append(p.keeping, key)
	}
}

// keep records, in the same commit as their release, the addresses that
// the Services released to keep free (allocator.KeepOnRelease: all at
// once, so that Services sharing an address and gone together keep it).
func (p *Plan) keep(a *allocator.Allocator, b Batch) {
	for _, r := range a.KeepOnRelease(p.keeping, b.Now.UTC().Truncate(time.Second)) {
		uid := ""
		if entries := b.entries(r.ForService); len(entries) > 0 {
			uid = entries[0].Service.UID
		}
		p.Change.Reserve = append(p.Change.Reserve, objects.KeptReservation(r, uid))
		p.Keep = append(p.Keep, r)
	}
}

// notOurs releases what a Service ipam no longer serves holds: its status
// and annotation are cleared first, the ledger entry goes after.
func (p *Plan) notOurs(a *allocator.Allocator, b Batch, obj *watcherv1.Object) {
	key := objkey.Of(obj)
	cur := b.Current[key]
	held := a.Allocations(key)
	p.Settled = append(p.Settled, key)
	switch {
	case cur.ShowsAny(held) || cur.Cond != nil || cur.Pool != "" || cur.KubeVIP != "":
		p.Writes = append(p.Writes, Write{Service: obj, Key: key, Release: true, Want: cur.Without(held)})
	case len(held) > 0 || len(b.entries(key)) > 0:
		p.release(b, key, true)
	}
}

// ask is a Service's request (objects.Request), built once per decision.
type ask struct {
	req allocator.Request
	err error
}

// decide allocates one of our Services and says so in its status.
func (p *Plan) decide(a *allocator.Allocator, b Batch, obj *watcherv1.Object, asked ask) {
	key := objkey.Of(obj)
	cur := b.Current[key]
	held := a.Allocations(key)
	want := Status{Cond: &Condition{ObservedGeneration: obj.GetMeta().GetGeneration()}}
	req, err := asked.req, asked.err
	var res allocator.Result
	if err == nil {
		res, err = a.Allocate(req)
	}
	if allocator.IsUnfit(err) {
		if cur.ShowsAny(held) {
			want = cur.Without(held)
			want.Cond = cur.Cond
			p.Unfit = append(p.Unfit, Unfit{Service: key, Reason: err.Error()})
			p.Writes = append(p.Writes, Write{Service: obj, Key: key, Want: want})
		} else {
			p.release(b, key, false)
			p.Reask = append(p.Reask, key)
		}
		return
	}
	held = a.Allocations(key)
	p.endKept(req, res)
	want.Ingress = ingressOf(held, req.Families)
	want.Pool = poolOf(held)
	want.KubeVIP = b.kubeVIPOf(obj, want.Ingress)
	p.condition(key, req, &want, cur, res, err)
	p.reaskAcross(a, key, cur, want, held)
	if len(held) == 0 {
		p.Pending = append(p.Pending, pendingOf(key, cur, want.Cond, b.Now))
	} else {
		p.Settled = append(p.Settled, key)
	}
	// Commit before status: every held IP must be in the ledger, as this
	// Service (uid, pool, sharing key) holds it now; and nothing else: an
	// entry the term did not obey (a conflict, an overruled entry) goes.
	entries := b.entries(key)
	p.Change.Allocate = append(p.Change.Allocate, ledgerEdits(obj, held, entries, b.Now)...)
	for _, e := range entries {
		if !slices.ContainsFunc(held, func(h allocator.Allocation) bool { return h.IP == e.IP }) {
			p.Change.Release = append(p.Change.Release, e)
		}
	}
	if !cur.Equal(want) {
		ev := eventOf(cur, want)
		if tookKept(req, res) {
			// Said even when the condition's reason stays: the keep of
			// another Service ended.
			ev = &Event{Type: "Normal", Reason: EventTookKeptAddress, Message: want.Cond.Message}
		}
		p.Writes = append(p.Writes, Write{Service: obj, Key: key, Want: want, Event: ev})
	}
}

// EventTookKeptAddress is the reason of the Event on a Service that
// requested, and took, an address kept for another Service of its
// namespace (allocator.TookOnRequest), ending that keep.
const EventTookKeptAddress = "TookKeptAddress"

// tookKept reports whether the grant res of req took an address kept for
// another Service of its namespace because req requested it.
func tookKept(req allocator.Request, res allocator.Result) bool {
	return slices.ContainsFunc(res.Kept, func(r allocator.Reservation) bool { return allocator.TookOnRequest(req, r) })
}

// reaskAcross decides again the holders in other namespaces of the
// addresses key holds when key enters or leaves HeldSharedAcrossNamespaces:
// a share across namespaces is decided from both ends, and the opt-in of the
// second Service ends the first one's hold too, though nothing of the first
// changed. It converges: a holder whose reason stays asks nobody.
func (p *Plan) reaskAcross(a *allocator.Allocator, key string, cur, want Status, held []allocator.Allocation) {
	across := string(allocator.ReasonHeldSharedAcrossNamespaces)
	was := cur.Cond != nil && cur.Cond.Reason == across
	if was == (want.Cond.Reason == across) {
		return
	}
	ns, _, _ := strings.Cut(key, "/")
	for _, h := range held {
		for _, other := range a.Holders(h.IP) {
			if o, _, _ := strings.Cut(other.Service, "/"); o != ns && !slices.Contains(p.Reask, other.Service) {
				p.Reask = append(p.Reask, other.Service)
			}
		}
	}
}

// condition fills the condition of Service key's want from the allocation's
// result.
func (p *Plan) condition(key string, req allocator.Request, want *Status, cur Status, res allocator.Result, err error) {
	c := want.Cond
	switch {
	case err != nil:
		var ae *allocator.Error
		if !errors.As(err, &ae) {
			ae = &allocator.Error{Reason: allocator.ReasonInvalidRequest, Message: err.Error()}
		}
		c.Status, c.Reason, c.Message = "False", string(ae.Reason), ae.Message
		p.Failures = append(p.Failures, ae.Reason)
	case res.Outside != "":
		// The pool no longer offers what the Service holds: it keeps it,
		// and says so (never re-allocated behind the operator's back).
		c.Status, c.Reason = "True", string(allocator.ReasonHeldOutsidePool)
		c.Message = fmt.Sprintf("Keeps %s, held outside its pool: %s. ipam never moves an address a Service holds; "+
			"to move it, request an address (%s) or name a pool (%s)", addrs(res.IPs), res.Outside, allocator.AnnotationLoadBalancerIPs, allocator.AnnotationAddressPool)
		if want.Pool == "" {
			want.Pool = cur.Pool
		}
	case len(res.Across) > 0:
		// A share across namespaces from before the rule: kept, and said.
		c.Status, c.Reason = "True", string(allocator.ReasonHeldSharedAcrossNamespaces)
		c.Message = fmt.Sprintf("Keeps %s from pool %s, but %s", addrs(res.IPs), res.Pool, allocator.AcrossMessage(res.Across))
	default:
		c.Status, c.Reason = "True", string(allocator.ReasonAllocated)
		c.Message = fmt.Sprintf("Allocated %s from pool %s", addrs(res.IPs), res.Pool)
		switch {
		case len(res.Kept) > 0:
			c.Message += keptMessage(req, res.Kept)
		case !res.New && cur.Cond != nil && strings.HasPrefix(cur.Cond.Message, c.Message+"; "):
			// How the addresses came (keptMessage) stays said while the
			// Service holds them.
			c.Message = cur.Cond.Message
		}
		if res.New {
			p.Allocated++
		}
	}
}

// endKept records in the ledger change that the grant of res ended the kept
// reservations it took, and counts them.
func (p *Plan) endKept(req allocator.Request, res allocator.Result) {
	for _, r := range res.Kept {
		p.Change.Unreserve = append(p.Change.Unreserve, r.IP)
		switch {
		case returned(req.Service, r):
			p.KeptReturned++
		case allocator.TookOnRequest(req, r):
			p.KeptRequested++
		default:
			p.KeptTaken++
		}
	}
}

// returned reports whether the kept reservation r went back to service (or
// to a Service of its namespace under its sharing key), rather than to
// another Service because its pool had nothing else.
func returned(service string, r allocator.Reservation) bool {
	ns, _, _ := strings.Cut(service, "/")
	rns, _, _ := strings.Cut(r.ForService, "/")
	return r.ForService == service || r.SharingKey != "" && rns == ns
}

// keptMessage says, after "Allocated …", what kept addresses the grant of
// req took: back for its Service; requested, from another Service of its
// namespace (a rename); or — visibly — from a Service that released it,
// because the pool had nothing else. Another namespace's Service is not
// named.
func keptMessage(req allocator.Request, kept []allocator.Reservation) string {
	service := req.Service
	var back, requested, taken []string
	for _, r := range kept {
		switch {
		case returned(service, r):
			back = append(back, r.IP.String())
		case allocator.TookOnRequest(req, r):
			requested = append(requested, fmt.Sprintf("; took the address kept for %s (%s, released at %s): it requested it, and is of the same namespace; the keep ended",
				allocator.ServiceNames(service, r.ForService), r.IP, r.CreatedAt.UTC().Format(time.RFC3339)))
		default:
			taken = append(taken, fmt.Sprintf("%s (kept for %s since %s)", r.IP, allocator.ServiceNames(service, r.ForService), r.CreatedAt.UTC().Format(time.RFC3339)))
		}
	}
	var out string
	if len(back) > 0 {
		out += fmt.Sprintf("; %s kept for it since its release, given back", strings.Join(back, ", "))
	}
	out += strings.Join(requested, "")
	if len(taken) > 0 {
		out += fmt.Sprintf("; took %s, which was kept for the Service that released it: the pool had no other free address", strings.Join(taken, ", "))
	}
	return out
}

// eventOf is the Event a status write posts: one when the condition's
// reason or status or the ingress changes, none for a message alone.
func eventOf(cur, want Status) *Event {
	// The same addresses in another order (an upgrade from ipam before
	// 0.3.0, which listed IPv4 first) are not news.
	sameIngress := slices.Equal(sortedCopy(cur.Ingress), sortedCopy(want.Ingress))
	if cur.Cond != nil && cur.Cond.Reason == want.Cond.Reason && cur.Cond.Status == want.Cond.Status && sameIngress {
		return nil
	}
	typ := "Normal"
	if want.Cond.Status != "True" || want.Cond.Reason != string(allocator.ReasonAllocated) {
		typ = "Warning"
	}
	return &Event{Type: typ, Reason: want.Cond.Reason, Message: want.Cond.Message}
}

func sortedCopy(ss []string) []string {
	out := slices.Clone(ss)
	slices.Sort(out)
	return out
}

// pendingOf is the pending record of a Service that holds no address after
// the pass.
func pendingOf(key string, cur Status, decided *Condition, now time.Time) Pending {
	p := Pending{Service: key, Since: now, Reason: "Unknown"}
	if decided != nil && decided.Reason != "" {
		p.Reason = decided.Reason
	}
	if c := cur.Cond; c != nil && c.Status == "False" && c.LastTransition.Unix() > 0 && c.LastTransition.Before(now) {
		p.Since = c.LastTransition
	}
	return p
}

// ledgerEdits returns the ledger entries to write so that the ledger says
// exactly what the Service holds; entries is what it records for it now.
func ledgerEdits(obj *watcherv1.Object, held []allocator.Allocation, entries []ledger.Allocation, now time.Time) []ledger.Allocation {
	var out []ledger.Allocation
	ref := objects.Ref(obj)
	for _, h := range held {
		i := slices.IndexFunc(entries, func(a ledger.Allocation) bool { return a.IP == h.IP })
		// The ledger records the pool an address was handed out from, not
		// the one a later pool edit put it in.
		pool := ledgerPool(h)
		if i >= 0 && pool == allocator.NoPool {
			pool = entries[i].Pool
		}
		if i >= 0 {
			if e := entries[i]; e.Pool == pool && e.Service.UID == ref.UID && e.SharingKey == h.SharingKey {
				continue
			}
		}
		out = append(out, ledger.Allocation{IP: h.IP, Pool: pool, Service: ref, SharingKey: h.SharingKey, AllocatedAt: now.UTC().Truncate(time.Second)})
	}
	return out
}

// ledgerPool is the pool the ledger records for a held address: the pool it
// was handed out from, else the pool containing it, else NoPool.
func ledgerPool(h allocator.Allocation) string {
	switch {
	case h.From != "":
		return h.From
	case h.Pool != "":
		return h.Pool
	}
	return allocator.NoPool
}

// ingressOf is the ingress list of what a Service holds: its first family
// (spec.ipFamilies[0], the primary, as spec.clusterIPs orders them) first.
// held is IPv4 first; families may be empty (an invalid request).
func ingressOf(held []allocator.Allocation, families []allocator.Family) []string {
	ordered := slices.Clone(held)
	if len(families) > 0 && families[0] == allocator.IPv6 {
		slices.SortStableFunc(ordered, func(x, y allocator.Allocation) int {
			return cmp.Compare(familyRank(y.IP), familyRank(x.IP))
		})
	}
	var out []string
	for _, h := range ordered {
		out = append(out, h.IP.String())
	}
	return out
}

// familyRank is 1 for an IPv6 address, 0 for an IPv4 one.
func familyRank(ip netip.Addr) int {
	if ip.Is4() {
		return 0
	}
	return 1
}

// poolOf is the pool the Service's addresses were handed out from
// (ipledger.io/allocated-from-pool), "" when unknown.
func poolOf(held []allocator.Allocation) string {
	for _, h := range held {
		if p := ledgerPool(h); p != allocator.NoPool {
			return p
		}
	}
	return ""
}

// AfterCommit is what follows a plan once its ledger change is committed,
// the same on the leader and in a preview: the addresses p released leave
// the allocator (and their Services stop being pending), and it returns
// the Services to decide again — p.Reask, and every pending Service when
// an address was freed, since it may take it now.
func AfterCommit[V any](a *allocator.Allocator, p Plan, pending map[string]V) (reask []string) {
	reask = slices.Clone(p.Reask)
	for _, key := range p.Release {
		a.Release(key)
		delete(pending, key)
	}
	for _, r := range p.Keep {
		_ = a.Reserve(r) // what it released alone is free: this cannot fail
	}
	for _, r := range p.Expired {
		a.Unreserve(r.IP)
	}
	if len(p.Release) > 0 || len(p.Expired) > 0 {
		for k := range pending {
			reask = append(reask, k)
		}
	}
	return reask
}

// DecideAgain reports whether the Service of w is decided again once w is
// written over a status showing cur: w releases it, or shows fewer
// addresses, whose release waits for the status that no longer shows them.
func (w Write) DecideAgain(cur Status) bool {
	return w.Release || len(w.Want.Ingress) < len(cur.Ingress)
}
