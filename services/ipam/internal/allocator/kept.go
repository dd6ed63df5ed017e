package allocator

import (
	"maps"
	"net/netip"
	"slices"
	"time"
)

// Kept addresses and the order of reuse (docs/pools.md, "Released
// addresses").
//
// When a Service that holds an address alone is deleted (or is no longer
// served), the address is not free at once: it is kept for that Service —
// a reservation with Kept set, ForService the Service, CreatedAt the
// release — for its pool's grace period (PoolSpec.KeepReleased, which
// objects.PoolSet defaults). A Service of that namespace/name created again within
// it gets the same address from the same pool (pick, keptEval), families,
// tenancy and quota permitting; under the same sharing key, so does another
// Service of its namespace, so a shared address comes back to the Services
// that shared it. After the grace period the caller unreserves it
// (ExpiredKept).
//
// A Service that requests an address kept for another Service of its
// tenant takes it, ending the keep (keptInTenant: a rename); a request
// from another namespace is refused with RequestedIPInUse until the grace
// period ends or an operator releases it.
//
// Nobody waits for a kept address while another is free: automatic
// allocation takes, in this order, an address never freed in this
// allocator's life (lowest first), then the least recently freed, then —
// only when the pool has nothing else — the address kept longest (oldest
// release first), and Result.Kept says whose it was.

// keptIndex finds kept reservations by the Service they are kept for, by
// namespace and sharing key, and oldest first (all of them, and those of
// each namespace).
type keptIndex struct {
	byService map[string][]netip.Addr
	byShare   map[string][]netip.Addr // shareKey(namespace, key)
	all       map[netip.Addr]keptAge  // kept address -> its release and namespace
	// byAge and byNamespace are ordered by release, then address, once
	// sorted (an entry added out of order unsorts them; oldest sorts
	// them again). An entry whose address is no longer kept at that time
	// is stale, skipped and dropped.
	byAge       []keptAge
	byNamespace map[string][]keptAge
	sorted      bool
}

type keptAge struct {
	ip netip.Addr
	at time.Time
	ns string // the namespace whose quota it counts against (Reservation.tenant)
}

func compareAge(x, y keptAge) int {
	if c := x.at.Compare(y.at); c != 0 {
		return c
	}
	return x.ip.Compare(y.ip)
}

func shareKey(ns, key string) string { return ns + "\x00" + key }

func (x *keptIndex) add(r Reservation) {
	if x.all == nil {
		x.byService, x.byShare, x.all = map[string][]netip.Addr{}, map[string][]netip.Addr{}, map[netip.Addr]keptAge{}
		x.byNamespace, x.sorted = map[string][]keptAge{}, true
	}
	ns := namespaceOf(r.ForService)
	e := keptAge{r.IP, r.CreatedAt, r.tenant()}
	x.all[r.IP] = e
	x.byService[r.ForService] = append(x.byService[r.ForService], r.IP)
	if r.SharingKey != "" {
		k := shareKey(ns, r.SharingKey)
		x.byShare[k] = append(x.byShare[k], r.IP)
	}
	if n := len(x.byAge); n > 0 && compareAge(x.byAge[n-1], e) > 0 {
		x.sorted = false
	}
	x.byAge = append(x.byAge, e)
	if l := x.byNamespace[e.ns]; len(l) > 0 && compareAge(l[len(l)-1], e) > 0 {
		x.sorted = false
	}
	x.byNamespace[e.ns] = append(x.byNamespace[e.ns], e)
}

func (x *keptIndex) stale(e keptAge) bool {
	cur, ok := x.all[e.ip]
	return !ok || !cur.at.Equal(e.at)
}

