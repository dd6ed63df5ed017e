package ledger

import "slices"

// ByService is the ledger's allocations by Service key ("namespace/name"):
// the ledger answers by Service, so that nobody keeps a copy of it.
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

// Apply applies a committed change in place. Only the Services the change
// touches are visited: no scan over every Service per commit.
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
