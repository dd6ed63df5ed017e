// Package allocator decides which LoadBalancer IP each Service gets from the
// IPPools. It is pure Go (no client-go, no protobuf): the controller gathers
// pools, Services, ledger entries and reservations, feeds them in, and writes
// the results. Every decision is deterministic (no random tie-breaks) so that
// two replicas, or one replica before and after a restart, agree.
//
// Restart safety (MetalLB #1984) is the caller's order of calls, every
// term: SetPools; Reserve every reservation of the ledger; Assign every IP
// the ledger names, then every IP in a Service's status (an Assign refused
// with RequestedIPInUse is a conflict to report, never a move); Claim the
// requested IPs (ipledger.io/loadBalancerIPs, spec.loadBalancerIP) of every
// Service; Allocate the Services that request IPs; and only then Allocate
// pending Services. Auto allocation skips IPs that are held, reserved, or
// claimed by another Service, so a pending Service never takes an IP that
// the ledger, a status or a request names.
//
// Pools may be huge (an IPv6 /64): taken addresses are kept as a sorted set of
// intervals, the lowest free address is found by walking those intervals, and
// counts are exact math/big integers. Nothing is ever proportional to a pool's
// size.
//
// An Allocator is not safe for concurrent use; the controller serialises
// calls (one worker owns it, or wrap it in a mutex).
package allocator

import (
	"errors"
	"fmt"
	"math/big"
	"net/netip"
	"slices"
	"strings"
	"time"
)

// Family is an IP address family.
type Family int

// The address families, spelled as in Service.spec.ipFamilies.
const (
	IPv4 Family = 4
	IPv6 Family = 6
)

// String returns "IPv4" or "IPv6".
func (f Family) String() string {
	switch f {
	case IPv4:
		return "IPv4"
	case IPv6:
		return "IPv6"
	}
	return fmt.Sprintf("Family(%d)", int(f))
}

// ParseFamily parses "IPv4" or "IPv6" (Service.spec.ipFamilies entries).
func ParseFamily(s string) (Family, error) {
	switch s {
	case "IPv4":
		return IPv4, nil
	case "IPv6":
		return IPv6, nil
	}
	return 0, fmt.Errorf("ipFamilies: unknown family %q, want IPv4 or IPv6", s)
}

// FamilyOf returns the family of addr.
func FamilyOf(addr netip.Addr) Family {
	if addr.Is4() {
		return IPv4
	}
	return IPv6
}

// FamilyPolicy is Service.spec.ipFamilyPolicy.
type FamilyPolicy string

// The family policies. An empty policy means SingleStack.
const (
	SingleStack      FamilyPolicy = "SingleStack"
	PreferDualStack  FamilyPolicy = "PreferDualStack"
	RequireDualStack FamilyPolicy = "RequireDualStack"
)

// Reason is the reason of the Service condition ipledger.io/AddressAllocated
// (and ExplainServiceResponse.reason).
type Reason string

// The AddressAllocated condition reasons.
const (
	ReasonAllocated            Reason = "Allocated"
	ReasonNoMatchingPool       Reason = "NoMatchingPool"
	ReasonPoolExhausted        Reason = "PoolExhausted"
	ReasonRequestedIPInUse     Reason = "RequestedIPInUse"
	ReasonRequestedIPNotInPool Reason = "RequestedIPNotInPool"
	ReasonInvalidRequest       Reason = "InvalidRequest"
	// ReasonHeldOutsidePool: the Service keeps addresses its pool no longer
	// offers (the pool shrank, was deleted or changed); ipam never moves them.
	ReasonHeldOutsidePool Reason = "HeldOutsidePool"
	// ReasonNamespaceQuotaExceeded: every pool that would serve the Service
	// caps the addresses one namespace holds (maxAddressesPerNamespace), and
	// its namespace is at the cap.
	ReasonNamespaceQuotaExceeded Reason = "NamespaceQuotaExceeded"
	// ReasonHeldSharedAcrossNamespaces: the Service keeps an address it
	// shares with a Service of another namespace from before sharing was
	// kept within a namespace, and neither lists the other's namespace in
	// AnnotationSharingCrossNamespace. Nothing moves; nothing new joins.
	ReasonHeldSharedAcrossNamespaces Reason = "HeldSharedAcrossNamespaces"
	// ReasonGatewayNotSeen: the Service is owned by a Gateway that the
	// stream does not show (yet): it waits rather than take an address the
	// Gateway may not want, and keeps what it holds.
	ReasonGatewayNotSeen Reason = "GatewayNotSeen"
)

