package allocator

import (
	"fmt"
	"maps"
	"math/big"
	"net/netip"
	"slices"
	"strings"
)

// checkIndexes makes every operation of every Allocator check its indexes
// afterwards and panic when they disagree. The allocator's tests and
// fuzzers set it (TestMain); production never does: a check costs a scan
// of every address.
var checkIndexes bool

// checked panics, when checkIndexes is set, if op left the indexes
// disagreeing. Every exported method that changes the allocator defers it.
func (a *Allocator) checked(op string) {
	if !checkIndexes {
		return
	}
	if err := a.idx.check(); err != nil {
		panic(fmt.Sprintf("allocator: %s left the indexes inconsistent: %v", op, err))
	}
}

// check states every invariant of the indexes: each agrees with ips, the
// primary record, and with the pools; nil when they all hold. The error
// starts with the name of the index that disagrees.
func (x *indexes) check() error {
	for _, c := range []struct {
		index string
		check func() error
	}{
		{"ips", x.checkIPs},
		{"taken", x.checkTaken},
		{"bySvc", x.checkBySvc},
		{"byShare", x.checkByShare},
		{"foreign", x.checkForeign},
		{"claims", x.checkClaims},
		{"counts", x.checkCounts},
		{"nsAddrs", x.checkNamespaces},
		{"tenants", x.checkTenants},
		{"outside", x.checkOutside},
		{"kept", x.checkKept},
		{"freed", x.checkFreed},
	} {
		if err := c.check(); err != nil {
			return fmt.Errorf("%s: %w", c.index, err)
		}
	}
	return nil
}

// checkIPs: every address is held, reserved or shown by a foreign Service,
// attributed to the serving pool containing it, held by distinct Services
// in order that may share it, and reserved for none but its holders.
func (x *indexes) checkIPs() error {
	for ip, st := range x.ips {
		if st == nil || len(st.holders) == 0 && st.reservation == nil && len(x.foreignAt[ip]) == 0 {
			return fmt.Errorf("%s kept with neither holder, reservation nor foreign Service", ip)
		}
		if name := x.poolName(ip); st.pool != name {
			return fmt.Errorf("%s attributed to pool %q, lies in %q", ip, st.pool, name)
		}
		if !slices.IsSortedFunc(st.holders, func(g, h holder) int { return strings.Compare(g.service, h.service) }) ||
			len(slices.CompactFunc(slices.Clone(st.holders), func(g, h holder) bool { return g.service == h.service })) != len(st.holders) {
			return fmt.Errorf("%s holders %v not sorted and distinct", ip, st.holders)
		}
		for i, h := range st.holders {
			if r := st.reservation; r != nil && r.ForService != h.service {
				return fmt.Errorf("%s reserved for %q but held by %s", ip, r.ForService, h.service)
			}
			for _, o := range st.holders[i+1:] {
				// A share across namespaces without opt-in is one Assign
				// kept (from before the rule); Allocate never makes one.
				why, kept := shareProblem(h, o.service, sharingOf(o))
				rwhy, rkept := shareProblem(o, h.service, sharingOf(h))
				if why != "" && !kept || rwhy != "" && !rkept {
					return fmt.Errorf("%s held by %s and %s, which may not share: %s", ip, h.service, o.service, strings.Join(slices.DeleteFunc([]string{why, rwhy}, func(s string) bool { return s == "" }), "; "))
				}
			}
		}
	}
	return nil
}

// sharingOf is the sharing info h was held with.
func sharingOf(h holder) Sharing {
	if h.shared == nil {
		return Sharing{}
	}
	return *h.shared
}

// checkTaken: taken is the set of the addresses of ips.
func (x *indexes) checkTaken() error {
	for ip := range x.ips {
		if !x.taken.contains(ip) {
			return fmt.Errorf("%s held or reserved but not taken", ip)
		}
	}
	if n := setSize(&x.taken); n.Cmp(big.NewInt(int64(len(x.ips)))) != 0 {
		return fmt.Errorf("%s addresses taken, %d held or reserved", n, len(x.ips))
	}
	return nil
}

// setSize is the number of addresses in s.
func setSize(s *addrSet) *big.Int {
	n := new(big.Int)
	for _, r := range s.ranges() {
		n.Add(n, r.size())
	}
	return n
}

