// Package probepolicy decides which addresses the readiness prober of
// ipledger-endpoints may connect to. Whoever may create an ExternalWorkload
// chooses the address the endpoints leader dials, from inside the cluster
// and with the leader's network position; without a policy the prober is a
// port scanner any tenant can aim. The decision is plain Go (no clients, no
// network): package prober consults Policy.Check before every dial.
//
// The rules, in order:
//
//  1. Addresses that are never probed, whatever the flags: unspecified,
//     loopback, link-local (which holds most clouds' metadata service,
//     169.254.169.254), multicast and broadcast, and the cloud metadata and
//     instance-service addresses outside link-local (AWS's fd00:ec2::/64,
//     Alibaba's 100.100.100.200, Azure's 168.63.129.16, Oracle's legacy
//     192.0.0.192). None of them is a VM behind a Service.
//  2. Among the operator's lists (--probe-allowed-cidrs against
//     --pod-cidrs, --service-cidrs and --probe-denied-cidrs), the most
//     specific prefix containing the address decides, a deny winning a tie:
//     10.0.0.0/8 allowed does not admit the pod CIDR 10.244.0.0/16, and
//     10.244.7.0/24 allowed does (an operator who names a range inside a
//     denied one means it).
//  3. An address no list names is probed when --probe-allowed-cidrs is
//     empty (the compatible default) and refused when it is set, or when it
//     is "none" (an install that has not named its workload networks yet:
//     overlays/production ships so, and every probe is refused, each
//     refusal naming the flag that would allow it).
package probepolicy

import (
	"fmt"
	"net/netip"
	"strings"
)

// Reasons of a refusal: the metric label and the start of the message.
const (
	ReasonUnspecified   = "unspecified"
	ReasonLoopback      = "loopback"
	ReasonLinkLocal     = "link-local"
	ReasonMulticast     = "multicast"
	ReasonCloudMetadata = "cloud-metadata"
	ReasonPodCIDR       = "pod-cidr"
	ReasonServiceCIDR   = "service-cidr"
	ReasonDeniedCIDR    = "denied-cidr"
	ReasonNotAllowed    = "not-allowed"
)

// Reasons lists every reason, for metrics that export all of them.
var Reasons = []string{ReasonUnspecified, ReasonLoopback, ReasonLinkLocal, ReasonMulticast, ReasonCloudMetadata,
	ReasonPodCIDR, ReasonServiceCIDR, ReasonDeniedCIDR, ReasonNotAllowed}

// The flags an operator sets; messages name them.
const (
	FlagAllowed     = "--probe-allowed-cidrs"
	FlagDenied      = "--probe-denied-cidrs"
	FlagPodCIDRs    = "--pod-cidrs"
	FlagServiceCIDR = "--service-cidrs"
)

// AllowNone is the value of --probe-allowed-cidrs that names no workload
// network: every probe is refused until the operator names them.
const AllowNone = "none"

// metadata are cloud metadata and instance-service addresses outside
// link-local (link-local is refused as a whole), each with what it is.
var metadata = []struct {
	prefix netip.Prefix
	what   string
}{
	{netip.MustParsePrefix("169.254.169.254/32"), "the cloud metadata service (AWS, GCP, Azure, OpenStack, ...)"},
	{netip.MustParsePrefix("169.254.170.2/32"), "the AWS ECS task metadata service"},
	{netip.MustParsePrefix("fd00:ec2::/64"), "AWS's instance services (IMDS at fd00:ec2::254, DNS, NTP)"},
	{netip.MustParsePrefix("100.100.100.200/32"), "the Alibaba Cloud metadata service"},
	{netip.MustParsePrefix("168.63.129.16/32"), "Azure's host services (WireServer)"},
	{netip.MustParsePrefix("192.0.0.192/32"), "Oracle Cloud's legacy metadata service"},
}

var (
	broadcast = netip.MustParseAddr("255.255.255.255")
	thisNet   = netip.MustParsePrefix("0.0.0.0/8")
)

// Policy is the operator's configuration of the prober's reach. Its zero
// value refuses only the built-in addresses (rule 1) and probes the rest.
type Policy struct {
	// Allowed are the workload networks (--probe-allowed-cidrs). Empty:
	// every address not refused otherwise, unless NoneAllowed.
	Allowed []netip.Prefix
	// NoneAllowed is --probe-allowed-cidrs=none: the allowlist is in force
	// with nothing in it, so every address is refused. It is how an install
	// says "no probe until the operator names the workload networks"
	// without changing what an empty flag has always meant.
	NoneAllowed bool
	// PodCIDRs and ServiceCIDRs are the cluster's own networks (--pod-cidrs,
	// --service-cidrs); the component cannot always discover them.
	PodCIDRs, ServiceCIDRs []netip.Prefix
	// Denied are further networks never probed (--probe-denied-cidrs): the
	// nodes' network, the control plane, anything else of the operator's.
	Denied []netip.Prefix
}

// Refusal says why an address is not probed. The zero Refusal (Reason "")
// means the address may be probed.
type Refusal struct {
	// Reason is one of the Reason constants.
	Reason string
	// Message is a sentence a user reads in the workload's condition: what
	// the address is and, where a flag can change it, which.
	Message string
}

