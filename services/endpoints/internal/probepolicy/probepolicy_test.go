package probepolicy

import (
	"net/netip"
	"strings"
	"testing"
)

func prefixes(t *testing.T, s string) []netip.Prefix {
	t.Helper()
	ps, err := ParsePrefixes(s)
	if err != nil {
		t.Fatal(err)
	}
	return ps
}

func TestCheck(t *testing.T) {
	cluster := func(t *testing.T, allowed string) Policy {
		return Policy{Allowed: prefixes(t, allowed), PodCIDRs: prefixes(t, "10.244.0.0/16,fd00:10:244::/56"),
			ServiceCIDRs: prefixes(t, "10.96.0.0/12"), Denied: prefixes(t, "192.168.10.0/24")}
	}
	for _, tc := range []struct {
		name, allowed, addr string
		zero                bool   // the zero Policy instead of cluster's
		reason              string // "" probed
		message             []string
	}{
		// Rule 1: never, whatever the flags.
		{name: "IMDS", zero: true, addr: "169.254.169.254", reason: ReasonCloudMetadata, message: []string{"169.254.169.254 is the cloud metadata service"}},
		{name: "IMDS allowed by name is still refused", allowed: "169.254.169.254/32", addr: "169.254.169.254", reason: ReasonCloudMetadata},
		{name: "ECS task metadata", zero: true, addr: "169.254.170.2", reason: ReasonCloudMetadata},
		{name: "AWS IMDS over IPv6", zero: true, addr: "fd00:ec2::254", reason: ReasonCloudMetadata, message: []string{"fd00:ec2::254 is AWS's instance services"}},
		{name: "AWS IMDS over IPv6 allowed by a wide range", allowed: "fd00::/8", addr: "fd00:ec2::254", reason: ReasonCloudMetadata},
		{name: "AWS DNS over IPv6", zero: true, addr: "fd00:ec2::253", reason: ReasonCloudMetadata},
		{name: "Alibaba metadata", zero: true, addr: "100.100.100.200", reason: ReasonCloudMetadata},
		{name: "Azure WireServer", zero: true, addr: "168.63.129.16", reason: ReasonCloudMetadata},
		{name: "Oracle legacy metadata", zero: true, addr: "192.0.0.192", reason: ReasonCloudMetadata},
		{name: "IPv4-mapped IMDS", zero: true, addr: "::ffff:169.254.169.254", reason: ReasonCloudMetadata},
		{name: "loopback", zero: true, addr: "127.0.0.1", reason: ReasonLoopback, message: []string{"127.0.0.1 is loopback"}},
		{name: "loopback allowed explicitly is still refused", allowed: "127.0.0.0/8", addr: "127.0.0.1", reason: ReasonLoopback},
		{name: "IPv6 loopback", zero: true, addr: "::1", reason: ReasonLoopback},
		{name: "IPv4-mapped loopback", zero: true, addr: "::ffff:127.0.0.1", reason: ReasonLoopback},
		{name: "link-local", zero: true, addr: "169.254.1.1", reason: ReasonLinkLocal},
		{name: "IPv6 link-local", zero: true, addr: "fe80::1", reason: ReasonLinkLocal},
		{name: "unspecified", zero: true, addr: "0.0.0.0", reason: ReasonUnspecified},
		{name: "this network", zero: true, addr: "0.1.2.3", reason: ReasonUnspecified},
		{name: "IPv6 unspecified", zero: true, addr: "::", reason: ReasonUnspecified},
		{name: "multicast", zero: true, addr: "239.1.1.1", reason: ReasonMulticast},
		{name: "IPv6 multicast", zero: true, addr: "ff05::1", reason: ReasonMulticast},
		{name: "broadcast", zero: true, addr: "255.255.255.255", reason: ReasonMulticast},

		// The zero Policy probes everything else.
		{name: "zero policy probes a VM", zero: true, addr: "10.20.0.1"},
		{name: "zero policy probes a public address", zero: true, addr: "203.0.113.7"},
		{name: "zero policy probes a ULA", zero: true, addr: "fd12::1"},

		// Rule 2: the cluster's networks.
		{name: "pod", addr: "10.244.3.4", reason: ReasonPodCIDR, message: []string{"10.244.3.4 is in the pod CIDR 10.244.0.0/16 (--pod-cidrs)", "--probe-allowed-cidrs"}},
		{name: "IPv6 pod", addr: "fd00:10:244::5", reason: ReasonPodCIDR},
		{name: "service", addr: "10.100.0.10", reason: ReasonServiceCIDR, message: []string{"the Service CIDR 10.96.0.0/12 (--service-cidrs)"}},
		{name: "denied", addr: "192.168.10.5", reason: ReasonDeniedCIDR, message: []string{"(--probe-denied-cidrs)"}},
		{name: "outside the cluster's networks", addr: "10.20.0.1"},
		{name: "a wider allow does not admit the pod CIDR", allowed: "10.0.0.0/8", addr: "10.244.3.4", reason: ReasonPodCIDR},
		{name: "a narrower allow inside the pod CIDR admits it", allowed: "10.0.0.0/8,10.244.7.0/24", addr: "10.244.7.9"},
		{name: "the narrower allow admits only itself", allowed: "10.0.0.0/8,10.244.7.0/24", addr: "10.244.8.9", reason: ReasonPodCIDR},
		{name: "a tie is a deny", allowed: "10.244.0.0/16", addr: "10.244.3.4", reason: ReasonPodCIDR},
		{name: "a host allowed inside the denied range", allowed: "192.168.10.5", addr: "192.168.10.5"},

		// Rule 3: a set allowlist refuses what it does not name.
		{name: "inside the allowlist", allowed: "10.20.0.0/16", addr: "10.20.0.1"},
		{name: "outside the allowlist", allowed: "10.20.0.0/16,2001:db8::/32", addr: "10.30.0.1", reason: ReasonNotAllowed,
			message: []string{"10.30.0.1 is outside the workload networks", "--probe-allowed-cidrs=10.20.0.0/16,2001:db8::/32"}},
		{name: "IPv6 inside the allowlist", allowed: "10.20.0.0/16,2001:db8::/32", addr: "2001:db8::9"},
		{name: "IPv6 outside an IPv4 allowlist", allowed: "10.20.0.0/16", addr: "2001:db8::9", reason: ReasonNotAllowed},

		// --probe-allowed-cidrs=none: nothing is probed, and the refusal
		// says which flag would allow it.
		{name: "none allowed refuses a VM", allowed: "none", addr: "10.20.0.1", reason: ReasonNotAllowed,
			message: []string{"10.20.0.1 is not probed", "--probe-allowed-cidrs=none", "with --probe-allowed-cidrs=CIDR"}},
		{name: "none allowed refuses IPv6", allowed: "none", addr: "2001:db8::9", reason: ReasonNotAllowed},
		{name: "none allowed: the pod CIDR still says pod", allowed: "none", addr: "10.244.3.4", reason: ReasonPodCIDR},
		{name: "none allowed: metadata still says metadata", allowed: "none", addr: "169.254.169.254", reason: ReasonCloudMetadata},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := Policy{}
			if !tc.zero {
				p = cluster(t, "")
				var err error
				if p.Allowed, p.NoneAllowed, err = ParseAllowed(tc.allowed); err != nil {
					t.Fatal(err)
				}
			}
			r := p.Check(netip.MustParseAddr(tc.addr))
			if r.Reason != tc.reason {
				t.Fatalf("Check(%s) = %q (%s), want %q", tc.addr, r.Reason, r.Message, tc.reason)
			}
			if r.Refused() != (tc.reason != "") || (r.Refused() && r.Message == "") {
				t.Fatalf("Check(%s) = %+v: Refused() %v", tc.addr, r, r.Refused())
			}
			for _, m := range tc.message {
				if !strings.Contains(r.Message, m) {
					t.Errorf("message %q does not contain %q", r.Message, m)
				}
			}
		})
	}
}

