package plan

import (
	"fmt"
	"iter"
	"net/netip"
	"slices"
	"strings"

	"github.com/ipledger/ipledger/pkg/stream/objkey"
	watcherv1 "github.com/ipledger/ipledger/proto/ipledger/watcher/v1"
	"github.com/ipledger/ipledger/services/ipam/internal/allocator"
	"github.com/ipledger/ipledger/services/ipam/internal/ledger"
	"github.com/ipledger/ipledger/services/ipam/internal/objects"
)

// Inputs is the world a term (or a gRPC read) rebuilds the allocator from.
type Inputs struct {
	Ledger ledger.State
	Pools  []*allocator.Pool
	// Services yields every Service (stream.Store.All decodes them one at
	// a time; slices.Values for a slice). Rebuild keeps only what it needs
	// of each, never the Services themselves.
	Services iter.Seq[*watcherv1.Object]
	// ServiceCount is about how many Services yields (stream.Store.Len), 0
	// when unknown: room is made for them at once.
	ServiceCount int
	// Env finds the Namespaces (their labels select pools) and the
	// Gateways the Services' requests depend on.
	Env     objects.Env
	LBClass string
	// RequireLBClass: class-less Services are not ours (objects.Class).
	RequireLBClass bool
	// Overruled are ledger entries not to obey: the caller confirmed from
	// the API server what a Suspect of an earlier Rebuild said — another
	// Service's status shows the address and the entry's own does not. The
	// ledger is written before a status and a status cleared before its
	// entry is released, so ipam never writes such a ledger: it was edited
	// by someone else, and the status, which carries the traffic, wins.
	Overruled []ledger.Allocation
}

// Suspect is a ledger entry that the statuses contradict, as the stream
// shows them: Service Shows (one of ours, with no ledger entry for the IP)
// shows Entry.IP in its status, and Entry's own Service does not. The
// stream may lag the ledger, so the caller confirms both statuses from the
// API server before it overrules the entry (Inputs.Overruled).
type Suspect struct {
	Entry ledger.Allocation
	Shows string
}

// ClaimSource says where a registered IP was found.
type ClaimSource string

// The sources of a held IP, in the order they are trusted.
const (
	FromLedger  ClaimSource = "ledger"
	FromStatus  ClaimSource = "status"
	FromRequest ClaimSource = "request"
)

// Conflict is an IP that a Service's ledger entry, status or request names
// but that an earlier source gave to someone else.
type Conflict struct {
	Service string
	IPs     []netip.Addr
	Source  ClaimSource
	Message string
}

// Rebuilt is the allocator after a rebuild, with what the rebuild found.
type Rebuilt struct {
	Alloc     *allocator.Allocator
	Conflicts []Conflict
	Suspects  []Suspect
}

// Rebuild registers every IP already handed out before anything new is
// decided — the fix for MetalLB #1984 and its variant where a Service only
// *requests* its IP: first the ledger's allocations (the authority, also for
// Services the stream does not show yet, which stay held until their
// absence is confirmed), then IPs in a Service's status, then the IPs
// Services request by annotation or spec.loadBalancerIP. Each step goes
// through the Services in a deterministic order (creation time, then
// namespace/name), and an IP an earlier step gave away is reported as a
// Conflict, never moved. Pending Services are left pending: the caller
// allocates them afterwards.
func Rebuild(in Inputs) Rebuilt {
	b := newRebuilder(in)
	b.reservations(in.Ledger.Reservations)
	byService := ledger.IndexByService(obeyed(in.Ledger.Allocations, in.Overruled))
	b.fromLedger(byService)   // 1.
	b.fromStatuses(byService) // 2.
	b.foreign()
	b.claimRequests()
	b.fromRequests() // 3.
	return b.r
}

// obeyed are the ledger's allocations but the overruled ones: all of them,
// not a copy, when none is overruled (a copy of every entry was 13 MB of a
// restart's peak at 100,000 Services).
func obeyed(allocs, overruled []ledger.Allocation) []ledger.Allocation {
	if len(overruled) == 0 {
		return allocs
	}
	return slices.DeleteFunc(slices.Clone(allocs), func(e ledger.Allocation) bool {
		return slices.ContainsFunc(overruled, func(o ledger.Allocation) bool {
			return o.IP == e.IP && o.Service.Namespace == e.Service.Namespace && o.Service.Name == e.Service.Name
		})
	})
}

// rebuilder is one Rebuild's state: the allocator being filled, what it
// found, and the Services in Rebuild's order.
type rebuilder struct {
	r        Rebuilt
	services []service
	ours     map[string]*service // the Services ipam serves, by key
}