// checkBySvc: bySvc lists, for each Service, exactly the addresses it
// holds, at most one per family, in order.
func (x *indexes) checkBySvc() error {
	for ip, st := range x.ips {
		for _, h := range st.holders {
			if !slices.Contains(x.bySvc[h.service], ip) {
				return fmt.Errorf("%s holder %s missing", ip, h.service)
			}
		}
	}
	for svc, held := range x.bySvc {
		if len(held) == 0 || len(held) > 2 || len(held) == 2 && FamilyOf(held[0]) == FamilyOf(held[1]) ||
			!slices.IsSortedFunc(held, netip.Addr.Compare) {
			return fmt.Errorf("%s holds %v", svc, held)
		}
		for _, ip := range held {
			if st := x.ips[ip]; st == nil || !slices.ContainsFunc(st.holders, func(h holder) bool { return h.service == svc }) {
				return fmt.Errorf("%s listed for %s, which does not hold it", ip, svc)
			}
		}
	}
	return nil
}

// checkByShare: byShare lists, for each sharing key, exactly the addresses
// a holder holds under it.
func (x *indexes) checkByShare() error {
	for key, set := range x.byShare {
		if len(set) == 0 {
			return fmt.Errorf("sharing key %q lists no address", key)
		}
		for ip := range set {
			if st := x.ips[ip]; st == nil || !slices.ContainsFunc(st.holders, func(h holder) bool { return h.key() == key }) {
				return fmt.Errorf("%s listed under sharing key %q that no holder has", ip, key)
			}
		}
	}
	for ip, st := range x.ips {
		for _, h := range st.holders {
			if _, ok := x.byShare[h.key()][ip]; h.key() != "" && !ok {
				return fmt.Errorf("%s held by %s with key %q, missing", ip, h.service, h.key())
			}
		}
	}
	return nil
}

// checkForeign: foreignOf and foreignAt are inverses, and every address a
// foreign Service shows is in ips.
func (x *indexes) checkForeign() error {
	for ip, services := range x.foreignAt {
		if len(services) == 0 || !slices.IsSorted(services) || x.ips[ip] == nil {
			return fmt.Errorf("foreignAt %s: %v (in ips: %v)", ip, services, x.ips[ip] != nil)
		}
		for _, s := range services {
			if !slices.Contains(x.foreignOf[s], ip) {
				return fmt.Errorf("foreignAt %s names %s, whose foreignOf lacks it", ip, s)
			}
		}
	}
	for s, ips := range x.foreignOf {
		if len(ips) == 0 {
			return fmt.Errorf("foreignOf %s is empty", s)
		}
		for _, ip := range ips {
			if _, found := slices.BinarySearch(x.foreignAt[ip], s); !found {
				return fmt.Errorf("foreignOf %s names %s, whose foreignAt lacks it", s, ip)
			}
		}
	}
	return nil
}

// checkClaims: claims and claimsOf are inverses, and claimed is the set of
// the claimed addresses.
func (x *indexes) checkClaims() error {
	for ip, m := range x.claims {
		if len(m) == 0 || !x.claimed.contains(ip) {
			return fmt.Errorf("claim of %s: %v, in claimed %v", ip, m, x.claimed.contains(ip))
		}
		for svc := range m {
			if !slices.Contains(x.claimsOf[svc], ip) {
				return fmt.Errorf("claim of %s by %s missing from claimsOf", ip, svc)
			}
		}
	}
	for svc, ips := range x.claimsOf {
		if len(ips) == 0 || hasDuplicate(ips) {
			return fmt.Errorf("claimsOf %s: %v", svc, ips)
		}
		for _, ip := range ips {
			if _, ok := x.claims[ip][svc]; !ok {
				return fmt.Errorf("claimsOf %s names %s, whose claims lack it", svc, ip)
			}
		}
	}
	if n := setSize(&x.claimed); n.Cmp(big.NewInt(int64(len(x.claims)))) != 0 {
		return fmt.Errorf("%s addresses in claimed, %d claimed", n, len(x.claims))
	}
	return nil
}

// hasDuplicate reports whether an address appears twice in ips.
func hasDuplicate(ips []netip.Addr) bool {
	s := slices.SortedFunc(slices.Values(ips), netip.Addr.Compare)
	return len(slices.Compact(s)) != len(ips)
}

// checkCounts: every serving pool, and only they, counts the addresses it
// hands out that are used (in ips) and held by a live Service.
func (x *indexes) checkCounts() error {
	used := map[string]*[2]*big.Int{}
	held := map[string]*[2]int64{}
	for _, p := range x.pools.ranked {
		used[p.name] = &[2]*big.Int{new(big.Int), new(big.Int)}
		held[p.name] = &[2]int64{}
	}
	for ip, st := range x.ips {
		p := x.pools.index.lookup(ip)
		if p == nil || !p.allocatable(ip) {
			continue
		}
		i := famIdx(FamilyOf(ip))
		used[p.name][i].Add(used[p.name][i], big.NewInt(1))
		if len(st.holders) > 0 || len(x.foreignAt[ip]) > 0 {
			held[p.name][i]++
		}
	}
	if len(x.counts) != len(used) {
		return fmt.Errorf("%d pools counted, %d serving", len(x.counts), len(used))
	}
	for name, want := range used {
		c := x.counts[name]
		if c == nil {
			return fmt.Errorf("serving pool %s not counted", name)
		}
		if c.used[0].Cmp(want[0]) != 0 || c.used[1].Cmp(want[1]) != 0 || c.held != *held[name] {
			return fmt.Errorf("pool %s used %s/%s held %d/%d, recount used %s/%s held %d/%d",
				name, c.used[0], c.used[1], c.held[0], c.held[1], want[0], want[1], held[name][0], held[name][1])
		}
	}
	return nil
}

