package allocator

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"time"
)

// Allocate and Explain: the plan of one request (plan, planHeld,
// planFresh) settles on one outcome, which Allocate carries out and
// Explain words; the choice among pools and addresses is pick.go's.

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
