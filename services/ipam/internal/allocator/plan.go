package allocator

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"time"
)

// need is the families a request wants, with the IPs it names.
type need struct {
	order    []Family // the Service's families, first (primary) first
	required []Family
	// optional are PreferDualStack's families that no requested IP makes
	// required, in the Service's order. With nothing required, a pool must
	// give at least one of them: either family will do.
	optional  []Family
	requested map[Family]netip.Addr
	// held: requested are the addresses the Service already holds (planHeld
	// checks that its pool still serves it), not addresses it asks for.
	held bool
}

func (n need) wants(f Family) bool {
	return slices.Contains(n.required, f) || slices.Contains(n.optional, f)
}

// require moves f from optional to required.
func (n *need) require(f Family) {
	if i := slices.Index(n.optional, f); i >= 0 {
		n.optional = slices.Delete(slices.Clone(n.optional), i, i+1)
		n.required = append(slices.Clone(n.required), f)
	}
}

// wanted names the families n asks for, for messages.
func (n need) wanted() string {
	if len(n.required) == 0 {
		return strings.Join(familyNames(n.optional), " or ")
	}
	return familyList(n.required)
}

func otherFamily(f Family) Family {
	if f == IPv4 {
		return IPv6
	}
	return IPv4
}

// needsOf validates req and works out the families it wants.
func needsOf(req Request) (need, *Error) {
	if err := checkServiceKey(req.Service); err != nil {
		return need{}, err
	}
	requested, err := requestedByFamily(req.RequestedIPs)
	if err != nil {
		return need{}, err
	}
	n := need{requested: requested}
	var fams []Family
	for _, f := range req.Families {
		if f != IPv4 && f != IPv6 {
			return need{}, invalid("spec.ipFamilies: unknown family %v", f)
		}
		if !slices.Contains(fams, f) {
			fams = append(fams, f)
		}
	}
	explicit := len(fams) > 0
	if !explicit {
		for _, ip := range req.RequestedIPs {
			fams = append(fams, FamilyOf(ip))
		}
		if len(fams) == 0 {
			fams = []Family{IPv4}
		}
	}
	n.order = fams
	switch req.FamilyPolicy {
	case "", SingleStack:
		n.required = fams[:1]
	case RequireDualStack:
		n.required = []Family{fams[0], otherFamily(fams[0])}
		n.order = n.required
	case PreferDualStack:
		// Either family will do: the pool chosen by rank gives what it has.
		if len(fams) == 1 && explicit {
			n.required = fams[:1]
			break
		}
		n.optional = []Family{fams[0], otherFamily(fams[0])}
		n.order = n.optional
	default:
		return need{}, invalid("spec.ipFamilyPolicy: unknown policy %q, want SingleStack, PreferDualStack or RequireDualStack", req.FamilyPolicy)
	}
	for _, ip := range req.RequestedIPs {
		f := FamilyOf(ip)
		switch {
		case slices.Contains(n.required, f):
		case slices.Contains(n.optional, f):
			// Asking for an IP of a preferred family makes it required.
			n.require(f)
		default:
			return need{}, invalid("requested IP %s is %s, but the Service's ipFamilies allow only %s (ipFamilyPolicy %s); request an %s address or change spec.ipFamilies",
				ip, f, familyList(n.required), policyName(req.FamilyPolicy), n.required[0])
		}
	}
	return n, nil
}

// requestedByFamily checks the requested IPs, at most one plain address
// per family, and maps each family to its IP.
func requestedByFamily(ips []netip.Addr) (map[Family]netip.Addr, *Error) {
	out := map[Family]netip.Addr{}
	for _, ip := range ips {
		if !ip.IsValid() || ip.Zone() != "" || ip.Is4In6() || ip.IsUnspecified() {
			return nil, invalid("requested IP %q is not a plain IPv4 or IPv6 address", ip)
		}
		f := FamilyOf(ip)
		if prev, ok := out[f]; ok {
			return nil, invalid("requested IPs %s and %s are both %s; request at most one IP per family", prev, ip, f)
		}
		out[f] = ip
	}
	return out, nil
}

func familyList(fs []Family) string { return strings.Join(familyNames(fs), " and ") }

func familyNames(fs []Family) []string {
	s := make([]string, len(fs))
	for i, f := range fs {
		s[i] = f.String()
	}
	return s
}

func policyName(p FamilyPolicy) FamilyPolicy {
	if p == "" {
		return SingleStack
	}
	return p
}

// eval is one pool's verdict on a request and, when eligible, its pick.
type eval struct {
	pool    *Pool
	verdict Verdict
	ips     []netip.Addr // in the Service's family order
	full    bool         // every optional family is included (or there is none)
	primary bool         // the Service's first family is included
	err     *Error       // RequestedIPInUse detail
}

