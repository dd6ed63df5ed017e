package allocator

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
)

// The operations that hold and let go of addresses (Assign, Release,
// Reserve, Unreserve, SetForeign, SetTenant, NoteOrigin): each checks what
// it is asked, then has indexes record it.

// Assign re-registers IPs a Service already holds (from the ledger or its
// status) without choosing anything. It fails, changing nothing, with an
// *Error when an IP is held by a Service it may not share with or reserved
// for another Service (ReasonRequestedIPInUse, Holders set), or when the
// Service already holds a different IP of the same family
// (ReasonInvalidRequest). IPs outside every pool are accepted and held as
// orphans: holding too much is safe, handing an IP out twice is not.
// Assigning what is already held refreshes the sharing info.
func (a *Allocator) Assign(service string, ips []netip.Addr, sharing Sharing) error {
	defer a.checked("Assign")
	if err := checkServiceKey(service); err != nil {
		return err
	}
	if len(ips) == 0 {
		return invalid("assign %s: no IPs", service)
	}
	seen := map[Family]netip.Addr{}
	for _, ip := range ips {
		if !ip.IsValid() || ip.Zone() != "" || ip.Is4In6() {
			return invalid("assign %s: %q is not a plain IPv4 or IPv6 address", service, ip)
		}
		f := FamilyOf(ip)
		if prev, ok := seen[f]; ok && prev != ip {
			return invalid("assign %s: %s and %s are both %s; a Service holds at most one IP per family", service, prev, ip, f)
		}
		seen[f] = ip
	}
	for _, held := range a.idx.bySvc[service] {
		if want, ok := seen[FamilyOf(held)]; ok && want != held {
			return invalid("assign %s: it already holds %s; release it before assigning %s", service, held, want)
		}
	}
	for _, ip := range ips {
		if err := a.usable(ip, service, a.idx.tenantOf(service), sharing, true); err != nil {
			return err
		}
	}
	for _, ip := range ips {
		a.idx.hold(ip, service, sharing)
	}
	return nil
}

// SetTenant records that service counts against the quotas of namespace
// ns (Request.Namespace: the namespace of the Gateway it serves) rather than
// its own, moving what it holds and requests there. Allocate and Claim call
// it; a caller restoring holds (Assign) calls it first, so that a restart
// counts as the allocator did before. Release forgets it.
func (a *Allocator) SetTenant(service, ns string) {
	defer a.checked("SetTenant")
	if ns == "" {
		ns = namespaceOf(service)
	}
	a.idx.setTenant(service, ns)
}

// Release frees every IP the Service holds (a shared IP stays held by the
// other Services, a reserved IP stays reserved) and returns what it held.
func (a *Allocator) Release(service string) []Allocation {
	defer a.checked("Release")
	out := a.Allocations(service)
	a.idx.release(service)
	return out
}

// SetForeign records the addresses the status of a Service ipam does not
// serve shows (another lbClass, or class-less under --require-lb-class),
// replacing what it recorded for that Service before; nil forgets it. Such
// an address was handed out by another controller — MetalLB beside ipam
// during a migration, a cloud provider — so ipam never hands it out: not
// automatically, not on request, not to a sharing Service, and it counts as
// used in its pool. It is no hold: the ledger knows nothing of it, and a
// Service of ipam's that already holds the address keeps it (Rebuild
// reports the clash).
func (a *Allocator) SetForeign(service string, ips []netip.Addr) {
	defer a.checked("SetForeign")
	a.idx.setForeign(service, ips)
}

// without returns the sorted services without s (a new slice when s is in
// it, services itself otherwise).
func without(services []string, s string) []string {
	i, found := slices.BinarySearch(services, s)
	if !found {
		return services
	}
	return slices.Delete(slices.Clone(services), i, i+1)
}

// Reserve holds r.IP outside any Service. It fails when a Service other than
// r.ForService holds the IP, or when the IP is already reserved differently;
// reserving the same again is a no-op. A reserved IP is never auto-assigned
// and is granted only to r.ForService, when that Service requests it.
func (a *Allocator) Reserve(r Reservation) error {
	defer a.checked("Reserve")
	if !r.IP.IsValid() || r.IP.Zone() != "" || r.IP.Is4In6() {
		return invalid("ip: %q is not a plain IPv4 or IPv6 address", r.IP)
	}
	if r.ForService != "" {
		if err := checkServiceKey(r.ForService); err != nil {
			return invalid("for_service: %s", err.Message)
		}
	}
	if st := a.idx.ips[r.IP]; st != nil {
		if old := st.reservation; old != nil {
			if old.Note == r.Note && old.ForService == r.ForService {
				return nil
			}
			return &Error{Reason: ReasonRequestedIPInUse, Message: fmt.Sprintf("%s is already reserved (%s); release that reservation first", r.IP, old.Note)}
		}
		var others []string
		for _, h := range st.holders {
			if h.service != r.ForService {
				others = append(others, h.service)
			}
		}
		if len(others) > 0 {
			return &Error{
				Reason:  ReasonRequestedIPInUse,
				Message: fmt.Sprintf("%s is held by Service %s; release it there first", r.IP, strings.Join(others, ", ")),
				Holders: others,
			}
		}
	}
	a.idx.reserve(r)
	return nil
}

// Unreserve gives a reserved IP back and returns the reservation. The IP
// stays held when its Service holds it.
func (a *Allocator) Unreserve(ip netip.Addr) (Reservation, bool) {
	defer a.checked("Unreserve")
	return a.idx.unreserve(ip)
}

// NoPool is what the ledger records as the pool of an address that was in no
// pool when it was registered (a status from before ipam, say).
const NoPool = "(none)"

// NoteOrigin records the pool a held IP was handed out from, as the ledger
// says: after a restart an address is still counted in, named by and pinned
// to the pool it came from, wherever pool edits have left it since. NoPool
// and "" leave it unknown.
func (a *Allocator) NoteOrigin(ip netip.Addr, pool string) {
	defer a.checked("NoteOrigin")
	if pool != "" && pool != NoPool {
		a.idx.noteOrigin(ip, pool)
	}
}
