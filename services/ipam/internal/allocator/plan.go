package allocator

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
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
	n := need{requested: map[Family]netip.Addr{}}
	for _, ip := range req.RequestedIPs {
		if !ip.IsValid() || ip.Zone() != "" || ip.Is4In6() || ip.IsUnspecified() {
			return need{}, invalid("requested IP %q is not a plain IPv4 or IPv6 address", ip)
		}
		f := FamilyOf(ip)
		if prev, ok := n.requested[f]; ok {
			return need{}, invalid("requested IPs %s and %s are both %s; request at most one IP per family", prev, ip, f)
		}
		n.requested[f] = ip
	}
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

// evaluate runs the pool checks, in the order a user would want them
// explained, and picks the addresses this pool would give.
func (a *Allocator) evaluate(p *Pool, req Request, n need) eval {
	e := eval{pool: p, verdict: Verdict{Pool: p.name}}
	no := func(r VerdictReason, format string, args ...any) eval {
		e.verdict.Reason = r
		e.verdict.Message = fmt.Sprintf(format, args...)
		return e
	}
	if c, ok := a.conflictOf[p.name]; ok {
		return no(VerdictConflicting, "pool %s is Conflicting: %s", p.name, c.Message)
	}
	if req.Pool != "" && req.Pool != p.name {
		return no(VerdictNotRequested, "the Service asks for pool %s (%s)", req.Pool, AnnotationAddressPool)
	}
	for _, f := range []Family{IPv4, IPv6} {
		ip, ok := n.requested[f]
		if !ok {
			continue
		}
		if !p.Contains(ip) {
			return no(VerdictRequestedIPNotInPool, "pool %s does not contain the requested IP %s", p.name, ip)
		}
		if p.spec.AvoidBuggyIPs && buggy(ip) && !n.held {
			return no(VerdictRequestedIPNotInPool, "pool %s has avoidBuggyIPs set, so it never hands out %s (an address ending in .0 or .255); request another IP", p.name, ip)
		}
		if why := p.unusableWhy(ip); why != "" && !n.held {
			return no(VerdictRequestedIPNotInPool, "pool %s never hands out %s: it is %s; request another IP", p.name, ip, why)
		}
	}
	ns, _, _ := strings.Cut(req.Service, "/")
	if !p.servesNamespace(ns, req.NamespaceLabels) {
		return no(VerdictNamespaceMismatch, "pool %s serves only %s; the Service is in namespace %s", p.name, describeNamespaces(p.spec), ns)
	}
	if !p.servesService(req.ServiceLabels) {
		return no(VerdictServiceSelectorMismatch, "pool %s serves only Services matching its serviceSelectors, and this Service's labels match none", p.name)
	}
	if req.Pool == "" && len(n.requested) == 0 && !p.spec.AutoAssign {
		return no(VerdictAutoAssignOff, "pool %s has autoAssign false: it serves only Services that name it in %s or request one of its IPs", p.name, AnnotationAddressPool)
	}
	if p.spec.Terminating && !n.held {
		return no(VerdictTerminating, "pool %s is being deleted: it hands out no new address", p.name)
	}
	for _, f := range n.required {
		if !p.HasFamily(f) {
			return no(VerdictFamilyMismatch, "pool %s has no %s addresses, and the Service needs %s (ipFamilyPolicy %s)", p.name, f, familyList(n.required), policyName(req.FamilyPolicy))
		}
	}
	if len(n.required) == 0 && !slices.ContainsFunc(n.optional, p.HasFamily) {
		return no(VerdictFamilyMismatch, "pool %s has no %s addresses (ipFamilyPolicy %s)", p.name, n.wanted(), policyName(req.FamilyPolicy))
	}
	// Each new address counts against the namespace's quota in this pool,
	// those of this request too (a dual-stack Service takes two).
	fresh := func() int {
		n := 0
		for _, c := range e.ips {
			if !a.nsAddrs.has(p.name, ns, c) {
				n++
			}
		}
		return n
	}
	overQuota := func(ip netip.Addr) bool { return a.overQuota(p, ns, ip, fresh()) }
	quota := func() eval {
		return no(VerdictNamespaceQuota, "%s", quotaMessage(p, ns, a.nsAddrs.count(p.name, ns), fresh()+1))
	}
	for _, f := range n.required {
		if ip, ok := n.requested[f]; ok {
			if err := a.usable(ip, req.Service, req.Sharing, n.held); err != nil {
				e.err = err
				return no(VerdictRequestedIPInUse, "%s", err.Message)
			}
			if !n.held && overQuota(ip) {
				return quota()
			}
			e.ips = append(e.ips, ip)
			continue
		}
		ip, ok := a.pick(p, f, e.ips, req)
		if ok && overQuota(ip) {
			return quota()
		}
		if !ok && p.spec.Terminating {
			return no(VerdictExhausted, "pool %s is being deleted and hands out no new address", p.name)
		}
		if !ok {
			u, _ := a.Usage(p.name)
			fu := u.IPv4
			if f == IPv6 {
				fu = u.IPv6
			}
			more := ""
			if fu.Used.Cmp(fu.Total) < 0 {
				more = ", the others are requested by other Services"
			}
			return no(VerdictExhausted, "pool %s has no free %s address (%s of %s in use%s)", p.name, f, fu.Used, fu.Total, more)
		}
		e.ips = append(e.ips, ip)
	}
	e.full = true
	quotaHit := false
	for _, f := range n.optional {
		ip, ok := netip.Addr{}, false
		if p.HasFamily(f) {
			ip, ok = a.pick(p, f, e.ips, req)
		}
		if ok && overQuota(ip) {
			ok, quotaHit = false, true
		}
		if !ok {
			e.full = false
			continue
		}
		e.ips = append(e.ips, ip)
	}
	if len(e.ips) == 0 {
		// PreferDualStack with nothing required, and neither family free.
		if quotaHit {
			return quota()
		}
		return no(VerdictExhausted, "pool %s has no free %s address", p.name, n.wanted())
	}
	slices.SortStableFunc(e.ips, func(x, y netip.Addr) int {
		return slices.Index(n.order, FamilyOf(x)) - slices.Index(n.order, FamilyOf(y))
	})
	e.primary = len(n.order) > 0 && FamilyOf(e.ips[0]) == n.order[0]
	e.verdict.Eligible = true
	e.verdict.Reason = VerdictSelected
	return e
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
// Service already holds, else the lowest IP held under the same sharing key
// that it may share, else the lowest free address. chosen are this
// request's earlier picks (never of family f).
func (a *Allocator) pick(p *Pool, f Family, chosen []netip.Addr, req Request) (netip.Addr, bool) {
	for _, ip := range a.bySvc[req.Service] {
		if FamilyOf(ip) == f && p.allocatable(ip) {
			return ip, true
		}
	}
	if p.spec.Terminating {
		return netip.Addr{}, false
	}
	if key := req.Sharing.Key; key != "" {
		var best netip.Addr
		for ip := range a.byShare[key] {
			if FamilyOf(ip) != f || !p.allocatable(ip) || (best.IsValid() && ip.Compare(best) >= 0) {
				continue
			}
			if a.usable(ip, req.Service, req.Sharing, false) == nil && !a.claimedByOther(ip, req.Service) {
				best = ip
			}
		}
		if best.IsValid() {
			return best, true
		}
	}
	return a.lowestFree(p, f, req.Service)
}

// lowestFree returns the lowest address of family f in p that is neither
// held, reserved, claimed by a Service other than service, nor skipped by
// avoidBuggyIPs. It hops over taken intervals, so its cost depends on how
// fragmented the taken set is and on the claims in the way, never on the
// pool's size.
func (a *Allocator) lowestFree(p *Pool, f Family, service string) (netip.Addr, bool) {
	for _, r := range p.ranges {
		if FamilyOf(r.first) != f {
			continue
		}
		lo := r.first
		for {
			c, ok := a.taken.firstAbsent(lo, r.last)
			if !ok {
				break
			}
			next := c.Next()
			switch u := p.unusableRange(c); {
			case u != nil:
				next = u.last.Next() // hop over a whole block (127.0.0.0/8)
			case !(p.spec.AvoidBuggyIPs && buggy(c)) && !(a.claimed.contains(c) && a.claimedByOther(c, service)):
				return c, true
			}
			if lo = next; !lo.IsValid() || lo.Compare(r.last) > 0 {
				break
			}
		}
	}
	return netip.Addr{}, false
}

// decision is the outcome of planning one request.
type decision struct {
	evals  []eval
	chosen *eval
	held   []netip.Addr // what the Service holds now
	unfit  string       // why held addresses no longer fit ("" = they fit)
	// outside says why the held addresses are kept outside their pool's
	// rules ("" = they are not): the Service keeps them, nothing is added.
	outside string
	// across are the held addresses shared with a Service of another
	// namespace without both agreeing: a share from before sharing was kept
	// within a namespace, which the Service keeps (see Result.Across).
	across []netip.Addr
	err    *Error
}

// plan works out what Allocate would do, changing nothing.
func (a *Allocator) plan(req Request) decision {
	var d decision
	n, err := needsOf(req)
	if err != nil {
		d.err = err
		return d
	}
	d.held = slices.Clone(a.bySvc[req.Service])
	if len(d.held) > 0 {
		return a.planHeld(req, n, d)
	}
	d.evals = a.evaluateAll(req, n)
	// The first eligible pool in rank order (pinned, then priority) wins;
	// among pools of one rank, one giving every family the Service prefers
	// (PreferDualStack), then its first family. Rank before families: an
	// operator's pinning and priorities are never defeated by a pool that
	// happens to offer both families.
	for i := range d.evals {
		e := &d.evals[i]
		if !e.verdict.Eligible {
			continue
		}
		if d.chosen == nil || sameRank(e.pool, d.chosen.pool) && e.fit() > d.chosen.fit() {
			d.chosen = e
		}
	}
	if d.chosen == nil {
		d.err = a.failure(req, n, d.evals)
		return d
	}
	a.markChosen(&d, "")
	return d
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

// evaluateAll evaluates every pool: serving pools in rank order, then the
// Conflicting ones by name.
func (a *Allocator) evaluateAll(req Request, n need) []eval {
	out := make([]eval, 0, len(a.pools))
	for _, p := range a.ranked {
		out = append(out, a.evaluate(p, req, n))
	}
	var conflicting []string
	for name := range a.conflictOf {
		conflicting = append(conflicting, name)
	}
	slices.Sort(conflicting)
	for _, name := range conflicting {
		out = append(out, a.evaluate(a.pools[name], req, n))
	}
	return out
}

// markChosen turns the chosen eval's verdict into Selected and every other
// eligible one into NotChosen.
func (a *Allocator) markChosen(d *decision, selectedMsg string) {
	c := d.chosen
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
// no longer allows. Whatever an operator does to the pools — shrink, delete,
// invalidate, re-select, avoidBuggyIPs — the Service keeps what it holds
// ("held outside its pool", d.outside) and nothing else is handed its IP.
func (a *Allocator) planHeld(req Request, n need, d decision) decision {
	pool := ""
	for i, ip := range d.held {
		f := FamilyOf(ip)
		st := a.ips[ip]
		switch {
		case !n.wants(f):
			d.unfit = fmt.Sprintf("it holds %s, but it now asks only for %s", ip, familyList(n.required))
		case n.requested[f].IsValid() && n.requested[f] != ip:
			d.unfit = fmt.Sprintf("it holds %s, but it now requests %s", ip, n.requested[f])
		case req.Pool != "" && st != nil && st.origin != "" && st.origin != req.Pool:
			d.unfit = fmt.Sprintf("it holds %s from pool %s, but it now asks for pool %s (%s)", ip, st.origin, req.Pool, AnnotationAddressPool)
		case st == nil || st.pool == "":
			d.outside = fmt.Sprintf("%s is no longer in any serving IPPool", ip)
		case req.Pool != "" && st.pool != req.Pool && d.outside == "":
			// Given by the pool the Service names (or before anyone knew);
			// a pool edit has put it in another pool since.
			d.outside = fmt.Sprintf("%s now lies in pool %s, and the Service asks for pool %s", ip, st.pool, req.Pool)
		case !a.pools[st.pool].allocatable(ip) && d.outside == "":
			d.outside = fmt.Sprintf("%s is in pool %s, which no longer hands it out (%s)", ip, st.pool, a.whyNotAllocatable(st.pool, ip))
		case i > 0 && st.pool != pool && d.outside == "":
			d.outside = fmt.Sprintf("%s is in pool %s and %s in pool %s, and one Service takes its addresses from one pool", d.held[0], pool, ip, st.pool)
		}
		if d.unfit != "" {
			d.outside = "" // the Service's own change wins: it is released
			return d
		}
		if st != nil && pool == "" {
			pool = st.pool
		}
	}
	// Evaluate the holding pool as if the held IPs were requested: that
	// checks the pool name, namespace, selectors and sharing again.
	hn := need{order: n.order, required: slices.Clone(n.required), optional: slices.Clone(n.optional), requested: map[Family]netip.Addr{}, held: true}
	for _, ip := range d.held {
		f := FamilyOf(ip)
		hn.requested[f] = ip
		hn.require(f)
	}
	d.evals = a.evaluateAll(req, hn)
	fresh := a.evaluateAll(req, n)
	var holding *eval
	for i := range d.evals {
		if d.evals[i].pool.name == pool && pool != "" {
			holding = &d.evals[i]
			continue
		}
		// Evaluated as requested IPs, the other pools said "does not contain
		// the requested IP"; say instead what they would say on their own.
		d.evals[i] = fresh[i]
	}
	if d.outside != "" {
		return d
	}
	switch v := holding.verdict; {
	case v.Eligible:
		d.chosen = holding
		d.across = a.sharedAcross(req.Service, req.Sharing)
		a.markChosen(&d, fmt.Sprintf("the Service holds %s from pool %s", addrList(d.chosen.ips), pool))
	case v.Reason == VerdictExhausted:
		// It keeps what it holds; the missing family waits.
		d.err = &Error{Reason: ReasonPoolExhausted, Message: fmt.Sprintf("the Service keeps %s, but %s", addrList(d.held), v.Message)}
	case v.Reason == VerdictNamespaceQuota:
		d.err = &Error{Reason: ReasonNamespaceQuotaExceeded, Message: fmt.Sprintf("the Service keeps %s, but %s", addrList(d.held), v.Message)}
	case v.Reason == VerdictFamilyMismatch:
		// The Service wants a family its pool has no addresses of: it asked
		// for more (dual-stack), or the pool lost a family. Either way it
		// keeps what it holds, and says how to move.
		d.err = &Error{Reason: ReasonNoMatchingPool, Message: fmt.Sprintf("the Service keeps %s, but %s; to move to another pool, name it (%s) or request its addresses (%s)",
			addrList(d.held), v.Message, AnnotationAddressPool, AnnotationLoadBalancerIPs)}
	case v.Reason == VerdictNotRequested || v.Reason == VerdictRequestedIPInUse:
		// The Service's own request changed: it asked for it.
		d.unfit = fmt.Sprintf("it holds %s, but %s", addrList(d.held), v.Message)
	default:
		// The pool changed (selectors, avoidBuggyIPs): never a reason to move.
		d.outside = v.Message
	}
	return d
}

// sharedAcross returns the addresses service holds together with a Service
// of another namespace that it may share with but for the namespace rule
// (shareProblem's keptAcross).
func (a *Allocator) sharedAcross(service string, sh Sharing) []netip.Addr {
	var out []netip.Addr
	for _, ip := range a.bySvc[service] {
		for _, h := range a.ips[ip].holders {
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
			p := a.index.lookup(ip)
			if p == nil {
				msg := fmt.Sprintf("the requested IP %s is in no IPPool", ip)
				for _, name := range sortedKeys(a.conflictOf) {
					if a.pools[name].Contains(ip) {
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
		return &Error{Reason: ReasonNoMatchingPool, Message: fmt.Sprintf("there is no IPPool named %q (%s); create it or fix the annotation", req.Pool, AnnotationAddressPool)}
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
	d := a.plan(req)
	if d.unfit != "" {
		return Result{}, fmt.Errorf("service %s: %s: %w", req.Service, d.unfit, ErrHeldAddressUnfit)
	}
	if d.outside != "" {
		return Result{IPs: slices.Clone(d.held), Outside: d.outside}, nil
	}
	if d.err != nil {
		return Result{}, d.err
	}
	res := Result{IPs: slices.Clone(d.chosen.ips), Pool: d.chosen.pool.name, Across: d.across}
	for _, ip := range res.IPs {
		if !slices.Contains(d.held, ip) {
			res.New = true
		}
		a.hold(ip, req.Service, req.Sharing)
	}
	return res, nil
}

// Explain says what Allocate would do for req, pool by pool, without
// changing anything.
func (a *Allocator) Explain(req Request) Explanation {
	d := a.plan(req)
	x := Explanation{IPs: d.held}
	for _, e := range d.evals {
		v := e.verdict
		if e.err != nil && e.err.Detail != "" {
			v.Message += " (" + e.err.Detail + ")"
		}
		x.Verdicts = append(x.Verdicts, v)
	}
	switch {
	case d.outside != "":
		x.Reason = ReasonHeldOutsidePool
		x.Decision = fmt.Sprintf("The Service keeps %s, held outside its pool: %s. ipam never moves an address a Service holds; "+
			"to move it, request an address (%s) or name a pool (%s).", addrList(d.held), d.outside, AnnotationLoadBalancerIPs, AnnotationAddressPool)
	case d.unfit != "":
		x.Reason = ReasonAllocated
		x.Decision = fmt.Sprintf("The Service holds %s, but %s; ipam will release it and choose again.", addrList(d.held), strings.TrimPrefix(d.unfit, "it holds "+addrList(d.held)+", but "))
	case d.err != nil && len(d.held) > 0:
		x.Reason = ReasonAllocated
		x.Decision = capitalize(d.err.Message) + "."
	case d.err != nil:
		x.Reason = d.err.Reason
		x.Decision = fmt.Sprintf("The Service gets no IP (%s): %s.", d.err.Reason, d.err.Message)
		if d.err.Detail != "" {
			x.Decision += " For operators: " + d.err.Detail + "."
		}
	case len(d.across) > 0:
		x.Reason = ReasonHeldSharedAcrossNamespaces
		x.Decision = fmt.Sprintf("The Service holds %s from pool %s; %s.", addrList(d.held), d.chosen.pool.name, AcrossMessage(d.across))
	case len(d.held) > 0 && slices.Equal(d.held, sortedAddrs(d.chosen.ips)):
		x.Reason = ReasonAllocated
		x.Decision = fmt.Sprintf("The Service holds %s from pool %s.", addrList(d.held), d.chosen.pool.name)
	default:
		x.Reason = ReasonAllocated
		x.Decision = fmt.Sprintf("The Service gets %s from pool %s.", addrList(d.chosen.ips), d.chosen.pool.name)
	}
	return x
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
	p := a.pools[pool]
	if why := p.unusableWhy(ip); why != "" {
		return "it is " + why
	}
	return "avoidBuggyIPs skips addresses ending in .0 or .255"
}
