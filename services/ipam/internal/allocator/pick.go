package allocator

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
)

// One pool's verdict on a request (evaluate) and the addresses it would
// give (picker, pick, lowestFree): the choice Allocate plans with.

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