// evaluate gives pool p's verdict on req and, when p is eligible, the
// addresses it would give: first the pool's rules (refusal), then the picks
// of the required and the optional families (picker).
func (a *Allocator) evaluate(p *Pool, req Request, n need) eval {
	k := picker{eval: eval{pool: p, verdict: Verdict{Pool: p.name}}, a: a, req: req, ns: req.tenant()}
	if r, msg := a.refusal(p, req, n); r != "" {
		k.fail(r, msg)
		return k.eval
	}
	if !k.pickRequired(n) || !k.pickOptional(n) {
		return k.eval
	}
	slices.SortStableFunc(k.ips, func(x, y netip.Addr) int {
		return slices.Index(n.order, FamilyOf(x)) - slices.Index(n.order, FamilyOf(y))
	})
	k.primary = len(n.order) > 0 && FamilyOf(k.ips[0]) == n.order[0]
	k.verdict.Eligible = true
	k.verdict.Reason = VerdictSelected
	return k.eval
}

// refusal says why the rules of pool p keep it from serving req, as a
// verdict reason and message; "" when they do not. The checks run in the
// order a user would want them explained.
func (a *Allocator) refusal(p *Pool, req Request, n need) (VerdictReason, string) {
	if c, ok := a.pools.conflictOf[p.name]; ok {
		return ineligible(VerdictConflicting, "pool %s is Conflicting: %s", p.name, c.Message)
	}
	if req.Pool != "" && req.Pool != p.name {
		return ineligible(VerdictNotRequested, "the Service asks for pool %s (%s)", req.Pool, req.poolSource())
	}
	if msg := requestedRefusal(p, n); msg != "" {
		return VerdictRequestedIPNotInPool, msg
	}
	if tenant := req.tenant(); !p.servesNamespace(tenant, req.NamespaceLabels) {
		return ineligible(VerdictNamespaceMismatch, "pool %s serves only %s; %s", p.name, describeNamespaces(p.spec), req.inNamespace())
	}
	if !p.servesService(req.ServiceLabels) {
		return ineligible(VerdictServiceSelectorMismatch, "pool %s serves only Services matching its serviceSelectors, and this Service's labels match none", p.name)
	}
	if req.Pool == "" && len(n.requested) == 0 && !p.spec.AutoAssign {
		return ineligible(VerdictAutoAssignOff, "pool %s has autoAssign false: it serves only Services that name it in %s or request one of its IPs", p.name, AnnotationAddressPool)
	}
	if p.spec.Terminating && !n.held {
		return ineligible(VerdictTerminating, "pool %s is being deleted: it hands out no new address", p.name)
	}
	for _, f := range n.required {
		if !p.HasFamily(f) {
			return ineligible(VerdictFamilyMismatch, "pool %s has no %s addresses, and the Service needs %s (ipFamilyPolicy %s)", p.name, f, familyList(n.required), policyName(req.FamilyPolicy))
		}
	}
	if len(n.required) == 0 && !slices.ContainsFunc(n.optional, p.HasFamily) {
		return ineligible(VerdictFamilyMismatch, "pool %s has no %s addresses (ipFamilyPolicy %s)", p.name, n.wanted(), policyName(req.FamilyPolicy))
	}
	return "", ""
}

// ineligible is refusal's verdict reason r with its message.
func ineligible(r VerdictReason, format string, args ...any) (VerdictReason, string) {
	return r, fmt.Sprintf(format, args...)
}

// requestedRefusal says why pool p never hands out an IP n requests
// (VerdictRequestedIPNotInPool); "" when it may.
func requestedRefusal(p *Pool, n need) string {
	for _, f := range []Family{IPv4, IPv6} {
		ip, ok := n.requested[f]
		if !ok {
			continue
		}
		if !p.Contains(ip) {
			return fmt.Sprintf("pool %s does not contain the requested IP %s", p.name, ip)
		}
		if n.held {
			continue // what a Service holds it keeps past avoidBuggyIPs and unusable blocks
		}
		if p.spec.AvoidBuggyIPs && buggy(ip) {
			return fmt.Sprintf("pool %s has avoidBuggyIPs set, so it never hands out %s (an address ending in .0 or .255); request another IP", p.name, ip)
		}
		if why := p.unusableWhy(ip); why != "" {
			return fmt.Sprintf("pool %s never hands out %s: it is %s; request another IP", p.name, ip, why)
		}
	}
	return ""
}

// picker picks, into its eval, the addresses one pool gives one request.
// Each new address counts against the namespace's quota in the pool, those
// of this request too (a dual-stack Service takes two). A pick that fails
// sets the eval's verdict and reports false.
type picker struct {
	eval
	a   *Allocator
	req Request
	ns  string // the request's tenant (Request.Namespace), whose quota counts
}

// fail sets the verdict to reason r with message msg, and reports false.
func (k *picker) fail(r VerdictReason, msg string) bool {
	k.verdict.Reason, k.verdict.Message = r, msg
	return false
}

