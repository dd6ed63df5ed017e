package allocator

import (
	"fmt"
	"net/netip"
	"strings"
)

// Claims: addresses Services request, kept from everyone else's
// automatic allocation while they wait their turn.

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