// oldest returns the first address of ns's list ("" for all of them), oldest
// release first, for which ok is true.
func (x *keptIndex) oldest(ns string, ok func(netip.Addr) bool) (netip.Addr, bool) {
	if len(x.all) == 0 {
		return netip.Addr{}, false
	}
	if !x.sorted || len(x.byAge) > 2*len(x.all)+64 {
		x.compact()
	}
	list := &x.byAge
	if ns != "" {
		l := x.byNamespace[ns]
		list = &l
		defer func() {
			if len(l) > 0 {
				x.byNamespace[ns] = l
			} else {
				delete(x.byNamespace, ns)
			}
		}()
	}
	for len(*list) > 0 && x.stale((*list)[0]) {
		*list = (*list)[1:] // taken or expired oldest first: drop them as they go
	}
	for _, e := range *list {
		if !x.stale(e) && ok(e.ip) {
			return e.ip, true
		}
	}
	return netip.Addr{}, false
}

// compact drops the stale entries and sorts the lists.
func (x *keptIndex) compact() {
	x.byAge = slices.DeleteFunc(x.byAge, x.stale)
	slices.SortFunc(x.byAge, compareAge)
	clear(x.byNamespace)
	for _, e := range x.byAge {
		x.byNamespace[e.ns] = append(x.byNamespace[e.ns], e)
	}
	x.sorted = true
}

func (x *keptIndex) remove(r Reservation) {
	delete(x.all, r.IP)
	drop := func(m map[string][]netip.Addr, k string) {
		if ips := slices.DeleteFunc(m[k], func(ip netip.Addr) bool { return ip == r.IP }); len(ips) > 0 {
			m[k] = ips
		} else {
			delete(m, k)
		}
	}
	drop(x.byService, r.ForService)
	if r.SharingKey != "" {
		drop(x.byShare, shareKey(namespaceOf(r.ForService), r.SharingKey))
	}
}

// freedOrder remembers the addresses that became free, in the order they
// did: automatic allocation hands out never-freed addresses first, then the
// least recently freed, so that a stale DNS record or firewall rule naming
// an address does not at once reach someone else's Service. It lives as
// long as the allocator (a new term starts with none).
type freedOrder struct {
	set   addrSet
	seq   map[netip.Addr]uint64
	next  uint64
	queue []freedEntry // by seq; an entry whose seq is no longer ip's is stale
	// owner is the Service whose release freed an address, and of its
	// inverse: a Service that asks again (its request changed, or it came
	// back) gets its own freed address first (pick).
	owner map[netip.Addr]string
	of    map[string][]netip.Addr
}

type freedEntry struct {
	ip  netip.Addr
	seq uint64
}

func (f *freedOrder) add(ip netip.Addr) {
	if f.seq == nil {
		f.seq = map[netip.Addr]uint64{}
	}
	f.next++
	f.seq[ip] = f.next
	f.set.add(ip)
	f.queue = append(f.queue, freedEntry{ip, f.next})
}

// note records that service's release freed ip.
func (f *freedOrder) note(ip netip.Addr, service string) {
	if f.owner == nil {
		f.owner, f.of = map[netip.Addr]string{}, map[string][]netip.Addr{}
	}
	f.owner[ip] = service
	f.of[service] = append(f.of[service], ip)
}

func (f *freedOrder) remove(ip netip.Addr) {
	if _, ok := f.seq[ip]; !ok {
		return
	}
	if s, ok := f.owner[ip]; ok {
		delete(f.owner, ip)
		if ips := slices.DeleteFunc(f.of[s], func(x netip.Addr) bool { return x == ip }); len(ips) > 0 {
			f.of[s] = ips
		} else {
			delete(f.of, s)
		}
	}
	delete(f.seq, ip)
	f.set.remove(ip)
	if len(f.queue) > 64 && len(f.queue) > 2*len(f.seq) {
		f.queue = slices.DeleteFunc(f.queue, f.stale)
	}
}

func (f *freedOrder) stale(e freedEntry) bool { return f.seq[e.ip] != e.seq }

// oldest returns the least recently freed address for which ok is true.
func (f *freedOrder) oldest(ok func(netip.Addr) bool) (netip.Addr, bool) {
	for len(f.queue) > 0 && f.stale(f.queue[0]) {
		f.queue = f.queue[1:]
	}
	for _, e := range f.queue {
		if !f.stale(e) && ok(e.ip) {
			return e.ip, true
		}
	}
	return netip.Addr{}, false
}