// fresh counts the picks so far that are new to the namespace in the pool.
func (k *picker) fresh() int {
	n := 0
	for _, c := range k.ips {
		if !k.a.idx.nsAddrs.has(k.pool.name, k.ns, c) {
			n++
		}
	}
	return n
}

// overQuota says whether picking ip too takes the namespace past its quota.
func (k *picker) overQuota(ip netip.Addr) bool { return k.a.overQuota(k.pool, k.ns, ip, k.fresh()) }

// quota fails for the namespace's quota.
func (k *picker) quota() bool {
	p := k.pool
	return k.fail(VerdictNamespaceQuota, quotaMessage(p, k.ns, k.a.idx.nsAddrs.count(p.name, k.ns), k.fresh()+1))
}

// pickRequired picks an address of each required family: the requested IP
// when n names one (which must be usable), else pick's choice.
func (k *picker) pickRequired(n need) bool {
	p := k.pool
	for _, f := range n.required {
		if ip, ok := n.requested[f]; ok {
			if err := k.a.usable(ip, k.req.Service, k.ns, k.req.Sharing, n.held); err != nil {
				k.err = err
				return k.fail(VerdictRequestedIPInUse, err.Message)
			}
			if !n.held && k.overQuota(ip) {
				return k.quota()
			}
			k.ips = append(k.ips, ip)
			continue
		}
		ip, ok := k.a.pick(p, f, k.ips, k.req)
		switch {
		case ok && k.overQuota(ip):
			return k.quota()
		case !ok && p.spec.Terminating:
			return k.fail(VerdictExhausted, fmt.Sprintf("pool %s is being deleted and hands out no new address", p.name))
		case !ok:
			return k.fail(VerdictExhausted, k.a.exhaustedMessage(p, f))
		}
		k.ips = append(k.ips, ip)
	}
	return true
}

// pickOptional picks an address of each optional family the pool has one
// free of within the quota, setting full when it got them all. It fails
// when the request, with nothing required, gets nothing.
func (k *picker) pickOptional(n need) bool {
	k.full = true
	quotaHit := false
	for _, f := range n.optional {
		ip, ok := netip.Addr{}, false
		if k.pool.HasFamily(f) {
			ip, ok = k.a.pick(k.pool, f, k.ips, k.req)
		}
		if ok && k.overQuota(ip) {
			ok, quotaHit = false, true
		}
		if !ok {
			k.full = false
			continue
		}
		k.ips = append(k.ips, ip)
	}
	if len(k.ips) > 0 {
		return true
	}
	// PreferDualStack with nothing required, and neither family free.
	if quotaHit {
		return k.quota()
	}
	return k.fail(VerdictExhausted, fmt.Sprintf("pool %s has no free %s address", k.pool.name, n.wanted()))
}

// exhaustedMessage says that pool p has no free address of family f.
func (a *Allocator) exhaustedMessage(p *Pool, f Family) string {
	u, _ := a.Usage(p.name)
	fu := u.IPv4
	if f == IPv6 {
		fu = u.IPv6
	}
	more := ""
	if fu.Used.Cmp(fu.Total) < 0 {
		more = ", the others are requested by other Services"
	}
	return fmt.Sprintf("pool %s has no free %s address (%s of %s in use%s)", p.name, f, fu.Used, fu.Total, more)
}

func describeNamespaces(s PoolSpec) string {
	var parts []string
	if len(s.Namespaces) > 0 {
		parts = append(parts, "namespaces "+strings.Join(s.Namespaces, ", "))
	}
	if len(s.NamespaceSelectors) > 0 {
		parts = append(parts, "namespaces matching its namespaceSelectors")
	}
	return strings.Join(parts, " and ")
}

// pick chooses an address of family f in pool p for req: an address the
// Service already holds, else one kept for it (kept.go), else one it freed
// itself (its request changed: it released and asks again), else the lowest
// IP held under the same sharing key that it may share, else a free address
// (lowestFree). chosen are this
// request's earlier picks (never of family f).
func (a *Allocator) pick(p *Pool, f Family, chosen []netip.Addr, req Request) (netip.Addr, bool) {
	for _, ip := range a.idx.bySvc[req.Service] {
		if FamilyOf(ip) == f && p.allocatable(ip) {
			return ip, true
		}
	}
	if p.spec.Terminating {
		return netip.Addr{}, false
	}
	if ip, ok := a.keptFor(p, f, req); ok {
		return ip, true
	}
	if ip, ok := a.freedBy(p, f, req); ok {
		return ip, true
	}
	if key := req.Sharing.Key; key != "" {
		var best netip.Addr
		for ip := range a.idx.byShare[key] {
			if FamilyOf(ip) != f || !p.allocatable(ip) || (best.IsValid() && ip.Compare(best) >= 0) {
				continue
			}
			if a.usable(ip, req.Service, req.tenant(), req.Sharing, false) == nil && !a.idx.claimedByOther(ip, req.Service) {
				best = ip
			}
		}
		if best.IsValid() {
			return best, true
		}
	}
	return a.lowestFree(p, f, req.Service)
}

