// Package clusternet knows the cluster's own networks, as Kubernetes states
// them, and decides whether an ExternalWorkload's address lies in one: the
// Service ranges (ServiceCIDR objects), every Node's Pod ranges
// (spec.podCIDRs) and addresses (status.addresses), and the API server's
// addresses (the EndpointSlices of default/kubernetes).
//
// Such an address never enters an EndpointSlice and is never probed,
// whatever a probe or a condition says: a tenant's workload at the API
// server's ClusterIP, inside a Node's Pod range or at a kubelet would make
// the public address ipam gave the tenant front the cluster itself (the
// CVE-2021-25740 class, docs/security.md). The same holds for the addresses
// no flag admits (probepolicy.Builtin) and for the ranges an operator names
// with --pod-cidrs and --service-cidrs, for CNIs and API servers that do not
// state theirs.
//
// Plain Go over the stream's objects: no clients, no clocks.
package clusternet

import (
	"cmp"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"

	watcherv1 "github.com/ipledger/ipledger/proto/ipledger/watcher/v1"
	"github.com/ipledger/ipledger/services/endpoints/internal/probepolicy"
)

// Reasons of a learnt network: the metric label and what the message says
// the address is. (Addresses refused by the operator's flags or by the
// built-in rules carry probepolicy's reasons.)
const (
	ReasonServiceCIDR = "service-cidr"
	ReasonPodCIDR     = "pod-cidr"
	ReasonNodeAddress = "node-address"
	ReasonAPIServer   = "api-server"
)

// Reasons lists every reason an address may be refused a slice for, for
// metrics that export all of them.
var Reasons = []string{probepolicy.ReasonUnspecified, probepolicy.ReasonLoopback, probepolicy.ReasonLinkLocal,
	probepolicy.ReasonMulticast, probepolicy.ReasonCloudMetadata, ReasonServiceCIDR, ReasonPodCIDR, ReasonNodeAddress, ReasonAPIServer}

// Kinds are the stream's kinds the networks are learnt from.
var Kinds = []watcherv1.Kind{watcherv1.Kind_KIND_NODE, watcherv1.Kind_KIND_SERVICE_CIDR, watcherv1.Kind_KIND_KUBERNETES_ENDPOINT_SLICE}

// Network is one network of the cluster's and where it was learnt.
type Network struct {
	Prefix netip.Prefix
	// Reason is one of the Reason constants.
	Reason string
	// Source names the object and field it was learnt from, e.g.
	// "Node n1 spec.podCIDRs".
	Source string
}

// Networks are the cluster's networks, looked up by the most specific
// prefix that contains an address. The zero value and nil hold none.
type Networks struct {
	byBits map[int]map[netip.Prefix]Network
	bits   []int // the prefix lengths present, longest first
}

// Learn reads the cluster's networks from the stream's objects of Kinds
// (each kind's list may be empty: a watcher that does not serve a kind, or
// a cluster without ServiceCIDRs). Objects being deleted count until gone;
// entries that do not parse are skipped.
func Learn(nodes, serviceCIDRs, apiServerSlices []*watcherv1.Object) *Networks {
	n := &Networks{byBits: map[int]map[netip.Prefix]Network{}}
	for _, o := range serviceCIDRs {
		for _, c := range o.GetServiceCidr().GetCidrs() {
			n.addPrefix(c, ReasonServiceCIDR, "ServiceCIDR "+o.GetMeta().GetName())
		}
	}
	for _, o := range nodes {
		name := o.GetMeta().GetName()
		for _, c := range o.GetNode().GetPodCidrs() {
			n.addPrefix(c, ReasonPodCIDR, "Node "+name+" spec.podCIDRs")
		}
		for _, a := range o.GetNode().GetAddresses() {
			n.addAddr(a.GetAddress(), ReasonNodeAddress, "Node "+name+" status.addresses ("+a.GetType()+")")
		}
	}
	for _, o := range apiServerSlices {
		for _, e := range o.GetEndpointSlice().GetEndpoints() {
			for _, a := range e.GetAddresses() {
				n.addAddr(a, ReasonAPIServer, "EndpointSlice default/"+o.GetMeta().GetName())
			}
		}
	}
	n.bits = slices.SortedFunc(maps.Keys(n.byBits), func(a, b int) int { return cmp.Compare(b, a) })
	return n
}

func (n *Networks) addPrefix(s, reason, source string) {
	if p, err := netip.ParsePrefix(s); err == nil {
		n.add(Network{Prefix: netip.PrefixFrom(p.Addr().Unmap(), p.Bits()-unmapBits(p.Addr())).Masked(), Reason: reason, Source: source})
	}
}

func (n *Networks) addAddr(s, reason, source string) {
	if a, err := netip.ParseAddr(s); err == nil {
		a = a.Unmap().WithZone("")
		n.add(Network{Prefix: netip.PrefixFrom(a, a.BitLen()), Reason: reason, Source: source})
	}
}

