package ledger

import (
	"net/netip"
	"slices"
)

// Entries answers what the ledger records for one Service.
type Entries interface {
	// Of returns the allocations recorded for the Service "namespace/name",
	// in IP order. The caller may keep them: they are copies.
	Of(service string) []Allocation
}

// ByService is a set of allocations by Service key ("namespace/name"): the
// Entries of a State read whole (a term's rebuild, tests).
type ByService map[string][]Allocation

// IndexByService groups allocs by Service key.
func IndexByService(allocs []Allocation) ByService {
	out := ByService{}
	for _, a := range allocs {
		k := a.Service.Key()
		out[k] = append(out[k], a)
	}
	return out
}

// Of implements Entries.
func (b ByService) Of(service string) []Allocation { return b[service] }

// Apply applies a committed change in place (a preview's passes).
func (b ByService) Apply(c Change) {
	for _, a := range c.Release {
		k := a.Service.Key()
		if left := slices.DeleteFunc(b[k], func(x Allocation) bool { return x.IP == a.IP }); len(left) > 0 {
			b[k] = left
		} else {
			delete(b, k)
		}
	}
	for _, a := range c.Allocate {
		k := a.Service.Key()
		b[k] = append(slices.DeleteFunc(b[k], func(x Allocation) bool { return x.IP == a.IP }), a)
	}
}

// addrIndex is the live ledger's index by Service: the addresses each
// Service holds, and nothing else. The entries themselves stay in the
// shards, found by address (Ledger.Entries): kept whole here too, they were a
// second copy of every entry (≈ 210 bytes per Service, 21 MB of ipam's heap
// at 100,000 Services).
type addrIndex map[string][]netip.Addr

// indexAddrs indexes allocs by Service key.
func indexAddrs(allocs []Allocation) addrIndex {
	out := addrIndex{}
	for _, a := range allocs {
		out.add(a)
	}
	return out
}

func (x addrIndex) add(a Allocation) {
	k := a.Service.Key()
	if ips := x[k]; !slices.Contains(ips, a.IP) {
		ips = append(ips, a.IP)
		slices.SortFunc(ips, netip.Addr.Compare)
		x[k] = ips
	}
}

// apply applies a committed change in place. Only the Services the change
// touches are visited: no scan over every Service per commit.
func (x addrIndex) apply(c Change) {
	for _, a := range c.Release {
		k := a.Service.Key()
		if left := slices.DeleteFunc(x[k], func(ip netip.Addr) bool { return ip == a.IP }); len(left) > 0 {
			x[k] = left
		} else {
			delete(x, k)
		}
	}
	for _, a := range c.Allocate {
		x.add(a)
	}
}