// lowestFree returns the address of family f in p to hand out to service:
// the lowest never freed, else the least recently freed, else the one kept
// longest (kept.go) — never one held, reserved otherwise, claimed by a
// Service other than service, or skipped by avoidBuggyIPs.
func (a *Allocator) lowestFree(p *Pool, f Family, service string) (netip.Addr, bool) {
	if max := p.spec.MaxAddressesPerNamespace; max > 0 && a.idx.nsAddrs.count(p.name, a.idx.tenantOf(service)) >= max {
		// At its cap, a namespace may still take what is kept for it (a
		// new address is refused by the quota).
		if ip, ok := a.oldestKept(p, f, service, true); ok {
			return ip, true
		}
	}
	if ip, ok := a.lowestNeverFreed(p, f, service); ok {
		return ip, true
	}
	free := func(ip netip.Addr) bool {
		return FamilyOf(ip) == f && p.allocatable(ip) && !(a.idx.claimed.contains(ip) && a.idx.claimedByOther(ip, service))
	}
	if ip, ok := a.idx.freed.oldest(free); ok {
		return ip, true
	}
	return a.oldestKept(p, f, service, false)
}

// lowestNeverFreed returns the lowest address of family f in p that is
// neither taken, freed before, claimed by a Service other than service, nor
// skipped. It hops over taken and freed intervals, so its cost depends on
// how fragmented they are and on the claims in the way, never on the pool's
// size.
func (a *Allocator) lowestNeverFreed(p *Pool, f Family, service string) (netip.Addr, bool) {
	for _, r := range p.ranges {
		if FamilyOf(r.first) != f {
			continue
		}
		lo := r.first
		for {
			c, ok := a.idx.taken.firstAbsent(lo, r.last)
			if !ok {
				break
			}
			if d, ok := a.idx.freed.set.firstAbsent(c, r.last); !ok {
				break
			} else if d != c {
				lo = d
				continue
			}
			next := c.Next()
			switch u := p.unusableRange(c); {
			case u != nil:
				next = u.last.Next() // hop over a whole block (127.0.0.0/8)
			case !(p.spec.AvoidBuggyIPs && buggy(c)) && !(a.idx.claimed.contains(c) && a.idx.claimedByOther(c, service)):
				return c, true
			}
			if lo = next; !lo.IsValid() || lo.Compare(r.last) > 0 {
				break
			}
		}
	}
	return netip.Addr{}, false
}

// outcomeKind is what the plan of one request settles on. Exactly one kind
// holds, and each names what Allocate does and what Explain says: no
// precedence among fields decides it.
type outcomeKind int

const (
	// grant: the chosen pool gives the Service its addresses — new ones, or
	// those it holds, with any family it lacks added from the same pool.
	// Allocate holds them (outcome.chosen, outcome.across).
	grant outcomeKind = iota + 1
	// keepOutside: the Service keeps what it holds though the addresses lie
	// outside their pool's rules (an operator shrank, deleted or re-selected
	// the pool); nothing is added and nothing moves (outcome.why,
	// ReasonHeldOutsidePool).
	keepOutside
	// keepShort: the Service keeps what it holds in its pool, but the pool
	// cannot add what else it asks for (a family: none free, over quota, or
	// none at all). Allocate fails with outcome.err and changes nothing.
	keepShort
	// release: the Service's own request no longer fits what it holds —
	// other families, other requested IPs, another named pool, or sharing
	// its address no longer allows — so it moves: ipam releases what it
	// holds and chooses again. Allocate fails with ErrHeldAddressUnfit
	// (outcome.why).
	release
	// refuse: the Service, holding nothing, gets nothing: its request is
	// invalid or no pool serves it (outcome.err).
	refuse
)

// outcome is what planning one request settles on: its kind, and what that
// kind needs.
type outcome struct {
	kind   outcomeKind
	chosen *eval        // grant: the giving pool's eval, one of decision.evals
	across []netip.Addr // grant: held addresses shared across namespaces (Result.Across)
	why    string       // keepOutside, release: why, in words
	err    *Error       // keepShort, refuse: the condition
}

// decision is the plan of one request: every pool's verdict and the outcome.
type decision struct {
	evals   []eval
	held    []netip.Addr // what the Service holds now
	outcome outcome
}

// plan works out what Allocate would do, changing nothing.
func (a *Allocator) plan(req Request) decision {
	n, err := needsOf(req)
	if err != nil {
		return decision{outcome: outcome{kind: refuse, err: err}}
	}
	d := decision{held: slices.Clone(a.idx.bySvc[req.Service])}
	if len(d.held) > 0 {
		return a.planHeld(req, n, d)
	}
	if req.Pool == "" && len(req.RequestedIPs) == 0 && req.DefaultPool != "" {
		req.Pool, req.PoolFrom = req.DefaultPool, req.DefaultPoolFrom
	}
	return a.planFresh(req, n, d)
}

