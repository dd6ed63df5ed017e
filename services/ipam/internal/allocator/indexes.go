package allocator

import (
	"math/big"
	"net/netip"
	"slices"
	"strings"
)

// indexes is what the allocator knows of addresses: ips, the primary
// record (who holds or reserves each address), and the indexes derived
// from it and kept in step with it so that no decision scans every
// address. Only the methods of indexes change any of them, each keeping
// them all in step; check (check.go) states how they agree.
type indexes struct {
	pools *poolSet // the serving pools, for attribution (the Allocator's)

	ips     map[netip.Addr]*ipState            // held or reserved addresses (the primary record)
	taken   addrSet                            // the addresses of ips
	bySvc   map[string][]netip.Addr            // Service -> held IPs, sorted
	byShare map[string]map[netip.Addr]struct{} // sharing key -> IPs held under it

	// foreignOf: Services ipam does not serve -> the addresses their status
	// shows (SetForeign).
	foreignOf map[string][]netip.Addr
	// foreignAt: held or reserved addresses -> the Services ipam does not
	// serve whose status shows them (sorted): another controller gave
	// them out, so ipam never does. Kept beside ips, not in its ipState,
	// because almost no address has any (a field would cost every held
	// address 32 bytes).
	foreignAt map[netip.Addr][]string

	claimed  addrSet                            // IPs some Service requests
	claims   map[netip.Addr]map[string]struct{} // IP -> requesting Services
	claimsOf map[string][]netip.Addr            // Service -> requested IPs
	counts   map[string]*poolCounts             // serving pool -> its counts by family
	nsAddrs  nsAddrs                            // what maxAddressesPerNamespace caps
	// tenants: Services counted against another namespace than their
	// own (SetTenant) -> that namespace.
	tenants map[string]string
	// outside counts by origin the held IPs their pool no longer offers
	// (HeldOutside), kept as IPs are held and released and recounted by
	// SetPools: every pass's pool status asks, and a scan of every held IP
	// was a third of ipam's CPU in steady state at 10,000 Services.
	outside map[string]int

	kept  keptIndex  // kept reservations (kept.go)
	freed freedOrder // free addresses that were in use, oldest first
}

// newIndexes returns empty indexes attributing addresses to pools.
func newIndexes(pools *poolSet) indexes {
	return indexes{
		pools:     pools,
		ips:       map[netip.Addr]*ipState{},
		bySvc:     map[string][]netip.Addr{},
		byShare:   map[string]map[netip.Addr]struct{}{},
		claims:    map[netip.Addr]map[string]struct{}{},
		claimsOf:  map[string][]netip.Addr{},
		counts:    map[string]*poolCounts{},
		foreignOf: map[string][]netip.Addr{},
		foreignAt: map[netip.Addr][]string{},
		outside:   map[string]int{},
		tenants:   map[string]string{},
	}
}

// ipState is what the allocator knows about one held or reserved IP.
type ipState struct {
	pool string // serving pool containing the IP, "" = orphan
	// origin is the pool the IP was handed out from: set when the IP is
	// first held (the pool containing it then) or from the ledger
	// (NoteOrigin), never changed by SetPools. A pool edit therefore never
	// makes a Service look as if it asked for another pool.
	origin      string
	holders     []holder // sorted by service
	reservation *Reservation
}

type holder struct {
	service string
	// shared is the sharing info of a holder with a sharing key, nil for
	// an exclusive holder (most): only sharing reads the rest of it.
	shared *Sharing
}

// key is the holder's sharing key, "" when it holds the IP exclusively.
func (h holder) key() string {
	if h.shared == nil {
		return ""
	}
	return h.shared.Key
}

// poolCounts are a serving pool's used and held counts (FamilyUsage), by
// family index (famIdx), kept as addresses are held and released.
type poolCounts struct {
	used [2]*big.Int
	held [2]int64
}

