package allocator

import (
	"net/netip"
	"slices"
	"strings"
)

// The families a request needs (needsOf), from its family policy, its
// families and the addresses it requests.

// need is the families a request wants, with the IPs it names.
type need struct {
	order    []Family // the Service's families, first (primary) first
	required []Family
	// optional are PreferDualStack's families that no requested IP makes
	// required, in the Service's order. With nothing required, a pool must
	// give at least one of them: either family will do.
	optional  []Family
	requested map[Family]netip.Addr
	// held: requested are the addresses the Service already holds (planHeld
	// checks that its pool still serves it), not addresses it asks for.
	held bool
}

func (n need) wants(f Family) bool {
	return slices.Contains(n.required, f) || slices.Contains(n.optional, f)
}

// require moves f from optional to required.
func (n *need) require(f Family) {
	if i := slices.Index(n.optional, f); i >= 0 {
		n.optional = slices.Delete(slices.Clone(n.optional), i, i+1)
		n.required = append(slices.Clone(n.required), f)
	}
}

// wanted names the families n asks for, for messages.
func (n need) wanted() string {
	if len(n.required) == 0 {
		return strings.Join(familyNames(n.optional), " or ")
	}
	return familyList(n.required)
}

func otherFamily(f Family) Family {
	if f == IPv4 {
		return IPv6
	}
	return IPv4
}

// needsOf validates req and works out the families it wants.
func needsOf(req Request) (need, *Error) {
	if err := checkServiceKey(req.Service); err != nil {
		return need{}, err
	}
	requested, err := requestedByFamily(req.RequestedIPs)
	if err != nil {
		return need{}, err
	}
	n := need{requested: requested}
	var fams []Family
	for _, f := range req.Families {
		if f != IPv4 && f != IPv6 {
			return need{}, invalid("spec.ipFamilies: unknown family %v", f)
		}
		if !slices.Contains(fams, f) {
			fams = append(fams, f)
		}
	}
	explicit := len(fams) > 0
	if !explicit {
		for _, ip := range req.RequestedIPs {
			fams = append(fams, FamilyOf(ip))
		}
		if len(fams) == 0 {
			fams = []Family{IPv4}
		}
	}
	n.order = fams
	switch req.FamilyPolicy {
	case "", SingleStack:
		n.required = fams[:1]
	case RequireDualStack:
		n.required = []Family{fams[0], otherFamily(fams[0])}
		n.order = n.required
	case PreferDualStack:
		// Either family will do: the pool chosen by rank gives what it has.
		if len(fams) == 1 && explicit {
			n.required = fams[:1]
			break
		}
		n.optional = []Family{fams[0], otherFamily(fams[0])}
		n.order = n.optional
	default:
		return need{}, invalid("spec.ipFamilyPolicy: unknown policy %q, want SingleStack, PreferDualStack or RequireDualStack", req.FamilyPolicy)
	}
	for _, ip := range req.RequestedIPs {
		f := FamilyOf(ip)
		switch {
		case slices.Contains(n.required, f):
		case slices.Contains(n.optional, f):
			// Asking for an IP of a preferred family makes it required.
			n.require(f)
		default:
			return need{}, invalid("requested IP %s is %s, but the Service's ipFamilies allow only %s (ipFamilyPolicy %s); request an %s address or change spec.ipFamilies",
				ip, f, familyList(n.required), policyName(req.FamilyPolicy), n.required[0])
		}
	}
	return n, nil
}

// requestedByFamily checks the requested IPs, at most one plain address
// per family, and maps each family to its IP.
func requestedByFamily(ips []netip.Addr) (map[Family]netip.Addr, *Error) {
	out := map[Family]netip.Addr{}
	for _, ip := range ips {
		if !ip.IsValid() || ip.Zone() != "" || ip.Is4In6() || ip.IsUnspecified() {
			return nil, invalid("requested IP %q is not a plain IPv4 or IPv6 address", ip)
		}
		f := FamilyOf(ip)
		if prev, ok := out[f]; ok {
			return nil, invalid("requested IPs %s and %s are both %s; request at most one IP per family", prev, ip, f)
		}
		out[f] = ip
	}
	return out, nil
}

func familyList(fs []Family) string { return strings.Join(familyNames(fs), " and ") }

func familyNames(fs []Family) []string {
	s := make([]string, len(fs))
	for i, f := range fs {
		s[i] = f.String()
	}
	return s
}

func policyName(p FamilyPolicy) FamilyPolicy {
	if p == "" {
		return SingleStack
	}
	return p
}