// keepFor is the grace period of ip: that of the serving pool containing
// it (objects.PoolSet fills in the cluster default), else 0 — an address no
// pool offers, or only a pool being deleted, which hands out nothing, is not
// kept (a deleted pool takes its kept addresses along).
func (a *Allocator) keepFor(ip netip.Addr) time.Duration {
	if p := a.pools.index.lookup(ip); p != nil && p.spec.KeepReleased != nil && !p.spec.Terminating {
		return *p.spec.KeepReleased
	}
	return 0
}

// KeptUntil is when the kept reservation r ends: its release plus the grace
// period of its address's pool (an edit of the pool's grace period applies
// to the addresses it keeps already).
func (a *Allocator) KeptUntil(r Reservation) time.Time { return r.CreatedAt.Add(a.keepFor(r.IP)) }

// KeepOnRelease returns the reservations that keep the addresses that
// releasing services (at once, released at) would free: those no other
// Service holds, with no reservation or other controller's status, whose
// grace period is not 0. An address they share is kept for the first of
// them by key, under its sharing key (which admits the others). It changes
// nothing: the caller records them in the ledger with the release, then
// calls Release and Reserve.
func (a *Allocator) KeepOnRelease(services []string, at time.Time) []Reservation {
	releasing := map[string]bool{}
	for _, s := range services {
		releasing[s] = true
	}
	var out []Reservation
	for _, s := range slices.Sorted(maps.Keys(releasing)) {
		for _, ip := range a.idx.bySvc[s] {
			st := a.idx.ips[ip]
			if st == nil || st.reservation != nil || len(a.idx.foreignAt[ip]) > 0 || a.keepFor(ip) <= 0 || st.holders[0].service != s ||
				slices.ContainsFunc(st.holders, func(h holder) bool { return !releasing[h.service] }) {
				continue
			}
			out = append(out, Reservation{IP: ip, ForService: s, Kept: true, SharingKey: st.holders[0].key(), CreatedAt: at, Tenant: a.idx.tenants[s]})
		}
	}
	slices.SortFunc(out, func(x, y Reservation) int { return x.IP.Compare(y.IP) })
	return out
}

// ExpiredKept returns the kept reservations whose grace period ended at or
// before now, in IP order: the caller unreserves them.
func (a *Allocator) ExpiredKept(now time.Time) []Reservation {
	var out []Reservation
	for ip := range a.idx.kept.all {
		if r := *a.idx.ips[ip].reservation; !a.KeptUntil(r).After(now) {
			r.IP = ip
			out = append(out, r)
		}
	}
	slices.SortFunc(out, func(x, y Reservation) int { return x.IP.Compare(y.IP) })
	return out
}

// NextKeptExpiry is when the first kept reservation ends; false when none is
// kept.
func (a *Allocator) NextKeptExpiry() (time.Time, bool) {
	var next time.Time
	for ip := range a.idx.kept.all {
		if t := a.KeptUntil(*a.idx.ips[ip].reservation); next.IsZero() || t.Before(next) {
			next = t
		}
	}
	return next, !next.IsZero()
}

// KeptCount is the number of addresses kept in each serving pool ("" for
// those outside every serving pool).
func (a *Allocator) KeptCount() map[string]int {
	out := map[string]int{}
	for ip := range a.idx.kept.all {
		out[a.idx.ips[ip].pool]++
	}
	return out
}

// keptForRequest reports whether r is kept for req's Service, or under
// req's sharing key for a Service of its namespace.
func keptForRequest(r *Reservation, req Request) bool {
	if r == nil || !r.Kept {
		return false
	}
	return r.ForService == req.Service ||
		req.Sharing.Key != "" && r.SharingKey == req.Sharing.Key && namespaceOf(r.ForService) == namespaceOf(req.Service)
}