// hold records that service holds ip (or refreshes its sharing info).
func (x *indexes) hold(ip netip.Addr, service string, sh Sharing) {
	st := x.state(ip)
	shared := sharedOf(sh)
	i, found := slices.BinarySearchFunc(st.holders, service, func(h holder, s string) int { return strings.Compare(h.service, s) })
	if found {
		old := st.holders[i].key()
		st.holders[i].shared = shared
		if old != sh.Key {
			x.unshare(old, ip, st)
		}
	} else {
		if len(st.holders) == 0 && x.isOutside(ip, st) {
			x.outside[st.origin]++
		}
		wasLive := x.live(ip, st)
		st.holders = slices.Insert(st.holders, i, holder{service, shared})
		if !wasLive {
			x.countHeld(ip, st, 1)
		}
		x.nsAddrs.add(st.pool, x.tenantOf(service), ip)
		held := x.bySvc[service]
		if !slices.Contains(held, ip) {
			held = append(held, ip)
			slices.SortFunc(held, netip.Addr.Compare)
			x.bySvc[service] = held
		}
	}
	if sh.Key != "" {
		m := x.byShare[sh.Key]
		if m == nil {
			m = map[netip.Addr]struct{}{}
			x.byShare[sh.Key] = m
		}
		m[ip] = struct{}{}
	}
}

// release forgets service: its holds, claims and tenant.
func (x *indexes) release(service string) {
	for _, ip := range x.bySvc[service] {
		st := x.ips[ip]
		if st == nil {
			continue
		}
		i, found := slices.BinarySearchFunc(st.holders, service, func(h holder, s string) int { return strings.Compare(h.service, s) })
		if !found {
			continue
		}
		key := st.holders[i].key()
		st.holders = slices.Delete(st.holders, i, i+1)
		if len(st.holders) == 0 && x.isOutside(ip, st) {
			x.addOutside(st.origin, -1)
		}
		if !x.live(ip, st) {
			x.countHeld(ip, st, -1)
		}
		x.nsAddrs.remove(st.pool, x.tenantOf(service), ip)
		x.unshare(key, ip, st)
		if x.dropIfFree(ip) {
			x.freed.note(ip, service)
		}
	}
	delete(x.bySvc, service)
	x.setClaims(service, nil)
	delete(x.tenants, service)
}

// reserve records r, which Reserve admitted.
func (x *indexes) reserve(r Reservation) {
	rc := r
	rc.Kept = rc.Kept && rc.ForService != ""
	st := x.state(r.IP)
	st.reservation = &rc
	if rc.Kept {
		x.kept.add(rc)
		x.nsAddrs.add(st.pool, rc.tenant(), r.IP)
	}
}

// unreserve drops the reservation of ip and returns it.
func (x *indexes) unreserve(ip netip.Addr) (Reservation, bool) {
	st := x.ips[ip]
	if st == nil || st.reservation == nil {
		return Reservation{}, false
	}
	r := *st.reservation
	st.reservation = nil
	if r.Kept {
		x.kept.remove(r)
		x.nsAddrs.remove(st.pool, r.tenant(), ip)
	}
	x.dropIfFree(ip)
	return r, true
}

// unkeep ends the kept reservation of ip as a Service takes it, and returns
// it (false when ip is not kept).
func (x *indexes) unkeep(ip netip.Addr) (Reservation, bool) {
	st := x.ips[ip]
	if st == nil || st.reservation == nil || !st.reservation.Kept {
		return Reservation{}, false
	}
	r := *st.reservation
	r.IP = ip
	st.reservation = nil
	x.kept.remove(r)
	x.nsAddrs.remove(st.pool, r.tenant(), ip)
	return r, true
}

// setClaims replaces the IPs service claims; nil clears.
func (x *indexes) setClaims(service string, ips []netip.Addr) {
	ns := x.tenantOf(service)
	for _, ip := range x.claimsOf[service] {
		if m := x.claims[ip]; m != nil {
			if _, ok := m[service]; ok {
				x.nsAddrs.remove(x.poolName(ip), ns, ip)
			}
			delete(m, service)
			if len(m) == 0 {
				delete(x.claims, ip)
				x.claimed.remove(ip)
			}
		}
	}
	delete(x.claimsOf, service)
	for _, ip := range ips {
		if !ip.IsValid() || slices.Contains(x.claimsOf[service], ip) {
			continue
		}
		x.claimsOf[service] = append(x.claimsOf[service], ip)
		m := x.claims[ip]
		if m == nil {
			m = map[string]struct{}{}
			x.claims[ip] = m
			x.claimed.add(ip)
		}
		m[service] = struct{}{}
		x.nsAddrs.add(x.poolName(ip), ns, ip)
	}
}

