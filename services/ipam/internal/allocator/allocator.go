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
	"maps"
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

// AcrossMessage says what a Service holding addresses shared across
// namespaces without opt-in (Result.Across) should know and do.
func AcrossMessage(ips []netip.Addr) string {
	return fmt.Sprintf("a Service in another namespace also holds %s under the same %s, shared before ipledger kept sharing within a namespace; "+
		"both keep it, and no other Service may join. To go on sharing, list each other's namespace in %s on both Services; "+
		"to stop, change %s on one of them (it then gets another address)",
		addrList(ips), AnnotationAllowSharedIP, AnnotationSharingCrossNamespace, AnnotationAllowSharedIP)
}

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

// admits reports whether sh lets a Service of namespace ns share.
func (sh *Sharing) admits(ns string) bool {
	return slices.Contains(sh.CrossNamespace, ns) || slices.Contains(sh.CrossNamespace, "*")
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

// poolSource is what names the request's pool, for messages.
func (r Request) poolSource() string {
	if r.PoolFrom != "" {
		return r.PoolFrom
	}
	return AnnotationAddressPool
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
// decides (plan.go, kept.go, quota.go); what it knows lives in indexes,
// whose methods alone change it (indexes.go).
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

// sharedOf is the sharing info kept for a holder: a copy of sh, or nil
// without a key, when the IP is exclusive and nothing else of sh is ever
// read (shareProblem). Most Services share nothing.
func sharedOf(sh Sharing) *Sharing {
	if sh.Key == "" {
		return nil
	}
	sh.Ports = slices.Clone(sh.Ports)
	sh.Selector = maps.Clone(sh.Selector)
	sh.CrossNamespace = slices.Clone(sh.CrossNamespace)
	return &sh
}

// Assign re-registers IPs a Service already holds (from the ledger or its
// status) without choosing anything. It fails, changing nothing, with an
// *Error when an IP is held by a Service it may not share with or reserved
// for another Service (ReasonRequestedIPInUse, Holders set), or when the
// Service already holds a different IP of the same family
// (ReasonInvalidRequest). IPs outside every pool are accepted and held as
// orphans: holding too much is safe, handing an IP out twice is not.
// Assigning what is already held refreshes the sharing info.
func (a *Allocator) Assign(service string, ips []netip.Addr, sharing Sharing) error {
	defer a.checked("Assign")
	if err := checkServiceKey(service); err != nil {
		return err
	}
	if len(ips) == 0 {
		return invalid("assign %s: no IPs", service)
	}
	seen := map[Family]netip.Addr{}
	for _, ip := range ips {
		if !ip.IsValid() || ip.Zone() != "" || ip.Is4In6() {
			return invalid("assign %s: %q is not a plain IPv4 or IPv6 address", service, ip)
		}
		f := FamilyOf(ip)
		if prev, ok := seen[f]; ok && prev != ip {
			return invalid("assign %s: %s and %s are both %s; a Service holds at most one IP per family", service, prev, ip, f)
		}
		seen[f] = ip
	}
	for _, held := range a.idx.bySvc[service] {
		if want, ok := seen[FamilyOf(held)]; ok && want != held {
			return invalid("assign %s: it already holds %s; release it before assigning %s", service, held, want)
		}
	}
	for _, ip := range ips {
		if err := a.usable(ip, service, a.idx.tenantOf(service), sharing, true); err != nil {
			return err
		}
	}
	for _, ip := range ips {
		a.idx.hold(ip, service, sharing)
	}
	return nil
}

// usable says whether service, counted against namespace tenant
// (Request.tenant), may hold ip next to its current holders and
// reservation; nil when it may. held: the Service holds ip already (Assign
// restores it, planHeld checks it), so a share across namespaces from
// before sharing was kept within a namespace is kept (KeptAcross says so).
//
// The message is for the Service's own namespace to read (its condition and
// Events): a holder, requester or reservation of another namespace is never
// named, nor its sharing key or a reservation's note. Holders and Detail say
// it all, for operators (ExplainService, logs).
func (a *Allocator) usable(ip netip.Addr, service, tenant string, sh Sharing, held bool) *Error {
	st := a.idx.ips[ip]
	if st == nil {
		return nil
	}
	ns := namespaceOf(service)
	// keptForShare: kept under the request's sharing key for its namespace,
	// or kept for any Service of the requester's tenant (keptInTenant); a
	// grant ends the reservation, and whoever holds the address meanwhile
	// (its own Service, back from its status) must still allow it: the
	// holders are checked below like any other's.
	keptForShare := false
	if r := st.reservation; r != nil && r.Kept && r.ForService != service && !held {
		keptForShare = sh.Key != "" && r.SharingKey == sh.Key && namespaceOf(r.ForService) == ns || keptInTenant(*r, tenant)
	}
	if r := st.reservation; r != nil && r.Kept && r.ForService != service && !keptForShare {
		return &Error{Reason: ReasonRequestedIPInUse,
			Message: fmt.Sprintf("%s is kept for %s, which released it, until %s; request another IP, or ask an operator to release it (kubectl ipledger release %s)",
				ip, serviceNames([]string{r.ForService}, ns), a.KeptUntil(*r).UTC().Format(time.RFC3339), ip),
			Detail: fmt.Sprintf("kept for %q since %s", r.ForService, r.CreatedAt.UTC().Format(time.RFC3339))}
	}
	if r := st.reservation; r != nil && r.ForService != service && !keptForShare {
		msg := fmt.Sprintf("%s is reserved by an operator", ip)
		if r.ForService != "" && namespaceOf(r.ForService) == ns {
			msg = fmt.Sprintf("%s is reserved for Service %s", ip, r.ForService)
		}
		return &Error{Reason: ReasonRequestedIPInUse, Message: msg + "; request another IP, or ask an operator to release the reservation",
			Detail: fmt.Sprintf("reservation %q for %q", r.Note, r.ForService)}
	}
	if others := without(a.idx.foreignAt[ip], service); len(others) > 0 {
		return &Error{
			Reason: ReasonRequestedIPInUse,
			Message: fmt.Sprintf("%s is in the status of %s, which ipam does not serve: another controller (MetalLB, the cloud provider) gave it out; "+
				"ipam hands it to nobody while that status shows it. Request another IP, or free it there first", ip, serviceNames(others, ns)),
			Holders: others,
			Detail:  "shown by " + strings.Join(others, ", "),
		}
	}
	var why []string
	var holders []string
	for _, h := range st.holders {
		if h.service == service {
			continue
		}
		w, keptAcross := shareProblem(h, service, sh)
		if w == "" || keptAcross && held {
			continue
		}
		if !slices.Contains(why, w) {
			why = append(why, w)
		}
		holders = append(holders, h.service)
	}
	if len(why) == 0 {
		return nil
	}
	return &Error{
		Reason:  ReasonRequestedIPInUse,
		Message: fmt.Sprintf("%s is in use: %s", ip, strings.Join(why, "; ")),
		Holders: holders,
		Detail:  "held by " + strings.Join(holders, ", "),
	}
}

// shareProblem says why service, with sharing sh, may not share an IP with
// holder h; "" when it may. Services of different namespaces share only
// when each admits the other's namespace (Sharing.CrossNamespace); until
// then the requester learns only that a Service of another namespace holds
// the IP — not which, not its key, not whether its key is the same.
// keptAcross: they would share but for that rule — a share made before the
// rule, which a Service already holding the IP keeps.
func shareProblem(h holder, service string, sh Sharing) (why string, keptAcross bool) {
	ns, hns := namespaceOf(service), namespaceOf(h.service)
	name := "Service " + h.service
	if ns != hns {
		mutual := h.shared != nil && h.shared.Key == sh.Key && h.shared.admits(ns) && sh.admits(hns)
		if !mutual {
			// One text whatever the holder's key: a different one would
			// tell the requester that it guessed the key.
			keptAcross = h.key() != "" && h.key() == sh.Key && sharesWithin(*h.shared, sh) == ""
			return HeldInAnotherNamespace, keptAcross
		}
		// Both owners agreed to share: the usual rules apply, and the
		// holder may be named to the namespace it admitted.
	}
	switch {
	case h.key() == "":
		return fmt.Sprintf("held by %s, which does not share it (no %s)", name, AnnotationAllowSharedIP), false
	case sh.Key == "":
		return fmt.Sprintf("held by %s; to share it set %s=%q on this Service too", name, AnnotationAllowSharedIP, h.key()), false
	case sh.Key != h.key():
		return fmt.Sprintf("held by %s with sharing key %q, this Service has %q", name, h.key(), sh.Key), false
	}
	if w := sharesWithin(*h.shared, sh); w != "" {
		return fmt.Sprintf("held by %s%s", name, w), false
	}
	return "", false
}

// HeldInAnotherNamespace is all a Service learns of an address that a
// Service of another namespace holds, unless both agreed to share it.
const HeldInAnotherNamespace = "held by a Service in another namespace; request another IP " +
	"(Services of different namespaces share an address only when both set the same " + AnnotationAllowSharedIP +
	" and each lists the other's namespace in " + AnnotationSharingCrossNamespace + ")"

// sharesWithin checks the rules two Services of one sharing key follow:
// no common (protocol, port), one externalTrafficPolicy, and with Local the
// same Pods; "" when they may share.
func sharesWithin(h, sh Sharing) string {
	for _, p := range sh.Ports {
		for _, q := range h.Ports {
			if p.Port == q.Port && protocol(p.Protocol) == protocol(q.Protocol) {
				return fmt.Sprintf(", which also uses %s/%d", protocol(p.Protocol), p.Port)
			}
		}
	}
	switch {
	case sh.Local != h.Local:
		return "; Services sharing an IP must use the same externalTrafficPolicy"
	case sh.Local && !maps.Equal(sh.Selector, h.Selector):
		return " with a different selector; with externalTrafficPolicy Local, Services sharing an IP must select the same Pods"
	}
	return ""
}

// ServiceNames names services to the owner of Service reader (its
// condition, its Events): Services of its namespace by name, the others
// only as "a Service in another namespace".
func ServiceNames(reader string, services ...string) string {
	return serviceNames(services, namespaceOf(reader))
}

// serviceNames names services to a reader in namespace ns: those of ns by
// name, the others only as "a Service in another namespace".
func serviceNames(services []string, ns string) string {
	var out []string
	others := false
	for _, s := range services {
		if namespaceOf(s) == ns {
			out = append(out, "Service "+s)
		} else {
			others = true
		}
	}
	if others {
		out = append(out, "a Service in another namespace")
	}
	return strings.Join(out, ", ")
}

// tenant is the namespace whose pools serve the request (Request.Namespace).
func (r Request) tenant() string {
	if r.Namespace != "" {
		return r.Namespace
	}
	return namespaceOf(r.Service)
}

// inNamespace says, for a refusal, which namespace's pools serve the request.
func (r Request) inNamespace() string {
	if t := r.tenant(); t != namespaceOf(r.Service) {
		return "the Service serves a Gateway of namespace " + t
	}
	return "the Service is in namespace " + r.tenant()
}

// SetTenant records that service counts against the quotas of namespace
// ns (Request.Namespace: the namespace of the Gateway it serves) rather than
// its own, moving what it holds and requests there. Allocate and Claim call
// it; a caller restoring holds (Assign) calls it first, so that a restart
// counts as the allocator did before. Release forgets it.
func (a *Allocator) SetTenant(service, ns string) {
	defer a.checked("SetTenant")
	if ns == "" {
		ns = namespaceOf(service)
	}
	a.idx.setTenant(service, ns)
}

// namespaceOf is the namespace of a "namespace/name" Service key.
func namespaceOf(service string) string {
	ns, _, _ := strings.Cut(service, "/")
	return ns
}

func protocol(p string) string {
	if p == "" {
		return "TCP"
	}
	return p
}

func checkServiceKey(s string) *Error {
	ns, name, ok := strings.Cut(s, "/")
	if !ok || ns == "" || name == "" || strings.Contains(name, "/") {
		return invalid("Service key %q is not namespace/name", s)
	}
	return nil
}

// Release frees every IP the Service holds (a shared IP stays held by the
// other Services, a reserved IP stays reserved) and returns what it held.
func (a *Allocator) Release(service string) []Allocation {
	defer a.checked("Release")
	out := a.Allocations(service)
	a.idx.release(service)
	return out
}

// Claim records the IPs req requests (ipledger.io/loadBalancerIPs or
// spec.loadBalancerIP), replacing what the Service claimed before. Auto
// allocation never picks an IP another Service claims, so a pending Service
// cannot take an IP that a Service only *requests* while that Service waits
// for its turn (the half of MetalLB #1984 its fix missed). A claim is not a
// hold: the first Service to Allocate a requested IP gets it, and a claim
// does not count as used. Release clears the Service's claims.
//
// A claim follows the rules of allocation: an IP is claimed only when the
// serving pool holding it would serve req (its namespaces, selectors, the
// named pool, not being deleted). Otherwise a Service in a namespace a pool
// does not serve could block that pool's addresses, one Service per IP. The
// refused claims are returned as an *Error naming the pool and the rule; an
// IP outside every serving pool is not claimed and is not an error here
// (Allocate says RequestedIPNotInPool).
func (a *Allocator) Claim(req Request) error {
	defer a.checked("Claim")
	a.idx.setTenant(req.Service, req.tenant())
	var ok []netip.Addr
	var refused []string
	for _, ip := range req.RequestedIPs {
		p := a.pools.index.lookup(ip)
		if p == nil {
			continue
		}
		why := a.claimRefusal(p, req)
		if why == "" {
			why = a.claimQuotaRefusal(p, req, ip)
		}
		if why != "" {
			refused = append(refused, fmt.Sprintf("%s: %s", ip, why))
			continue
		}
		ok = append(ok, ip)
	}
	a.idx.setClaims(req.Service, ok)
	if len(refused) > 0 {
		return &Error{Reason: ReasonNoMatchingPool, Message: "the requested IP is not reserved for this Service, because " + strings.Join(refused, "; ")}
	}
	return nil
}

// claimRefusal says why pool p may not serve req's request, "" when it may.
func (a *Allocator) claimRefusal(p *Pool, req Request) string {
	ns := req.tenant()
	switch {
	case req.Pool != "" && req.Pool != p.name:
		return fmt.Sprintf("it is in pool %s, and the Service asks for pool %s (%s)", p.name, req.Pool, req.poolSource())
	case p.spec.Terminating:
		return fmt.Sprintf("pool %s is being deleted", p.name)
	case !p.servesNamespace(ns, req.NamespaceLabels):
		return fmt.Sprintf("pool %s serves only %s; %s", p.name, describeNamespaces(p.spec), req.inNamespace())
	case !p.servesService(req.ServiceLabels):
		return fmt.Sprintf("pool %s serves only Services matching its serviceSelectors, and this Service's labels match none", p.name)
	}
	return ""
}

// claimQuotaRefusal says why ip may not be claimed for req under pool p's
// maxAddressesPerNamespace, "" when it may.
func (a *Allocator) claimQuotaRefusal(p *Pool, req Request, ip netip.Addr) string {
	ns := req.tenant()
	if !a.overQuota(p, ns, ip, 0) {
		return ""
	}
	return quotaMessage(p, ns, a.idx.nsAddrs.count(p.name, ns), 1)
}

// quotaMessage is the refusal of a namespace that holds or requests n of
// pool p's addresses and would need more more under p's quota.
func quotaMessage(p *Pool, ns string, n, more int) string {
	needs := ""
	if more > 1 {
		needs = fmt.Sprintf(", and this Service needs %d more", more)
	}
	return fmt.Sprintf("namespace %s holds or requests %d addresses of pool %s, whose spec.allocation.maxAddressesPerNamespace is %d%s; "+
		"release one, or ask an operator to raise the quota", ns, n, p.name, p.spec.MaxAddressesPerNamespace, needs)
}

// SetForeign records the addresses the status of a Service ipam does not
// serve shows (another lbClass, or class-less under --require-lb-class),
// replacing what it recorded for that Service before; nil forgets it. Such
// an address was handed out by another controller — MetalLB beside ipam
// during a migration, a cloud provider — so ipam never hands it out: not
// automatically, not on request, not to a sharing Service, and it counts as
// used in its pool. It is no hold: the ledger knows nothing of it, and a
// Service of ipam's that already holds the address keeps it (Rebuild
// reports the clash).
func (a *Allocator) SetForeign(service string, ips []netip.Addr) {
	defer a.checked("SetForeign")
	a.idx.setForeign(service, ips)
}

// without returns the sorted services without s (a new slice when s is in
// it, services itself otherwise).
func without(services []string, s string) []string {
	i, found := slices.BinarySearch(services, s)
	if !found {
		return services
	}
	return slices.Delete(slices.Clone(services), i, i+1)
}

// Reserve holds r.IP outside any Service. It fails when a Service other than
// r.ForService holds the IP, or when the IP is already reserved differently;
// reserving the same again is a no-op. A reserved IP is never auto-assigned
// and is granted only to r.ForService, when that Service requests it.
func (a *Allocator) Reserve(r Reservation) error {
	defer a.checked("Reserve")
	if !r.IP.IsValid() || r.IP.Zone() != "" || r.IP.Is4In6() {
		return invalid("ip: %q is not a plain IPv4 or IPv6 address", r.IP)
	}
	if r.ForService != "" {
		if err := checkServiceKey(r.ForService); err != nil {
			return invalid("for_service: %s", err.Message)
		}
	}
	if st := a.idx.ips[r.IP]; st != nil {
		if old := st.reservation; old != nil {
			if old.Note == r.Note && old.ForService == r.ForService {
				return nil
			}
			return &Error{Reason: ReasonRequestedIPInUse, Message: fmt.Sprintf("%s is already reserved (%s); release that reservation first", r.IP, old.Note)}
		}
		var others []string
		for _, h := range st.holders {
			if h.service != r.ForService {
				others = append(others, h.service)
			}
		}
		if len(others) > 0 {
			return &Error{
				Reason:  ReasonRequestedIPInUse,
				Message: fmt.Sprintf("%s is held by Service %s; release it there first", r.IP, strings.Join(others, ", ")),
				Holders: others,
			}
		}
	}
	a.idx.reserve(r)
	return nil
}

// Unreserve gives a reserved IP back and returns the reservation. The IP
// stays held when its Service holds it.
func (a *Allocator) Unreserve(ip netip.Addr) (Reservation, bool) {
	defer a.checked("Unreserve")
	return a.idx.unreserve(ip)
}

// Reservation returns the reservation of ip.
func (a *Allocator) Reservation(ip netip.Addr) (Reservation, bool) {
	if st := a.idx.ips[ip]; st != nil && st.reservation != nil {
		return *st.reservation, true
	}
	return Reservation{}, false
}

// Holders returns the Services holding ip, sorted by Service.
func (a *Allocator) Holders(ip netip.Addr) []Allocation {
	st := a.idx.ips[ip]
	if st == nil {
		return nil
	}
	out := make([]Allocation, 0, len(st.holders))
	for _, h := range st.holders {
		out = append(out, Allocation{IP: ip, Service: h.service, Pool: st.pool, SharingKey: h.key(), From: st.origin})
	}
	return out
}

// Allocations returns the IPs the Service holds, IPv4 first.
func (a *Allocator) Allocations(service string) []Allocation {
	var out []Allocation
	for _, ip := range a.idx.bySvc[service] {
		for _, h := range a.Holders(ip) {
			if h.Service == service {
				out = append(out, h)
			}
		}
	}
	return out
}

// NoPool is what the ledger records as the pool of an address that was in no
// pool when it was registered (a status from before ipam, say).
const NoPool = "(none)"

// NoteOrigin records the pool a held IP was handed out from, as the ledger
// says: after a restart an address is still counted in, named by and pinned
// to the pool it came from, wherever pool edits have left it since. NoPool
// and "" leave it unknown.
func (a *Allocator) NoteOrigin(ip netip.Addr, pool string) {
	defer a.checked("NoteOrigin")
	if pool != "" && pool != NoPool {
		a.idx.noteOrigin(ip, pool)
	}
}

// HeldOutside counts, by the pool they came from, the held IPs that their
// pool no longer offers (outside every serving pool, or inside one that no
// longer hands them out): see ReasonHeldOutsidePool. IPs of unknown origin
// are counted under "".
func (a *Allocator) HeldOutside() map[string]int {
	return maps.Clone(a.idx.outside)
}

// ServicesFrom counts, by pool, the Services holding an address that came
// from that pool (see Origin) or lies in it now. It scans every held IP once:
// call it once per pass, and only when some pool is being deleted.
func (a *Allocator) ServicesFrom() map[string]int {
	svcs := map[string]map[string]struct{}{}
	add := func(pool, svc string) {
		if pool == "" {
			return
		}
		if svcs[pool] == nil {
			svcs[pool] = map[string]struct{}{}
		}
		svcs[pool][svc] = struct{}{}
	}
	for _, st := range a.idx.ips {
		for _, h := range st.holders {
			add(st.origin, h.service)
			add(st.pool, h.service)
		}
	}
	out := make(map[string]int, len(svcs))
	for pool, m := range svcs {
		out[pool] = len(m)
	}
	return out
}

// PoolOf returns the serving pool containing ip.
func (a *Allocator) PoolOf(ip netip.Addr) (string, bool) {
	if p := a.pools.index.lookup(ip); p != nil {
		return p.name, true
	}
	return "", false
}

// Conflicting returns the conflict of a pool, if it is Conflicting.
func (a *Allocator) Conflicting(pool string) (Conflict, bool) {
	c, ok := a.pools.conflictOf[pool]
	return c, ok
}

// Usage returns the usage of a pool given to SetPools. A Conflicting pool
// uses nothing.
func (a *Allocator) Usage(pool string) (Usage, bool) {
	p := a.pools.byName[pool]
	if p == nil {
		return Usage{}, false
	}
	u := Usage{
		IPv4: FamilyUsage{Total: p.Total(IPv4), Used: new(big.Int)},
		IPv6: FamilyUsage{Total: p.Total(IPv6), Used: new(big.Int)},
	}
	if c := a.idx.counts[pool]; c != nil {
		u.IPv4.Used.Set(c.used[0])
		u.IPv6.Used.Set(c.used[1])
		u.IPv4.Held, u.IPv6.Held = c.held[0], c.held[1]
	}
	return u, true
}

// List returns allocations in IP order (the holders of one IP by Service),
// starting after the IP after (the zero Addr: from the lowest), stopping once
// limit IPs are listed (limit <= 0: no limit). Reserved IPs nobody holds are
// skipped. To page, pass the last IP of a page as the next after. Each page
// costs O(log n + page), never a scan from the start.
func (a *Allocator) List(after netip.Addr, limit int) []Allocation {
	var out []Allocation
	start := netip.AddrFrom4([4]byte{})
	if after.IsValid() {
		if start = after.Next(); !start.IsValid() {
			if !after.Is4() {
				return nil
			}
			start = netip.IPv6Unspecified()
		}
	}
	ips := 0
	for p := a.idx.taken.search(start); p.c < len(a.idx.taken.chunks); {
		r := a.idx.taken.chunks[p.c][p.i]
		ip := r.first
		if ip.Compare(start) < 0 {
			ip = start
		}
		for ; ip.IsValid() && ip.Compare(r.last) <= 0; ip = ip.Next() {
			if limit > 0 && ips >= limit {
				return out
			}
			if h := a.Holders(ip); len(h) > 0 {
				out = append(out, h...)
				ips++
			}
		}
		if p.i++; p.i == len(a.idx.taken.chunks[p.c]) {
			p = pos{p.c + 1, 0}
		}
	}
	return out
}

// Reservations returns every reservation in IP order.
func (a *Allocator) Reservations() []Reservation {
	var out []Reservation
	for ip, st := range a.idx.ips {
		if st.reservation != nil {
			r := *st.reservation
			r.IP = ip
			out = append(out, r)
		}
	}
	slices.SortFunc(out, func(x, y Reservation) int { return x.IP.Compare(y.IP) })
	return out
}