func newRebuilder(in Inputs) *rebuilder {
	b := &rebuilder{r: Rebuilt{Alloc: allocator.New()}, services: readServices(in), ours: map[string]*service{}}
	b.r.Alloc.SetPools(in.Pools)
	for i := range b.services {
		if s := &b.services[i]; s.ours {
			b.ours[s.key] = s
			if s.tenant != "" {
				// Before anything is held: what it holds counts
				// against its Gateway's namespace.
				b.r.Alloc.SetTenant(s.key, s.tenant)
			}
		}
	}
	return b
}

// sharingOf is the sharing of our Service key as it asks now; fallback is
// the key its ledger entry recorded, for a Service the stream does not show.
func (b *rebuilder) sharingOf(key string, fallback string) allocator.Sharing {
	if s := b.ours[key]; s != nil {
		return s.sharing
	}
	return allocator.Sharing{Key: fallback}
}

func (b *rebuilder) conflict(c Conflict) { b.r.Conflicts = append(b.r.Conflicts, c) }

// reservations hold the ledger's reserved addresses. They were checked when
// made; a clash here means the ledger was edited by hand, and the
// reservation still wins.
func (b *rebuilder) reservations(rs []ledger.Reservation) {
	for _, res := range rs {
		if err := b.r.Alloc.Reserve(objects.AllocatorReservation(res)); err != nil {
			b.conflict(Conflict{Service: "(reservation)", IPs: []netip.Addr{res.IP}, Source: FromLedger, Message: err.Error()})
		}
	}
}

// fromLedger is step 1: the ledger's allocations. Services are taken in the
// Services' order; those the stream does not show come after, by name.
func (b *rebuilder) fromLedger(byService map[string][]ledger.Allocation) {
	var keys []string
	seen := map[string]bool{}
	for _, s := range b.services {
		if len(byService[s.key]) > 0 {
			keys = append(keys, s.key)
			seen[s.key] = true
		}
	}
	var unseen []string
	for k := range byService {
		if !seen[k] {
			unseen = append(unseen, k)
		}
	}
	slices.Sort(unseen)
	for _, k := range append(keys, unseen...) {
		b.assignEntries(k, byService[k])
	}
}

// assignEntries holds a Service's ledger entries; an address its pool no
// longer offers stays counted in, and named by, the pool the ledger says it
// came from.
func (b *rebuilder) assignEntries(k string, entries []ledger.Allocation) {
	ips := objects.IPs(entries)
	sharing := b.sharingOf(k, entries[0].SharingKey)
	if err := b.r.Alloc.Assign(k, ips, sharing); err != nil {
		// Only a hand-edited ledger gets here. Keep the IPs one family
		// at a time so that whatever can be held is held.
		for _, ip := range ips {
			if err := b.r.Alloc.Assign(k, []netip.Addr{ip}, sharing); err != nil {
				b.conflict(Conflict{Service: k, IPs: []netip.Addr{ip}, Source: FromLedger, Message: err.Error()})
			}
		}
	}
	for _, e := range entries {
		b.r.Alloc.NoteOrigin(e.IP, e.Pool)
	}
}

// fromStatuses is step 2: the statuses of our Services that the ledger does
// not name. A status the ledger contradicts is a Conflict, and the ledger
// entries it names are Suspects for the caller to confirm.
func (b *rebuilder) fromStatuses(byService map[string][]ledger.Allocation) {
	var byIP map[netip.Addr][]ledger.Allocation // built at the first conflict
	for _, s := range b.services {
		k, ips := s.key, s.statusIPs
		if !s.ours || len(b.r.Alloc.Allocations(k)) > 0 || len(ips) == 0 {
			continue
		}
		if err := b.r.Alloc.Assign(k, ips, b.sharingOf(k, "")); err != nil {
			b.conflict(Conflict{Service: k, IPs: ips, Source: FromStatus, Message: fmt.Sprintf("status names %s, but %v", addrs(ips), err)})
			if byIP == nil {
				byIP = entriesByIP(byService)
			}
			b.r.Suspects = append(b.r.Suspects, suspects(k, ips, byIP, b.ours)...)
		}
	}
}

// foreign marks the addresses other controllers gave out: statuses of
// Services ipam does not serve. Nothing new may take them; one of ours
// already holding one keeps it, and the clash is reported.
func (b *rebuilder) foreign() {
	for _, s := range b.services {
		if s.ours {
			continue
		}
		k := s.key
		foreign := foreignIPs(b.r.Alloc, k, s.statusIPs)
		b.r.Alloc.SetForeign(k, foreign)
		for _, ip := range foreign {
			if holders := b.r.Alloc.Holders(ip); len(holders) > 0 {
				b.conflict(Conflict{Service: k, IPs: []netip.Addr{ip}, Source: FromStatus,
					Message: fmt.Sprintf("ipam holds %s for %s, and this Service is not served by ipam (its lbClass); one of the two controllers must let it go", ip, allocator.ServiceNames(k, holders[0].Service))})
			}
		}
	}
}