// unmapBits is what a prefix loses in length when its IPv4-mapped IPv6
// address is unmapped.
func unmapBits(a netip.Addr) int {
	if a.Is4In6() {
		return 96
	}
	return 0
}

// add keeps the first source of a prefix learnt twice, in the order Learn
// reads (ServiceCIDRs, then Nodes by the store's order, then the API
// server), except that a more telling source replaces a Node address: the
// API server's address is also its Node's on most clusters.
func (n *Networks) add(nw Network) {
	if !nw.Prefix.IsValid() {
		return
	}
	m := n.byBits[nw.Prefix.Bits()]
	if m == nil {
		m = map[netip.Prefix]Network{}
		n.byBits[nw.Prefix.Bits()] = m
	}
	if old, ok := m[nw.Prefix]; ok && (old.Reason != ReasonNodeAddress || nw.Reason != ReasonAPIServer) {
		return
	}
	m[nw.Prefix] = nw
}

// Lookup returns the most specific network that contains a.
func (n *Networks) Lookup(a netip.Addr) (Network, bool) {
	if n == nil {
		return Network{}, false
	}
	a = a.Unmap().WithZone("")
	for _, b := range n.bits {
		if b > a.BitLen() {
			continue
		}
		p, err := a.Prefix(b)
		if err != nil {
			continue
		}
		if nw, ok := n.byBits[b][p]; ok && nw.Prefix.Addr().BitLen() == a.BitLen() {
			return nw, true
		}
	}
	return Network{}, false
}

// Len is the number of networks held.
func (n *Networks) Len() int {
	if n == nil {
		return 0
	}
	total := 0
	for _, m := range n.byBits {
		total += len(m)
	}
	return total
}

// Changed lists the prefixes held by one of a and b and not by the other,
// or by both with another reason: what a workload's verdict may turn on.
func Changed(a, b *Networks) []netip.Prefix {
	var out []netip.Prefix
	diff := func(x, y *Networks) {
		if x == nil {
			return
		}
		for bits, m := range x.byBits {
			for p, nw := range m {
				var other Network
				if y != nil {
					other = y.byBits[bits][p]
				}
				if other.Reason != nw.Reason {
					out = append(out, p)
				}
			}
		}
	}
	diff(a, b)
	diff(b, a)
	slices.SortFunc(out, func(x, y netip.Prefix) int { return x.Addr().Compare(y.Addr()) })
	return slices.Compact(out)
}

// what says what a network of each reason is, in a sentence.
var what = map[string]string{
	ReasonServiceCIDR: "in the Service range %s",
	ReasonPodCIDR:     "in the Pod range %s",
	ReasonNodeAddress: "the address of a Node (%s)",
	ReasonAPIServer:   "an address of the API server (%s)",
}

// refusal is the Refusal of an address in nw.
func refusal(a netip.Addr, nw Network) probepolicy.Refusal {
	return probepolicy.Refusal{Reason: nw.Reason, Message: fmt.Sprintf("%s is %s, learnt from %s: the cluster's own addresses never enter an "+
		"EndpointSlice and are never probed", a, fmt.Sprintf(what[nw.Reason], nw.Prefix), nw.Source)}
}

// Slice decides whether a may enter an EndpointSlice: not if it is one the
// API server refuses or no flag admits (probepolicy.Builtin), in a network
// of n, or in the operator's --pod-cidrs or --service-cidrs (where, as for
// probes, a narrower --probe-allowed-cidrs entry admits it). The rest of
// the probe policy (--probe-denied-cidrs, --probe-allowed-cidrs as an
// allowlist) is about probes and leaves slices alone.
func (n *Networks) Slice(a netip.Addr, pol probepolicy.Policy) probepolicy.Refusal {
	a = a.Unmap().WithZone("")
	if r := probepolicy.Builtin(a); r.Refused() {
		return r
	}
	if nw, ok := n.Lookup(a); ok {
		return refusal(a, nw)
	}
	switch r := pol.Check(a); r.Reason {
	case probepolicy.ReasonPodCIDR, probepolicy.ReasonServiceCIDR:
		return r
	}
	return probepolicy.Refusal{}
}

// Probe decides whether a may be probed: not if Slice refuses it, nor if
// the probe policy does.
func (n *Networks) Probe(a netip.Addr, pol probepolicy.Policy) probepolicy.Refusal {
	if r := n.Slice(a, pol); r.Refused() {
		return r
	}
	return pol.Check(a)
}

// String lists the networks, most specific first, for logs.
func (n *Networks) String() string {
	if n == nil {
		return ""
	}
	var parts []string
	for _, b := range n.bits {
		for _, p := range slices.SortedFunc(maps.Keys(n.byBits[b]), func(x, y netip.Prefix) int { return x.Addr().Compare(y.Addr()) }) {
			parts = append(parts, p.String()+" ("+n.byBits[b][p].Reason+")")
		}
	}
	return strings.Join(parts, ", ")
}