// VerdictReason says what one pool had to say about a Service
// (PoolVerdict.reason in ipledger.ipam.v1).
type VerdictReason string

// The pool verdict reasons. Selected and NotChosen are eligible verdicts.
const (
	VerdictSelected                VerdictReason = "Selected"
	VerdictNotChosen               VerdictReason = "NotChosen"
	VerdictNamespaceMismatch       VerdictReason = "NamespaceMismatch"
	VerdictServiceSelectorMismatch VerdictReason = "ServiceSelectorMismatch"
	VerdictAutoAssignOff           VerdictReason = "AutoAssignOff"
	VerdictExhausted               VerdictReason = "Exhausted"
	VerdictConflicting             VerdictReason = "Conflicting"
	VerdictNotRequested            VerdictReason = "NotRequested"
	VerdictRequestedIPNotInPool    VerdictReason = "RequestedIPNotInPool"
	VerdictRequestedIPInUse        VerdictReason = "RequestedIPInUse"
	// VerdictTerminating: the pool is being deleted and hands out nothing new.
	VerdictTerminating VerdictReason = "Terminating"
	// VerdictFamilyMismatch: the pool has no addresses of a family the
	// Service requires (not in the proto comment's list yet).
	VerdictFamilyMismatch VerdictReason = "FamilyMismatch"
	// VerdictNamespaceQuota: the Service's namespace holds or requests as
	// many of the pool's addresses as its maxAddressesPerNamespace allows.
	VerdictNamespaceQuota VerdictReason = "NamespaceQuotaExceeded"
)

// Error is a failed allocation or assignment. Reason is the condition reason
// to report; Message says what is wrong and how to fix it.
type Error struct {
	Reason  Reason
	Message string
	// Holders are the Services holding a contested IP (RequestedIPInUse, or
	// an Assign refused), sorted.
	Holders []string
	// Detail is what an operator may read beside Message, which the
	// Service's namespace reads: the holders and reservation that Message
	// does not name when they belong to another namespace.
	Detail string
}

// Error implements error.
func (e *Error) Error() string { return e.Message }

// ErrHeldAddressUnfit is wrapped by Allocate's error when the Service holds an
// address that no longer fits its request (pool, requested IPs, families or
// sharing changed). The controller clears the status, calls Release, removes
// the ledger entry, and calls Allocate again. Allocate never releases by
// itself, so an IP is not handed to someone else while a status still shows it.
var ErrHeldAddressUnfit = errors.New("the Service holds an address that no longer fits its request")

// Port is one (protocol, port) of a Service, for sharing checks.
type Port struct {
	Protocol string // TCP, UDP or SCTP
	Port     int32
}

// Sharing says with whom a Service may share an IP: Services of its own
// namespace — or of a namespace each of the two lists in CrossNamespace —
// with the same non-empty Key, no common (Protocol, Port), and — when either
// uses externalTrafficPolicy Local — both Local with the same Selector.
type Sharing struct {
	Key      string // ipledger.io/allow-shared-ip; "" = the IP is exclusive
	Ports    []Port
	Local    bool              // externalTrafficPolicy: Local
	Selector map[string]string // spec.selector, compared only when Local
	// CrossNamespace are the other namespaces whose Services may share
	// (AnnotationSharingCrossNamespace); "*" is every namespace.
	CrossNamespace []string
}

