package allocator

import (
	"fmt"
	"net/netip"
	"slices"
)

// The Gateway API's address types ipam gives (gateway.networking.k8s.io/v1
// Gateway spec.addresses[].type; an entry without a type is an IPAddress).
const (
	GatewayIPAddress    = "IPAddress"
	GatewayNamedAddress = "NamedAddress"
)

// GatewayAddress is one entry of a Gateway's spec.addresses.
type GatewayAddress struct{ Type, Value string }

// GatewayRequest is what a Gateway asks of the LoadBalancer Service that
// serves it: its IPAddress entries are requested IPs, its NamedAddress entry
// names the IPPool, and its GatewayClass may name a default pool.
type GatewayRequest struct {
	Gateway      string // "namespace/name", for messages
	RequestedIPs []netip.Addr
	Pool         string
	// ClassPool is the ipledger.io/address-pool annotation of the Gateway's
	// GatewayClass Class: the pool when neither the Gateway nor the Service
	// names one or requests an IP.
	ClassPool, Class string
}

// ParseGatewayRequest reads the spec.addresses of Gateway gw
// ("namespace/name"): at most one IPAddress per family and at most one
// NamedAddress (the name of an IPPool). Another type (Hostname, or an
// implementation's own) is refused: ipam gives IP addresses only, and the
// Gateway API asks that an address that cannot be given be reported, never
// dropped.
func ParseGatewayRequest(gw string, addrs []GatewayAddress) (GatewayRequest, error) {
	out := GatewayRequest{Gateway: gw}
	for i, a := range addrs {
		field := fmt.Sprintf("Gateway %s spec.addresses[%d]", gw, i)
		switch a.Type {
		case GatewayIPAddress, "":
			ip, err := parseRequestedIP(field, a.Value)
			if err != nil {
				return GatewayRequest{}, err
			}
			for _, b := range out.RequestedIPs {
				if FamilyOf(b) == FamilyOf(ip) {
					return GatewayRequest{}, invalid("%s: %s and %s are both %s; a Gateway's Service gets at most one address per family, so list one",
						field, b, ip, FamilyOf(ip))
				}
			}
			out.RequestedIPs = append(out.RequestedIPs, ip)
		case GatewayNamedAddress:
			if msg := poolNameProblem(a.Value); msg != "" {
				return GatewayRequest{}, invalid("%s: NamedAddress %q %s; ipam reads a NamedAddress as the name of an IPPool", field, a.Value, msg)
			}
			if out.Pool != "" && out.Pool != a.Value {
				return GatewayRequest{}, invalid("%s: NamedAddress %q and %q name two IPPools; a Service takes its addresses from one pool, so keep one",
					field, out.Pool, a.Value)
			}
			out.Pool = a.Value
		default:
			return GatewayRequest{}, invalid("%s: type %s cannot be given: ipam gives IPAddress (an IP) and NamedAddress (the name of an IPPool); remove the entry or change its type",
				field, a.Type)
		}
	}
	return out, nil
}

// JoinGateway joins a Service's own request with its Gateway's. The Gateway
// and the Service's annotations may each ask for the IPs and the pool, or
// both alike; when they differ the request is invalid, naming both — there
// is no silent winner, as between the spellings of one annotation. The
// GatewayClass's pool is the default pool (Request.DefaultPool): that of a
// Service that holds nothing, names no pool and requests no IP.
func JoinGateway(sr ServiceRequest, g GatewayRequest) (ServiceRequest, error) {
	if len(g.RequestedIPs) > 0 {
		if len(sr.RequestedIPs) > 0 && !sameIPs(sr.RequestedIPs, g.RequestedIPs) {
			return ServiceRequest{}, invalid("Gateway %s spec.addresses asks for %s, and the Service requests %s (%s or spec.loadBalancerIP); remove the Service's request: the Gateway says which address it gets",
				g.Gateway, addrList(g.RequestedIPs), addrList(sr.RequestedIPs), AnnotationLoadBalancerIPs)
		}
		sr.RequestedIPs = g.RequestedIPs
	}
	if g.Pool != "" {
		if sr.Pool != "" && sr.Pool != g.Pool {
			return ServiceRequest{}, invalid("Gateway %s spec.addresses names IPPool %s (NamedAddress), and the Service's %s names %s; remove the annotation: the Gateway says which pool serves it",
				g.Gateway, g.Pool, AnnotationAddressPool, sr.Pool)
		}
		sr.Pool, sr.PoolFrom = g.Pool, fmt.Sprintf("NamedAddress of Gateway %s", g.Gateway)
	}
	if g.ClassPool != "" {
		if msg := poolNameProblem(g.ClassPool); msg != "" {
			return ServiceRequest{}, invalid("GatewayClass %s annotation %s: %q %s", g.Class, AnnotationAddressPool, g.ClassPool, msg)
		}
		sr.DefaultPool, sr.DefaultPoolFrom = g.ClassPool, fmt.Sprintf("GatewayClass %s's %s", g.Class, AnnotationAddressPool)
	}
	return sr, nil
}

func sameIPs(a, b []netip.Addr) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	slices.SortFunc(a, netip.Addr.Compare)
	slices.SortFunc(b, netip.Addr.Compare)
	return slices.Equal(a, b)
}