// setForeign replaces the addresses foreign service shows (SetForeign).
func (x *indexes) setForeign(service string, ips []netip.Addr) {
	old := x.foreignOf[service]
	if len(old) == 0 && len(ips) == 0 {
		return
	}
	for _, ip := range old {
		if left := without(x.foreignAt[ip], service); len(left) > 0 {
			x.foreignAt[ip] = left
		} else {
			delete(x.foreignAt, ip)
			if st := x.ips[ip]; !x.live(ip, st) {
				x.countHeld(ip, st, -1)
			}
		}
		x.dropIfFree(ip)
	}
	delete(x.foreignOf, service)
	var kept []netip.Addr
	for _, ip := range ips {
		if !ip.IsValid() || ip.Zone() != "" || ip.Is4In6() || slices.Contains(kept, ip) {
			continue
		}
		kept = append(kept, ip)
		st := x.state(ip)
		if i, found := slices.BinarySearch(x.foreignAt[ip], service); !found {
			wasLive := x.live(ip, st)
			x.foreignAt[ip] = slices.Insert(x.foreignAt[ip], i, service)
			if !wasLive {
				x.countHeld(ip, st, 1)
			}
		}
	}
	if len(kept) > 0 {
		x.foreignOf[service] = kept
	}
}

// setTenant counts service, and what it holds and claims, against ns.
func (x *indexes) setTenant(service, ns string) {
	old := x.tenantOf(service)
	if ns == old {
		return
	}
	if ns == namespaceOf(service) {
		delete(x.tenants, service)
	} else {
		x.tenants[service] = ns
	}
	for _, ip := range x.bySvc[service] {
		if st := x.ips[ip]; st != nil {
			x.nsAddrs.remove(st.pool, old, ip)
			x.nsAddrs.add(st.pool, ns, ip)
		}
	}
	for _, ip := range x.claimsOf[service] {
		x.nsAddrs.remove(x.poolName(ip), old, ip)
		x.nsAddrs.add(x.poolName(ip), ns, ip)
	}
}

// noteOrigin records the pool a held ip came from.
func (x *indexes) noteOrigin(ip netip.Addr, pool string) {
	if st := x.ips[ip]; st != nil && pool != "" && pool != NoPool {
		if len(st.holders) > 0 && x.isOutside(ip, st) {
			x.addOutside(st.origin, -1)
			x.outside[pool]++
		}
		st.origin = pool
	}
}

// repool re-attributes every held or reserved address to the serving pool
// containing it now (x.pools changed), and recounts what depends on it.
func (x *indexes) repool() {
	x.counts = map[string]*poolCounts{}
	for _, p := range x.pools.ranked {
		x.counts[p.name] = &poolCounts{used: [2]*big.Int{new(big.Int), new(big.Int)}}
	}
	for ip, st := range x.ips {
		st.pool = x.poolName(ip)
		x.count(ip, st, 1)
	}
	x.recountNamespaces()
	x.recountOutside()
}

// state returns the state of ip, creating it (taken, counted) if needed.
func (x *indexes) state(ip netip.Addr) *ipState {
	if st := x.ips[ip]; st != nil {
		return st
	}
	st := &ipState{}
	if p := x.pools.index.lookup(ip); p != nil {
		st.pool, st.origin = p.name, p.name
	}
	x.ips[ip] = st
	x.taken.add(ip)
	x.freed.remove(ip)
	x.count(ip, st, 1)
	return st
}

// dropIfFree forgets ip when nobody holds or reserves it, and reports
// whether it did.
func (x *indexes) dropIfFree(ip netip.Addr) bool {
	st := x.ips[ip]
	if st == nil || len(st.holders) > 0 || st.reservation != nil || len(x.foreignAt[ip]) > 0 {
		return false
	}
	x.count(ip, st, -1)
	x.taken.remove(ip)
	delete(x.ips, ip)
	x.freed.add(ip)
	return true
}

// unshare forgets ip under key when no holder of ip uses key any more.
func (x *indexes) unshare(key string, ip netip.Addr, st *ipState) {
	if key == "" {
		return
	}
	for _, h := range st.holders {
		if h.key() == key {
			return
		}
	}
	if m := x.byShare[key]; m != nil {
		delete(m, ip)
		if len(m) == 0 {
			delete(x.byShare, key)
		}
	}
}