// planFresh plans for a Service that holds nothing: the best eligible pool
// gives (best), else failure says why none does.
func (a *Allocator) planFresh(req Request, n need, d decision) decision {
	d.evals = a.evaluateAll(req, func(*Pool) need { return n })
	c := a.keptEval(req, d.evals)
	if c == nil {
		c = best(d.evals)
	}
	if c == nil {
		d.outcome = outcome{kind: refuse, err: a.failure(req, n, d.evals)}
		return d
	}
	d.outcome = outcome{kind: grant, chosen: c}
	d.markChosen("")
	return d
}

// best returns the eligible eval to choose, nil when there is none. The
// first eligible pool in rank order (pinned, then priority) wins; among
// pools of one rank, one giving every family the Service prefers
// (PreferDualStack), then its first family. Rank before families: an
// operator's pinning and priorities are never defeated by a pool that
// happens to offer both families.
func best(evals []eval) *eval {
	var c *eval
	for i := range evals {
		e := &evals[i]
		if !e.verdict.Eligible {
			continue
		}
		if c == nil || sameRank(e.pool, c.pool) && e.fit() > c.fit() {
			c = e
		}
	}
	return c
}

// fit ranks what an eligible pool gives among pools of one rank: every
// family the Service asks for, then its first family.
func (e *eval) fit() int {
	n := 0
	if e.full {
		n += 2
	}
	if e.primary {
		n++
	}
	return n
}

// evaluateAll evaluates every pool once, asking each for needOf(pool):
// serving pools in rank order, then the Conflicting ones by name.
func (a *Allocator) evaluateAll(req Request, needOf func(*Pool) need) []eval {
	out := make([]eval, 0, len(a.pools.byName))
	for _, p := range a.pools.ranked {
		out = append(out, a.evaluate(p, req, needOf(p)))
	}
	var conflicting []string
	for name := range a.pools.conflictOf {
		conflicting = append(conflicting, name)
	}
	slices.Sort(conflicting)
	for _, name := range conflicting {
		p := a.pools.byName[name]
		out = append(out, a.evaluate(p, req, needOf(p)))
	}
	return out
}

// markChosen turns the chosen eval's verdict into Selected and every other
// eligible one into NotChosen.
func (d *decision) markChosen(selectedMsg string) {
	c := d.outcome.chosen
	if selectedMsg == "" {
		selectedMsg = fmt.Sprintf("pool %s gives %s", c.pool.name, addrList(c.ips))
	}
	c.verdict.Message = selectedMsg
	for i := range d.evals {
		e := &d.evals[i]
		if e == c || !e.verdict.Eligible {
			continue
		}
		e.verdict.Reason = VerdictNotChosen
		switch {
		case len(d.held) > 0:
			e.verdict.Message = fmt.Sprintf("pool %s could serve the Service, but it already holds %s from pool %s", e.pool.name, addrList(d.held), c.pool.name)
		case sameRank(c.pool, e.pool) && c.full && !e.full:
			e.verdict.Message = fmt.Sprintf("pool %s could serve the Service, but pool %s, of the same rank, offers both families (ipFamilyPolicy PreferDualStack)", e.pool.name, c.pool.name)
		case sameRank(c.pool, e.pool) && c.fit() > e.fit():
			e.verdict.Message = fmt.Sprintf("pool %s could serve the Service, but pool %s, of the same rank, offers the Service's first family (ipFamilyPolicy PreferDualStack)", e.pool.name, c.pool.name)
		default:
			e.verdict.Message = fmt.Sprintf("pool %s could serve the Service, but pool %s ranks first (pinned pools first, then lower priority, then name)", e.pool.name, c.pool.name)
		}
	}
}

// planHeld plans for a Service that already holds addresses. An address
// moves only when the Service itself asks for something else: other
// families, other requested IPs, another named pool, or sharing its address
// no longer allows (release). Whatever an operator does to the pools —
// shrink, delete, invalidate, re-select, avoidBuggyIPs — the Service keeps
// what it holds (keepOutside) and nothing else is handed its IP.
//
// Each pool is evaluated once: the holding pool as if the held IPs were
// requested (heldNeed), which checks the pool name, namespace, selectors
// and sharing again; every other pool as it would serve the Service on its
// own (asked for the held IPs it would say only that it lacks them).
func (a *Allocator) planHeld(req Request, n need, d decision) decision {
	if why := a.heldUnfit(req, n, d.held); why != "" {
		d.outcome = outcome{kind: release, why: why}
		return d
	}
	pool, outside := a.heldPool(req, d.held)
	hn := heldNeed(n, d.held)
	holds := func(p *Pool) bool { return pool != "" && p.name == pool }
	d.evals = a.evaluateAll(req, func(p *Pool) need {
		if holds(p) {
			return hn
		}
		return n
	})
	var holding *eval
	for i := range d.evals {
		if holds(d.evals[i].pool) {
			holding = &d.evals[i]
			break
		}
	}
	d.outcome = heldOutcome(d.held, outside, holding)
	if d.outcome.kind == grant {
		d.outcome.across = a.sharedAcross(req.Service, req.Sharing)
		d.markChosen(fmt.Sprintf("the Service holds %s from pool %s", addrList(holding.ips), pool))
	}
	return d
}