// Request is what one Service asks for.
type Request struct {
	// Service is "namespace/name".
	Service string
	// Namespace is the namespace whose pools serve the Service (their
	// spec.allocation.namespaces and namespaceSelectors): the Service's own,
	// or the Gateway's it serves; "" is the Service's. NamespaceLabels are
	// that namespace's labels. Quotas (maxAddressesPerNamespace) count
	// against it too: a Gateway's Service is its tenant's, wherever its
	// Gateway controller made it. Sharing goes by the Service's own
	// namespace.
	Namespace       string
	NamespaceLabels map[string]string
	ServiceLabels   map[string]string
	// FamilyPolicy and Families come from spec.ipFamilyPolicy and
	// spec.ipFamilies. SingleStack takes Families[0]; RequireDualStack takes
	// both; PreferDualStack with two families takes what the best-ranked
	// pool serving it has — both, or either one (a pool offering both wins
	// only among pools of the same rank). Empty Families defaults to the
	// families of RequestedIPs, else IPv4.
	FamilyPolicy FamilyPolicy
	Families     []Family
	// RequestedIPs (at most one per family), Pool and Sharing.Key usually come
	// from ParseServiceRequest.
	RequestedIPs []netip.Addr
	Pool         string
	// PoolFrom says what names Pool, for messages ("" is the
	// ipledger.io/address-pool annotation).
	PoolFrom string
	// DefaultPool is the pool of a Service that holds nothing and names
	// none (a GatewayClass's default, named by DefaultPoolFrom). It never
	// moves a Service that holds addresses: changing a default is not the
	// Service asking for another pool.
	DefaultPool, DefaultPoolFrom string
	Sharing                      Sharing
}

// Allocation is one IP held by one Service.
type Allocation struct {
	IP      netip.Addr
	Service string
	// Pool is the serving pool containing IP, "" when the IP lies outside
	// every serving pool (an orphan after a pool shrank or was deleted).
	Pool       string
	SharingKey string
	// From is the pool IP was handed out from (it stays when a pool edit
	// leaves IP outside it or inside another pool); "" when unknown.
	From string
}

// Result is a successful Allocate.
type Result struct {
	IPs  []netip.Addr // in the order of the Service's families
	Pool string
	// New is false when the Service already held exactly these IPs.
	New bool
	// Outside, when set, says why the Service keeps IPs outside its pool's
	// rules (Pool is then ""): see ReasonHeldOutsidePool.
	Outside string
	// Across are the IPs the Service keeps though it shares them with a
	// Service of another namespace without opt-in: see
	// ReasonHeldSharedAcrossNamespaces.
	Across []netip.Addr
	// Kept are the kept reservations the grant ended (kept.go): addresses
	// kept for this Service (or its sharing key), or — when its pool had
	// nothing else — for another Service.
	Kept []Reservation
}

// Reservation holds an IP outside any Service.
type Reservation struct {
	IP   netip.Addr
	Note string
	// ForService, "namespace/name" or "", is the only Service that may be
	// granted the IP, and only by requesting it.
	ForService string
	CreatedAt  time.Time
	// Kept: the reservation keeps the address for ForService, which held
	// it and released it at CreatedAt (kept.go); it ends with its pool's
	// grace period, and a Service may take it back without requesting it.
	// SharingKey is the key it was held under.
	Kept       bool
	SharingKey string
	// Tenant is the namespace whose quota a kept address counts against
	// (Request.Namespace of the Service that released it); "" is
	// ForService's namespace.
	Tenant string
}

// tenant is the namespace a kept reservation counts against.
func (r Reservation) tenant() string {
	if r.Tenant != "" {
		return r.Tenant
	}
	return namespaceOf(r.ForService)
}

// FamilyUsage counts the addresses of one family of a pool, each address
// once however many Services share it. Total counts the addresses the pool
// hands out (not those avoidBuggyIPs, exclude or skipFirstLastIPs keep
// out); Used counts the addresses of Total held by a Service, kept for one
// that released them, or reserved; Held counts those of Used a live Service
// holds: one of ipam's, or one another controller serves whose status shows
// it (SetForeign). An address kept or reserved for a Service that holds it
// again counts as held. Used - Held is what is kept or reserved for a
// Service that does not hold it.
type FamilyUsage struct {
	Total *big.Int
	Used  *big.Int
	Held  int64
}

// Available is Total - Used: the addresses a new Service can get without
// taking one kept for a Service that released it (which a pool with nothing
// else hands out, kept longest first) or reserved for another.
func (f FamilyUsage) Available() *big.Int {
	return new(big.Int).Sub(f.Total, f.Used)
}