// checkNamespaces: nsAddrs is what counting every hold, kept reservation
// and claim of the capped pools from scratch gives.
func (x *indexes) checkNamespaces() error {
	want := x.namespaceCounts()
	if !maps.Equal(x.nsAddrs.capped, want.capped) || !maps.EqualFunc(x.nsAddrs.refs, want.refs, maps.Equal) {
		return fmt.Errorf("kept %v (capped %v), recounted %v (capped %v)", x.nsAddrs.refs, x.nsAddrs.capped, want.refs, want.capped)
	}
	return nil
}

// checkTenants: tenants names only Services counted outside their own
// namespace.
func (x *indexes) checkTenants() error {
	for svc, ns := range x.tenants {
		if ns == "" || ns == namespaceOf(svc) {
			return fmt.Errorf("%s counted against %q, its own namespace", svc, ns)
		}
	}
	return nil
}

// checkOutside: outside is what counting the held addresses outside their
// pool from scratch gives.
func (x *indexes) checkOutside() error {
	if want := x.outsideCounts(); !maps.Equal(x.outside, want) {
		return fmt.Errorf("kept %v, recounted %v", x.outside, want)
	}
	return nil
}

// checkKept: the kept index lists exactly the kept reservations of ips, by
// Service, sharing key and age.
func (x *indexes) checkKept() error {
	n := 0
	for ip, st := range x.ips {
		r := st.reservation
		if r == nil || !r.Kept {
			if _, ok := x.kept.all[ip]; ok {
				return fmt.Errorf("%s listed, not kept", ip)
			}
			continue
		}
		n++
		if e, ok := x.kept.all[ip]; !ok || !e.at.Equal(r.CreatedAt) || e.ns != r.tenant() {
			return fmt.Errorf("%s kept for %s since %s, listed %v (%v)", ip, r.ForService, r.CreatedAt, e, ok)
		}
		if !slices.Contains(x.kept.byService[r.ForService], ip) {
			return fmt.Errorf("%s kept for %s, missing from byService", ip, r.ForService)
		}
		if k := shareKey(namespaceOf(r.ForService), r.SharingKey); r.SharingKey != "" && !slices.Contains(x.kept.byShare[k], ip) {
			return fmt.Errorf("%s kept under sharing key %q, missing from byShare", ip, r.SharingKey)
		}
	}
	if len(x.kept.all) != n {
		return fmt.Errorf("%d listed, %d kept", len(x.kept.all), n)
	}
	for what, m := range map[string]map[string][]netip.Addr{"byService": x.kept.byService, "byShare": x.kept.byShare} {
		for k, ips := range m {
			for _, ip := range ips {
				if _, ok := x.kept.all[ip]; !ok || len(ips) == 0 {
					return fmt.Errorf("%s %q lists %s, not kept", what, k, ip)
				}
			}
		}
	}
	return nil
}

// checkFreed: the freed addresses are free (not in ips), each once in the
// set, with its sequence number and its releasing Service.
func (x *indexes) checkFreed() error {
	f := &x.freed
	for ip := range f.seq {
		if x.ips[ip] != nil || !f.set.contains(ip) {
			return fmt.Errorf("%s freed, in ips %v, in the set %v", ip, x.ips[ip] != nil, f.set.contains(ip))
		}
	}
	if n := setSize(&f.set); n.Cmp(big.NewInt(int64(len(f.seq)))) != 0 {
		return fmt.Errorf("%s addresses in the set, %d freed", n, len(f.seq))
	}
	for ip, s := range f.owner {
		if _, ok := f.seq[ip]; !ok || !slices.Contains(f.of[s], ip) {
			return fmt.Errorf("%s freed by %s: freed %v, listed for it %v", ip, s, ok, slices.Contains(f.of[s], ip))
		}
	}
	for s, ips := range f.of {
		for _, ip := range ips {
			if f.owner[ip] != s {
				return fmt.Errorf("%s listed as freed by %s, owner %q", ip, s, f.owner[ip])
			}
		}
	}
	return nil
}