// claimRequests claims every IP one of our Services requests before
// anything is allocated, so that no allocation of step 3 (a dual-stack
// requester's auto-filled family) nor a pending Service afterwards takes
// an IP that a Service further down the list asks for.
func (b *rebuilder) claimRequests() {
	for _, s := range b.services {
		if s.request != nil {
			_ = b.r.Alloc.Claim(*s.request) // a refused claim: Allocate says why
		}
	}
}

// fromRequests is step 3: the requests of our Services that hold nothing
// yet.
func (b *rebuilder) fromRequests() {
	for _, s := range b.services {
		k, req := s.key, s.request
		if req == nil || len(b.r.Alloc.Allocations(k)) > 0 {
			continue
		}
		if _, err := b.r.Alloc.Allocate(*req); err != nil {
			b.conflict(Conflict{Service: k, IPs: req.RequestedIPs, Source: FromRequest, Message: err.Error()})
		}
	}
}

// suspects are the ledger entries that shower's status contradicts: an
// address of ips held, by the ledger, by one of our streamed Services whose
// own status does not show it. (shower has no ledger entry: Rebuild gets
// here only for Services the ledger does not name.)
func suspects(shower string, ips []netip.Addr, byIP map[netip.Addr][]ledger.Allocation, ours map[string]*service) []Suspect {
	var out []Suspect
	for _, ip := range ips {
		for _, e := range byIP[ip] {
			if s := ours[e.Service.Key()]; s != nil && e.Service.Key() != shower && !slices.Contains(s.statusIPs, ip) {
				out = append(out, Suspect{Entry: e, Shows: shower})
			}
		}
	}
	return out
}

// entriesByIP indexes the obeyed ledger entries by address.
func entriesByIP(byService map[string][]ledger.Allocation) map[netip.Addr][]ledger.Allocation {
	out := map[netip.Addr][]ledger.Allocation{}
	for _, entries := range byService {
		for _, e := range entries {
			out[e.IP] = append(out[e.IP], e)
		}
	}
	for _, es := range out {
		slices.SortFunc(es, func(a, b ledger.Allocation) int { return strings.Compare(a.Service.Key(), b.Service.Key()) })
	}
	return out
}

// service is what Rebuild reads of one Service.
type service struct {
	key     string
	created int64
	// ours: ipam serves it (objects.Class).
	ours      bool
	statusIPs []netip.Addr
	// sharing and request are read for ours only; request is set when the
	// Service validly requests IPs.
	sharing allocator.Sharing
	request *allocator.Request
	// tenant is the namespace whose quotas it counts against when not its
	// own (the Gateway's it serves: allocator.Request.Namespace).
	tenant string
}

// readServices reads in.Services into the order Rebuild goes through them
// (objects.Less: creation time, then namespace/name).
func readServices(in Inputs) []service {
	if in.Services == nil {
		return nil
	}
	class := objects.Class{Name: in.LBClass, Required: in.RequireLBClass}
	out := make([]service, 0, in.ServiceCount)
	for obj := range in.Services {
		s := service{key: objkey.Of(obj), created: obj.GetMeta().GetCreationTimestamp(), statusIPs: objects.StatusIPs(obj)}
		if class.Serves(obj) {
			s.ours = true
			req, err := objects.Request(obj, in.Env)
			s.sharing = req.Sharing
			if err == nil && req.Namespace != obj.GetMeta().GetNamespace() {
				s.tenant = req.Namespace
			}
			if err == nil && len(req.RequestedIPs) > 0 {
				s.request = &req
			}
		}
		out = append(out, s)
	}
	slices.SortFunc(out, func(a, b service) int { return objects.CompareByAge(a.created, a.key, b.created, b.key) })
	return out
}

// foreignIPs are the addresses the status (ips) of the Service with key,
// one ipam does not serve, shows and ipam does not hold for it: what
// another controller gave it. (What ipam holds for it is being taken back,
// notOurs.)
func foreignIPs(a *allocator.Allocator, key string, ips []netip.Addr) []netip.Addr {
	if len(ips) == 0 {
		return nil
	}
	ips = slices.Clone(ips)
	held := a.Allocations(key)
	return slices.DeleteFunc(ips, func(ip netip.Addr) bool {
		return slices.ContainsFunc(held, func(h allocator.Allocation) bool { return h.IP == ip })
	})
}

func addrs(ips []netip.Addr) string {
	s := make([]string, len(ips))
	for i, ip := range ips {
		s[i] = ip.String()
	}
	return strings.Join(s, ", ")
}