// Usage is a pool's address usage by family.
type Usage struct {
	IPv4 FamilyUsage
	IPv6 FamilyUsage
}

// Conflict is a pool that overlaps an older one and serves nothing.
type Conflict struct {
	Pool string
	// With is the older serving pool it overlaps.
	With    string
	Message string
}

// PoolUpdate is what SetPools found.
type PoolUpdate struct {
	// Conflicts lists the Conflicting pools, sorted by pool name.
	Conflicts []Conflict
}

// Verdict is one pool's verdict on a Service.
type Verdict struct {
	Pool     string
	Eligible bool
	Reason   VerdictReason
	Message  string
}

// Explanation says why a Service has, or has not, got its IP.
type Explanation struct {
	Reason   Reason
	Decision string       // the outcome in words
	IPs      []netip.Addr // what the Service holds now
	Verdicts []Verdict    // one per pool, sorted by the order pools are tried
}

// Allocator holds the pools, every held IP and every reservation. It
// decides (allocate.go, pick.go, kept.go, quota.go); what it knows of
// addresses lives in indexes, whose methods alone change it (indexes.go).
type Allocator struct {
	pools poolSet // the pools of the last SetPools
	idx   indexes // held, reserved, claimed and foreign addresses; idx.pools is &pools
}

// poolSet is the pools of the last SetPools, fixed until the next.
type poolSet struct {
	byName     map[string]*Pool    // every pool given to SetPools, by name
	ranked     []*Pool             // serving (non-Conflicting) pools in rank order
	conflictOf map[string]Conflict // Conflicting pools by name
	index      poolIndex           // serving pools' ranges, for PoolOf
}

// New returns an empty Allocator.
func New() *Allocator {
	a := &Allocator{pools: poolSet{byName: map[string]*Pool{}, conflictOf: map[string]Conflict{}}}
	a.idx = newIndexes(&a.pools)
	return a
}

// SetPools replaces the pool set. Overlaps are resolved oldest first: a pool
// overlapping an older one (CreatedAt, then name) is Conflicting and serves
// nothing. Every held or reserved IP is re-attributed to the serving pool
// containing it. Nothing is released: held IPs outside every serving pool
// stay held (HeldOutside counts them) until their Services let them go.
// Pools with a duplicate name are ignored after the oldest.
func (a *Allocator) SetPools(pools []*Pool) PoolUpdate {
	defer a.checked("SetPools")
	a.pools = newPoolSet(pools)
	a.idx.repool()
	var upd PoolUpdate
	for _, c := range a.pools.conflictOf {
		upd.Conflicts = append(upd.Conflicts, c)
	}
	slices.SortFunc(upd.Conflicts, func(x, y Conflict) int { return strings.Compare(x.Pool, y.Pool) })
	return upd
}

// newPoolSet ranks pools, the oldest of each name first, and marks those
// overlapping an older serving pool Conflicting.
func newPoolSet(pools []*Pool) poolSet {
	byAge := slices.Clone(pools)
	slices.SortStableFunc(byAge, ageCompare)
	ps := poolSet{byName: map[string]*Pool{}, conflictOf: map[string]Conflict{}}
	for _, p := range byAge {
		if _, dup := ps.byName[p.name]; dup {
			continue
		}
		ps.byName[p.name] = p
		if c, ok := ps.overlapOf(p); ok {
			ps.conflictOf[p.name] = c
			continue
		}
		for _, r := range p.ranges {
			ps.index.insert(r, p)
		}
		ps.ranked = append(ps.ranked, p)
	}
	slices.SortFunc(ps.ranked, rankCompare)
	return ps
}

// overlapOf returns the conflict of p with an already serving pool.
func (ps *poolSet) overlapOf(p *Pool) (Conflict, bool) {
	for _, r := range p.ranges {
		if sp, ok := ps.index.overlap(r); ok {
			return Conflict{
				Pool: p.name,
				With: sp.pool.name,
				Message: fmt.Sprintf("addresses %s overlap %s of the older pool %s; pool %s serves nothing until the overlap is removed",
					r, sp.r, sp.pool.name, p.name),
			}, true
		}
	}
	return Conflict{}, false
}
