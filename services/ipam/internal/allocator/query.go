package allocator

import (
	"maps"
	"math/big"
	"net/netip"
	"slices"
)

// Read-only questions about pools and the addresses held in them.

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