// Refused reports whether r refuses.
func (r Refusal) Refused() bool { return r.Reason != "" }

// Check decides whether a may be probed.
func (p Policy) Check(a netip.Addr) Refusal {
	a = a.Unmap().WithZone("")
	if r := Builtin(a); r.Refused() {
		return r
	}
	var (
		best    netip.Prefix
		bestLen = -1
		deny    string // reason of the best deny, "" when the best is an allow
		flag    string
	)
	consider := func(ps []netip.Prefix, reason, f string) {
		for _, pfx := range ps {
			pfx = pfx.Masked()
			if !pfx.Contains(a) {
				continue
			}
			// Longer wins; on a tie a deny (considered after the allows)
			// replaces an allow.
			if pfx.Bits() > bestLen || (pfx.Bits() == bestLen && reason != "" && deny == "") {
				best, bestLen, deny, flag = pfx, pfx.Bits(), reason, f
			}
		}
	}
	consider(p.Allowed, "", FlagAllowed)
	consider(p.PodCIDRs, ReasonPodCIDR, FlagPodCIDRs)
	consider(p.ServiceCIDRs, ReasonServiceCIDR, FlagServiceCIDR)
	consider(p.Denied, ReasonDeniedCIDR, FlagDenied)
	switch {
	case bestLen >= 0 && deny == "":
		return Refusal{}
	case bestLen >= 0:
		what := map[string]string{ReasonPodCIDR: "the pod CIDR", ReasonServiceCIDR: "the Service CIDR", ReasonDeniedCIDR: "the denied CIDR"}[deny]
		return Refusal{Reason: deny, Message: fmt.Sprintf("%s is in %s %s (%s); an operator may allow a narrower range with %s",
			a, what, best, flag, FlagAllowed)}
	case len(p.Allowed) > 0:
		return Refusal{Reason: ReasonNotAllowed, Message: fmt.Sprintf("%s is outside the workload networks the prober may reach (%s=%s)",
			a, FlagAllowed, joinPrefixes(p.Allowed))}
	case p.NoneAllowed:
		return Refusal{Reason: ReasonNotAllowed, Message: fmt.Sprintf("%s is not probed: this install names no workload network the prober may reach "+
			"(%s=%s); an operator allows the networks where ExternalWorkloads live with %s=CIDR,...", a, FlagAllowed, AllowNone, FlagAllowed)}
	}
	return Refusal{}
}

// Builtin is rule 1: addresses no flag admits (and no EndpointSlice holds).
func Builtin(a netip.Addr) Refusal {
	for _, m := range metadata {
		if m.prefix.Contains(a) {
			return Refusal{Reason: ReasonCloudMetadata, Message: fmt.Sprintf("%s is %s, never probed", a, m.what)}
		}
	}
	switch {
	case a.IsUnspecified() || (a.Is4() && thisNet.Contains(a)):
		return Refusal{Reason: ReasonUnspecified, Message: fmt.Sprintf("%s is unspecified, never probed", a)}
	case a.IsLoopback():
		return Refusal{Reason: ReasonLoopback, Message: fmt.Sprintf("%s is loopback, never probed", a)}
	case a.IsLinkLocalUnicast():
		return Refusal{Reason: ReasonLinkLocal, Message: fmt.Sprintf("%s is link-local, never probed", a)}
	case a.IsMulticast() || a == broadcast:
		return Refusal{Reason: ReasonMulticast, Message: fmt.Sprintf("%s is multicast or broadcast, never probed", a)}
	}
	return Refusal{}
}

// ParseAllowed parses the value of --probe-allowed-cidrs: a list of CIDRs
// (ParsePrefixes), empty for any address, or "none" alone for no address.
func ParseAllowed(s string) (allowed []netip.Prefix, none bool, err error) {
	if strings.EqualFold(strings.TrimSpace(s), AllowNone) {
		return nil, true, nil
	}
	ps, err := ParsePrefixes(s)
	if err != nil && strings.Contains(strings.ToLower(s), AllowNone) {
		err = fmt.Errorf("%w; %q names no network only alone", err, AllowNone)
	}
	return ps, false, err
}

// ParsePrefixes parses a comma-separated list of CIDRs (a flag's value);
// a bare address is its own /32 or /128. Host bits are refused, so that
// 10.0.0.1/8 is not taken for what it is not.
func ParsePrefixes(s string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for f := range strings.SplitSeq(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		if !strings.Contains(f, "/") {
			a, err := netip.ParseAddr(f)
			if err != nil {
				return nil, fmt.Errorf("%q: not a CIDR or an address", f)
			}
			out = append(out, netip.PrefixFrom(a.Unmap(), a.Unmap().BitLen()))
			continue
		}
		p, err := netip.ParsePrefix(f)
		if err != nil {
			return nil, fmt.Errorf("%q: not a CIDR", f)
		}
		if p.Masked() != p {
			return nil, fmt.Errorf("%q has host bits set (did you mean %s?)", f, p.Masked())
		}
		out = append(out, p)
	}
	return out, nil
}

func joinPrefixes(ps []netip.Prefix) string {
	s := make([]string, len(ps))
	for i, p := range ps {
		s[i] = p.String()
	}
	return strings.Join(s, ",")
}