// heldUnfit says why the Service's own request no longer fits an address it
// holds (the first that does not: other families, another requested IP,
// another named pool); "" when each fits.
func (a *Allocator) heldUnfit(req Request, n need, held []netip.Addr) string {
	for _, ip := range held {
		f := FamilyOf(ip)
		st := a.idx.ips[ip]
		switch {
		case !n.wants(f):
			return fmt.Sprintf("it holds %s, but it now asks only for %s", ip, familyList(n.required))
		case n.requested[f].IsValid() && n.requested[f] != ip:
			return fmt.Sprintf("it holds %s, but it now requests %s", ip, n.requested[f])
		case req.Pool != "" && st != nil && st.origin != "" && st.origin != req.Pool:
			return fmt.Sprintf("it holds %s from pool %s, but it now asks for pool %s (%s)", ip, st.origin, req.Pool, req.poolSource())
		}
	}
	return ""
}

// heldPool returns the pool holding the Service's addresses (the first
// address's serving pool, "" when none is in one) and, when they lie
// outside that pool's rules, why: the last address in no serving pool, else
// the first that lies in a pool other than the one the Service names, that
// its pool no longer hands out, or that is in a second pool.
func (a *Allocator) heldPool(req Request, held []netip.Addr) (pool, outside string) {
	for i, ip := range held {
		st := a.idx.ips[ip]
		switch {
		case st == nil || st.pool == "":
			outside = fmt.Sprintf("%s is no longer in any serving IPPool", ip)
		case outside != "":
			// The first reason stands.
		case req.Pool != "" && st.pool != req.Pool:
			// Given by the pool the Service names (or before anyone knew);
			// a pool edit has put it in another pool since.
			outside = fmt.Sprintf("%s now lies in pool %s, and the Service asks for pool %s", ip, st.pool, req.Pool)
		case !a.pools.byName[st.pool].allocatable(ip):
			outside = fmt.Sprintf("%s is in pool %s, which no longer hands it out (%s)", ip, st.pool, a.whyNotAllocatable(st.pool, ip))
		case i > 0 && st.pool != pool:
			outside = fmt.Sprintf("%s is in pool %s and %s in pool %s, and one Service takes its addresses from one pool", held[0], pool, ip, st.pool)
		}
		if st != nil && pool == "" {
			pool = st.pool
		}
	}
	return pool, outside
}

// heldNeed is n asking for the held addresses as requested IPs, their
// families required: what the holding pool is asked.
func heldNeed(n need, held []netip.Addr) need {
	hn := need{order: n.order, required: slices.Clone(n.required), optional: slices.Clone(n.optional), requested: map[Family]netip.Addr{}, held: true}
	for _, ip := range held {
		f := FamilyOf(ip)
		hn.requested[f] = ip
		hn.require(f)
	}
	return hn
}

// heldOutcome settles the plan of a Service whose held addresses all fit
// its own request: outside says why they lie outside their pool's rules
// ("" when they do not), holding is the holding pool's eval (never nil when
// outside is ""). A grant's across is the caller's to fill in.
func heldOutcome(held []netip.Addr, outside string, holding *eval) outcome {
	if outside != "" {
		return outcome{kind: keepOutside, why: outside}
	}
	v := holding.verdict
	keeps := func(r Reason, more string) outcome {
		msg := fmt.Sprintf("the Service keeps %s, but %s%s", addrList(held), v.Message, more)
		return outcome{kind: keepShort, err: &Error{Reason: r, Message: msg}}
	}
	switch {
	case v.Eligible:
		return outcome{kind: grant, chosen: holding}
	case v.Reason == VerdictExhausted:
		// It keeps what it holds; the missing family waits.
		return keeps(ReasonPoolExhausted, "")
	case v.Reason == VerdictNamespaceQuota:
		return keeps(ReasonNamespaceQuotaExceeded, "")
	case v.Reason == VerdictFamilyMismatch:
		// The Service wants a family its pool has no addresses of: it asked
		// for more (dual-stack), or the pool lost a family. Either way it
		// keeps what it holds, and says how to move.
		return keeps(ReasonNoMatchingPool, fmt.Sprintf("; to move to another pool, name it (%s) or request its addresses (%s)", AnnotationAddressPool, AnnotationLoadBalancerIPs))
	case v.Reason == VerdictNotRequested || v.Reason == VerdictRequestedIPInUse:
		// The Service's own request changed: it asked for it.
		return outcome{kind: release, why: fmt.Sprintf("it holds %s, but %s", addrList(held), v.Message)}
	default:
		// The pool changed (selectors, avoidBuggyIPs): never a reason to move.
		return outcome{kind: keepOutside, why: v.Message}
	}
}