func TestParsePrefixes(t *testing.T) {
	for _, tc := range []struct {
		in, want, err string
	}{
		{in: "", want: ""},
		{in: " 10.0.0.0/8 , 2001:db8::/32,", want: "10.0.0.0/8,2001:db8::/32"},
		{in: "192.0.2.7", want: "192.0.2.7/32"},
		{in: "2001:db8::1", want: "2001:db8::1/128"},
		{in: "::ffff:192.0.2.7", want: "192.0.2.7/32"},
		{in: "10.0.0.1/8", err: "host bits"},
		{in: "10.0.0.0/33", err: "not a CIDR"},
		{in: "example.com", err: "not a CIDR or an address"},
	} {
		ps, err := ParsePrefixes(tc.in)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("ParsePrefixes(%q) = %v, %v; want an error with %q", tc.in, ps, err, tc.err)
			}
			continue
		}
		if err != nil || joinPrefixes(ps) != tc.want {
			t.Errorf("ParsePrefixes(%q) = %q, %v; want %q", tc.in, joinPrefixes(ps), err, tc.want)
		}
	}
}

func TestParseAllowed(t *testing.T) {
	for _, tc := range []struct {
		in, want, err string
		none          bool
	}{
		{in: "", want: ""},
		{in: "none", none: true},
		{in: " None ", none: true},
		{in: "10.20.0.0/16", want: "10.20.0.0/16"},
		{in: "none,10.20.0.0/16", err: `"none" names no network only alone`},
		{in: "10.0.0.1/8", err: "host bits"},
	} {
		ps, none, err := ParseAllowed(tc.in)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("ParseAllowed(%q) = %v, %v, %v; want an error with %q", tc.in, ps, none, err, tc.err)
			}
			continue
		}
		if err != nil || none != tc.none || joinPrefixes(ps) != tc.want {
			t.Errorf("ParseAllowed(%q) = %q, %v, %v; want %q, %v", tc.in, joinPrefixes(ps), none, err, tc.want, tc.none)
		}
	}
}

// FuzzCheck: whatever address a tenant writes and whatever the operator
// allows, Check never admits an address rule 1 refuses, and a refusal
// always says why.
func FuzzCheck(f *testing.F) {
	for _, s := range []string{"10.20.0.1", "169.254.169.254", "fd00:ec2::254", "::ffff:127.0.0.1", "fe80::1%eth0", "0.0.0.0"} {
		f.Add(s, "0.0.0.0/0,::/0")
	}
	f.Fuzz(func(t *testing.T, addr, allowed string) {
		a, err := netip.ParseAddr(addr)
		if err != nil {
			return
		}
		ps, err := ParsePrefixes(allowed)
		if err != nil {
			return
		}
		r := Policy{Allowed: ps}.Check(a)
		if r.Refused() && r.Message == "" {
			t.Fatalf("Check(%s) refused without a message", a)
		}
		if b := Builtin(a.Unmap().WithZone("")); b.Refused() && r.Reason != b.Reason {
			t.Fatalf("Check(%s) with %s allowed = %+v, want the built-in refusal %q", a, allowed, r, b.Reason)
		}
	})
}
