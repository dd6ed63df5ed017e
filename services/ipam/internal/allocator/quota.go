package allocator

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
)

// poolNS is one namespace's share of one serving pool.
type poolNS struct{ pool, namespace string }

// nsAddrs counts, per serving pool and namespace, the distinct addresses
// that the namespace's Services hold or request (claim) in it, or that are
// kept for them (kept.go); a Service serving a Gateway of another namespace
// is that namespace's (Request.Namespace, SetTenant): what a pool's maxAddressesPerNamespace caps. A
// claim counts because a requested address is kept from everyone else's
// auto allocation: uncounted, a namespace under its quota could block a
// whole pool by requesting every address of it. A kept address counts so
// that creating and deleting Services cannot pile up kept addresses past
// the cap; a namespace at its cap takes its own kept addresses (lowestFree). An
// address held and requested, or held by two Services of the namespace,
// counts once (refs counts its references).
//
// Only the pools that set a cap are counted (capped): the others would
// cost a map entry per held address (≈ 150 B, a third of what the
// allocator keeps per address) that nothing reads. SetPools recounts when
// a cap appears.
type nsAddrs struct {
	refs   map[poolNS]map[netip.Addr]int
	capped map[string]bool
}

func (n *nsAddrs) add(pool, namespace string, ip netip.Addr) {
	if !n.capped[pool] {
		return
	}
	k := poolNS{pool, namespace}
	if n.refs == nil {
		n.refs = map[poolNS]map[netip.Addr]int{}
	}
	m := n.refs[k]
	if m == nil {
		m = map[netip.Addr]int{}
		n.refs[k] = m
	}
	m[ip]++
}

func (n *nsAddrs) remove(pool, namespace string, ip netip.Addr) {
	k := poolNS{pool, namespace}
	m := n.refs[k]
	if m == nil || m[ip] == 0 {
		return
	}
	if m[ip]--; m[ip] == 0 {
		delete(m, ip)
	}
	if len(m) == 0 {
		delete(n.refs, k)
	}
}

// count is how many addresses of pool the namespace holds or requests.
func (n *nsAddrs) count(pool, namespace string) int { return len(n.refs[poolNS{pool, namespace}]) }

// has reports whether ip already counts for the namespace in pool.
func (n *nsAddrs) has(pool, namespace string, ip netip.Addr) bool {
	return n.refs[poolNS{pool, namespace}][ip] > 0
}

// NamespaceUse is one namespace's count of a pool's addresses.
type NamespaceUse struct {
	Namespace string
	Addresses int
}

// AtQuota lists, by namespace, the namespaces that hold or request as many
// addresses of pool as its maxAddressesPerNamespace allows (or more: the
// quota was lowered under them, and nothing is taken back). Empty when the
// pool sets no quota.
func (a *Allocator) AtQuota(pool string) []NamespaceUse {
	p := a.pools.byName[pool]
	if p == nil || p.spec.MaxAddressesPerNamespace <= 0 {
		return nil
	}
	var out []NamespaceUse
	for k, m := range a.idx.nsAddrs.refs {
		if k.pool == pool && len(m) >= p.spec.MaxAddressesPerNamespace {
			out = append(out, NamespaceUse{Namespace: k.namespace, Addresses: len(m)})
		}
	}
	slices.SortFunc(out, func(x, y NamespaceUse) int { return strings.Compare(x.Namespace, y.Namespace) })
	return out
}

// overQuota says whether giving ip of pool p to a Service of namespace ns,
// beside fresh other new addresses of the same request, would take the
// namespace past the pool's maxAddressesPerNamespace: only a new address
// counts, never one the namespace already holds or requests.
func (a *Allocator) overQuota(p *Pool, ns string, ip netip.Addr, fresh int) bool {
	max := p.spec.MaxAddressesPerNamespace
	return max > 0 && !a.idx.nsAddrs.has(p.name, ns, ip) && a.idx.nsAddrs.count(p.name, ns)+fresh >= max
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