// sharedAcross returns the addresses service holds together with a Service
// of another namespace that it may share with but for the namespace rule
// (shareProblem's keptAcross).
func (a *Allocator) sharedAcross(service string, sh Sharing) []netip.Addr {
	var out []netip.Addr
	for _, ip := range a.idx.bySvc[service] {
		for _, h := range a.idx.ips[ip].holders {
			if _, kept := shareProblem(h, service, sh); kept && h.service != service {
				out = append(out, ip)
				break
			}
		}
	}
	return out
}

// failure explains, as a condition reason and message, why no pool was chosen.
func (a *Allocator) failure(req Request, n need, evals []eval) *Error {
	if len(n.requested) > 0 {
		var pool *Pool
		for _, f := range []Family{IPv4, IPv6} {
			ip, ok := n.requested[f]
			if !ok {
				continue
			}
			p := a.pools.index.lookup(ip)
			if p == nil {
				msg := fmt.Sprintf("the requested IP %s is in no IPPool", ip)
				for _, name := range sortedKeys(a.pools.conflictOf) {
					if a.pools.byName[name].Contains(ip) {
						msg = fmt.Sprintf("the requested IP %s is only in pool %s, which is Conflicting", ip, name)
						break
					}
				}
				return &Error{Reason: ReasonRequestedIPNotInPool, Message: msg + "; request an IP of a serving IPPool or add it to one"}
			}
			if pool != nil && pool != p {
				return invalid("the requested IPs come from different pools (%s and %s); request IPs of one pool", pool.name, p.name)
			}
			pool = p
		}
		for _, e := range evals {
			if e.pool == pool {
				return errorOf(e, req)
			}
		}
	}
	if req.Pool != "" {
		for _, e := range evals {
			if e.pool.name == req.Pool {
				return errorOf(e, req)
			}
		}
		return &Error{Reason: ReasonNoMatchingPool, Message: fmt.Sprintf("there is no IPPool named %q (%s); create it or fix %s", req.Pool, req.poolSource(), req.poolSource())}
	}
	if len(evals) == 0 {
		return &Error{Reason: ReasonNoMatchingPool, Message: "there are no IPPools; create one"}
	}
	var full []string
	reason := ReasonPoolExhausted
	for _, e := range evals {
		switch e.verdict.Reason {
		case VerdictExhausted:
			full = append(full, e.verdict.Message)
		case VerdictNamespaceQuota:
			full = append(full, e.verdict.Message)
			reason = ReasonNamespaceQuotaExceeded
		}
	}
	if len(full) > 0 {
		return &Error{Reason: reason, Message: "every pool that serves the Service is full or at the namespace's quota: " + strings.Join(full, "; ")}
	}
	return &Error{Reason: ReasonNoMatchingPool, Message: fmt.Sprintf("none of the %d IPPools serves this Service; see each pool's verdict (ExplainService)", len(evals))}
}