// count adds delta to the used count of the pool st is attributed to, and
// to its held count when a live Service holds ip, when the pool counts ip.
func (x *indexes) count(ip netip.Addr, st *ipState, delta int64) {
	if c, i := x.countsOf(ip, st); c != nil {
		c.used[i].Add(c.used[i], big.NewInt(delta))
		if x.live(ip, st) {
			c.held[i] += delta
		}
	}
}

// countHeld adds delta to the held count of the pool st is attributed to,
// when the pool counts ip: call it when ip starts (1) or stops (-1) being
// held by a live Service, the rest of its state unchanged.
func (x *indexes) countHeld(ip netip.Addr, st *ipState, delta int64) {
	if c, i := x.countsOf(ip, st); c != nil {
		c.held[i] += delta
	}
}

// countsOf returns the counts of the pool st is attributed to and the index
// of ip's family in them; nil when no serving pool counts ip (it lies in
// none, or in one that does not hand it out).
func (x *indexes) countsOf(ip netip.Addr, st *ipState) (*poolCounts, int) {
	c := x.counts[st.pool]
	if c == nil || !x.pools.byName[st.pool].allocatable(ip) {
		return nil, 0
	}
	return c, famIdx(FamilyOf(ip))
}

// live reports whether a live Service holds ip: one of ipam's, or one
// another controller serves whose status shows it.
func (x *indexes) live(ip netip.Addr, st *ipState) bool {
	return len(st.holders) > 0 || len(x.foreignAt[ip]) > 0
}

// isOutside reports whether ip, once held, counts as held outside its
// pool: in no serving pool, or in one that no longer hands it out.
func (x *indexes) isOutside(ip netip.Addr, st *ipState) bool {
	return st.pool == "" || !x.pools.byName[st.pool].allocatable(ip)
}

// addOutside adds delta to origin's count of IPs held outside, forgetting
// an origin whose count reaches 0.
func (x *indexes) addOutside(origin string, delta int) {
	if x.outside[origin] += delta; x.outside[origin] == 0 {
		delete(x.outside, origin)
	}
}

// recountOutside counts the IPs held outside from scratch (a new pool set).
func (x *indexes) recountOutside() { x.outside = x.outsideCounts() }

// outsideCounts counts, from scratch, what outside counts.
func (x *indexes) outsideCounts() map[string]int {
	out := map[string]int{}
	for ip, st := range x.ips {
		if len(st.holders) > 0 && x.isOutside(ip, st) {
			out[st.origin]++
		}
	}
	return out
}

// recountNamespaces rebuilds the counts of the capped pools from every hold
// and claim, after SetPools re-attributed addresses to pools.
func (x *indexes) recountNamespaces() { x.nsAddrs = x.namespaceCounts() }

// namespaceCounts counts, from scratch, what nsAddrs counts.
func (x *indexes) namespaceCounts() nsAddrs {
	n := nsAddrs{capped: map[string]bool{}}
	for name, p := range x.pools.byName {
		if p.spec.MaxAddressesPerNamespace > 0 {
			n.capped[name] = true
		}
	}
	for ip, st := range x.ips {
		for _, h := range st.holders {
			n.add(st.pool, x.tenantOf(h.service), ip)
		}
		if r := st.reservation; r != nil && r.Kept {
			n.add(st.pool, r.tenant(), ip)
		}
	}
	for ip, services := range x.claims {
		pool := x.poolName(ip)
		for s := range services {
			n.add(pool, x.tenantOf(s), ip)
		}
	}
	return n
}

// claimedByOther reports whether a Service other than service claims ip.
func (x *indexes) claimedByOther(ip netip.Addr, service string) bool {
	for s := range x.claims[ip] {
		if s != service {
			return true
		}
	}
	return false
}

// tenantOf is the namespace whose quotas service counts against.
func (x *indexes) tenantOf(service string) string {
	if ns, ok := x.tenants[service]; ok {
		return ns
	}
	return namespaceOf(service)
}

// poolName is the serving pool containing ip, "" when none.
func (x *indexes) poolName(ip netip.Addr) string {
	if p := x.pools.index.lookup(ip); p != nil {
		return p.name
	}
	return ""
}