// keptInTenant reports whether the kept reservation r counts against
// namespace tenant (Reservation.tenant: a Gateway Service's address against
// the Gateway's namespace). A Service of that tenant that requests the
// address takes it, ending the keep — a rename: shop/web-v1 deleted,
// shop/web-v2 asking for its address, as MetalLB grants once the holder is
// gone. A namespace's kept address stays refused to every other namespace.
func keptInTenant(r Reservation, tenant string) bool {
	return r.Kept && tenant != "" && r.tenant() == tenant
}

// TookOnRequest reports whether the grant of req took the kept reservation
// r (one of its Result.Kept) because req requested the address and r is
// kept for another Service of req's tenant (keptInTenant) — rather than
// given back to req's own Service or sharing key, or taken because its pool
// had nothing else.
func TookOnRequest(req Request, r Reservation) bool {
	return !keptForRequest(&r, req) && keptInTenant(r, req.tenant()) && slices.Contains(req.RequestedIPs, r.IP)
}

// keptFor returns the lowest address of family f in pool p kept for req
// (its Service's own first, then its sharing key's) that p may give it,
// whoever else requests it.
func (a *Allocator) keptFor(p *Pool, f Family, req Request) (netip.Addr, bool) {
	lists := [][]netip.Addr{a.idx.kept.byService[req.Service]}
	if req.Sharing.Key != "" {
		lists = append(lists, a.idx.kept.byShare[shareKey(namespaceOf(req.Service), req.Sharing.Key)])
	}
	for _, ips := range lists {
		var best netip.Addr
		for _, ip := range ips {
			// A kept address its own Service holds again (an Assign from
			// its status) ends with that Service's next grant.
			held := len(a.idx.ips[ip].holders) > 0
			// Another Service's request (claim) does not stand in the way:
			// it may not have a kept address, and must not block it.
			if FamilyOf(ip) == f && p.allocatable(ip) && !held && (!best.IsValid() || ip.Less(best)) {
				best = ip
			}
		}
		if best.IsValid() {
			return best, true
		}
	}
	return netip.Addr{}, false
}

// oldestKept returns the address of family f in pool p kept longest (oldest
// release, then lowest) that p may hand out to service: what a Service takes
// when the pool has nothing else. Those kept for service's own namespace go
// first (a namespace that creates and deletes Services uses up its own kept
// addresses before anyone else's); ownOnly: only those.
func (a *Allocator) oldestKept(p *Pool, f Family, service string, ownOnly bool) (netip.Addr, bool) {
	ok := func(ip netip.Addr) bool {
		return FamilyOf(ip) == f && p.allocatable(ip) && !a.idx.claimedByOther(ip, service) && len(a.idx.ips[ip].holders) == 0
	}
	if ip, found := a.idx.kept.oldest(a.idx.tenantOf(service), ok); found || ownOnly {
		return ip, found
	}
	return a.idx.kept.oldest("", ok)
}

// freedBy returns the lowest free address of family f in pool p that req's
// Service itself freed, that p may give it.
func (a *Allocator) freedBy(p *Pool, f Family, req Request) (netip.Addr, bool) {
	var best netip.Addr
	for _, ip := range a.idx.freed.of[req.Service] {
		if FamilyOf(ip) == f && p.allocatable(ip) && !a.idx.claimedByOther(ip, req.Service) && (!best.IsValid() || ip.Less(best)) {
			best = ip
		}
	}
	return best, best.IsValid()
}

// keptEval returns the first eligible eval (in rank order) that gives req an
// address kept for it: a Service created again goes back to the pool that
// keeps its address, whatever pool would rank first for a new one.
func (a *Allocator) keptEval(req Request, evals []eval) *eval {
	for i := range evals {
		e := &evals[i]
		if !e.verdict.Eligible {
			continue
		}
		for _, ip := range e.ips {
			if st := a.idx.ips[ip]; st != nil && keptForRequest(st.reservation, req) {
				return e
			}
		}
	}
	return nil
}