// errorOf turns a pool's failing verdict into the condition reason.
func errorOf(e eval, req Request) *Error {
	switch e.verdict.Reason {
	case VerdictRequestedIPInUse:
		return e.err
	case VerdictExhausted:
		return &Error{Reason: ReasonPoolExhausted, Message: e.verdict.Message}
	case VerdictNamespaceQuota:
		return &Error{Reason: ReasonNamespaceQuotaExceeded, Message: e.verdict.Message}
	case VerdictRequestedIPNotInPool:
		return &Error{Reason: ReasonRequestedIPNotInPool, Message: e.verdict.Message}
	}
	return &Error{Reason: ReasonNoMatchingPool, Message: e.verdict.Message}
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

func addrList(ips []netip.Addr) string {
	s := make([]string, len(ips))
	for i, ip := range ips {
		s[i] = ip.String()
	}
	return strings.Join(s, ", ")
}

// Allocate gives the Service its IPs: the ones it holds when they still fit
// (adding a missing family from the same pool), else the requested ones, or
// the best pool's lowest free address (an IP shared under the same
// allow-shared-ip key first). Errors are *Error with the condition reason;
// when a held address no longer fits the error wraps ErrHeldAddressUnfit and
// nothing changes: Allocate never releases, so an IP still shown in a status
// is never handed to another Service.
func (a *Allocator) Allocate(req Request) (Result, error) {
	defer a.checked("Allocate")
	a.idx.setTenant(req.Service, req.tenant())
	d := a.plan(req)
	switch o := d.outcome; o.kind {
	case release:
		return Result{}, fmt.Errorf("service %s: %s: %w", req.Service, o.why, ErrHeldAddressUnfit)
	case keepOutside:
		return Result{IPs: slices.Clone(d.held), Outside: o.why}, nil
	case keepShort, refuse:
		return Result{}, o.err
	}
	// A grant.
	c := d.outcome.chosen
	res := Result{IPs: slices.Clone(c.ips), Pool: c.pool.name, Across: d.outcome.across}
	for _, ip := range res.IPs {
		if !slices.Contains(d.held, ip) {
			res.New = true
		}
		if r, ok := a.idx.unkeep(ip); ok {
			res.Kept = append(res.Kept, r)
		}
		a.idx.hold(ip, req.Service, req.Sharing)
	}
	return res, nil
}

// Explain says what Allocate would do for req, pool by pool, without
// changing anything.
func (a *Allocator) Explain(req Request) Explanation {
	defer a.checked("Explain")
	d := a.plan(req)
	x := Explanation{IPs: d.held}
	for _, e := range d.evals {
		v := e.verdict
		if e.err != nil && e.err.Detail != "" {
			v.Message += " (" + e.err.Detail + ")"
		}
		x.Verdicts = append(x.Verdicts, v)
	}
	x.Reason, x.Decision = d.explain()
	if d.outcome.kind == grant {
		x.Decision += a.keptExplained(req, d.outcome.chosen.ips)
	}
	return x
}

// keptExplained says, for operators, which of the addresses a grant gives
// req are kept (kept.go): back for it, requested from another Service of
// its namespace, or — its pool having nothing else — from the Service that
// released it.
func (a *Allocator) keptExplained(req Request, ips []netip.Addr) string {
	var out string
	for _, ip := range ips {
		st := a.idx.ips[ip]
		if st == nil || st.reservation == nil || !st.reservation.Kept {
			continue
		}
		r := st.reservation
		switch {
		case keptForRequest(r, req):
			out += fmt.Sprintf(" %s is kept for it since its release at %s, until %s: it gets it back.", ip, r.CreatedAt.UTC().Format(time.RFC3339), a.KeptUntil(*r).UTC().Format(time.RFC3339))
		case TookOnRequest(req, Reservation{IP: ip, ForService: r.ForService, Kept: true, SharingKey: r.SharingKey, Tenant: r.Tenant}):
			out += fmt.Sprintf(" %s is kept for Service %s, which released it at %s: it requests it and is of the same namespace, so it takes it, ending the keep.", ip, r.ForService, r.CreatedAt.UTC().Format(time.RFC3339))
		default:
			out += fmt.Sprintf(" %s is kept for Service %s, which released it at %s: the pool has no other free address, so it takes it.", ip, r.ForService, r.CreatedAt.UTC().Format(time.RFC3339))
		}
	}
	return out
}

// explain says what the plan settles on: the condition reason and the
// decision in words.
func (d *decision) explain() (Reason, string) {
	o, held := d.outcome, addrList(d.held)
	switch o.kind {
	case keepOutside:
		return ReasonHeldOutsidePool, fmt.Sprintf("The Service keeps %s, held outside its pool: %s. ipam never moves an address a Service holds; "+
			"to move it, request an address (%s) or name a pool (%s).", held, o.why, AnnotationLoadBalancerIPs, AnnotationAddressPool)
	case release:
		return ReasonAllocated, fmt.Sprintf("The Service holds %s, but %s; ipam will release it and choose again.", held, strings.TrimPrefix(o.why, "it holds "+held+", but "))
	case keepShort:
		return ReasonAllocated, capitalize(o.err.Message) + "."
	case refuse:
		s := fmt.Sprintf("The Service gets no IP (%s): %s.", o.err.Reason, o.err.Message)
		if o.err.Detail != "" {
			s += " For operators: " + o.err.Detail + "."
		}
		return o.err.Reason, s
	}
	// A grant.
	switch c := o.chosen; {
	case len(o.across) > 0:
		return ReasonHeldSharedAcrossNamespaces, fmt.Sprintf("The Service holds %s from pool %s; %s.", held, c.pool.name, AcrossMessage(o.across))
	case len(d.held) > 0 && slices.Equal(d.held, sortedAddrs(c.ips)):
		return ReasonAllocated, fmt.Sprintf("The Service holds %s from pool %s.", held, c.pool.name)
	default:
		return ReasonAllocated, fmt.Sprintf("The Service gets %s from pool %s.", addrList(c.ips), c.pool.name)
	}
}

func sortedAddrs(ips []netip.Addr) []netip.Addr {
	s := slices.Clone(ips)
	slices.SortFunc(s, netip.Addr.Compare)
	return s
}

func capitalize(s string) string {
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}

// IsUnfit reports whether err says a held address no longer fits.
func IsUnfit(err error) bool { return errors.Is(err, ErrHeldAddressUnfit) }

// whyNotAllocatable says why pool no longer hands out ip, which it contains.
func (a *Allocator) whyNotAllocatable(pool string, ip netip.Addr) string {
	p := a.pools.byName[pool]
	if why := p.unusableWhy(ip); why != "" {
		return "it is " + why
	}
	return "avoidBuggyIPs skips addresses ending in .0 or .255"
}
