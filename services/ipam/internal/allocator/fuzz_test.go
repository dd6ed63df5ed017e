package allocator

import (
	"errors"
	"fmt"
	"math/big"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"
)

// FuzzParsePool: any spec.addresses either fails with an error naming the
// field, or yields sorted, disjoint, non-adjacent ranges whose exact total
// matches a brute-force count for small pools.
func FuzzParsePool(f *testing.F) {
	for _, s := range []string{
		"10.0.0.0/24", "10.0.0.10-10.0.0.20", "2001:db8::/64\n10.0.0.0/30", "10.0.0.1/24",
		"10.0.0.250-10.0.1.5\n10.0.0.0/24", "::/0", "0.0.0.0/0", "fe80::1%eth0-fe80::2", "1.2.3.4-5.6.7.8-9",
		"::ffff:1.2.3.4/128", "10.0.0.9-10.0.0.1", " 10.0.0.0/31 ", "255.255.255.255/32\n::/128",
	} {
		f.Add(s, false, "", false)
		f.Add(s, true, "", true)
	}
	f.Add("10.0.0.0/24", true, "10.0.0.1\n10.0.0.240-10.0.0.250\n10.0.0.128/28", true)
	f.Add("10.0.0.10-10.0.0.20\n2001:db8::/120", false, "10.0.0.0/28\n2001:db8::/126", true)
	f.Add("10.0.0.0/24", false, "10.0.1.1", false)
	f.Fuzz(func(t *testing.T, addresses string, avoidBuggy bool, exclude string, skipFirstLast bool) {
		spec := PoolSpec{Addresses: strings.Split(addresses, "\n"), AvoidBuggyIPs: avoidBuggy, SkipFirstLastIPs: skipFirstLast}
		if exclude != "" {
			spec.Exclude = strings.Split(exclude, "\n")
		}
		p, err := ParsePool("p", spec)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "spec.addresses") && !strings.HasPrefix(err.Error(), "spec.exclude") {
				t.Fatalf("error does not name the field: %v", err)
			}
			return
		}
		total := [2]*big.Int{new(big.Int), new(big.Int)}
		anycast := map[netip.Addr]bool{} // and the first and last addresses skipFirstLastIPs skips
		for _, e := range spec.Addresses {
			pfx, err := netip.ParsePrefix(strings.TrimSpace(e))
			if err != nil {
				continue
			}
			if pfx.Addr().Is6() && pfx.Bits() < 127 {
				anycast[pfx.Addr()] = true
			}
			if skipFirstLast && pfx.Bits() < pfx.Addr().BitLen()-1 {
				anycast[pfx.Addr()], anycast[lastOf(pfx)] = true, true
			}
		}
		var excluded []addrRange
		for _, e := range spec.Exclude {
			r, err := parseExcludeEntry(e)
			if err != nil {
				t.Fatalf("ParsePool accepted exclusion %q: %v", e, err)
			}
			excluded = append(excluded, r)
		}
		skipped := func(a netip.Addr) bool {
			return anycast[a] || slices.ContainsFunc(excluded, func(r addrRange) bool { return r.contains(a) })
		}
		for i, r := range p.ranges {
			if !r.first.IsValid() || r.first.Compare(r.last) > 0 || r.first.Is4() != r.last.Is4() || r.first.Zone() != "" {
				t.Fatalf("bad range %v", r)
			}
			if i > 0 {
				prev := p.ranges[i-1]
				if prev.last.Compare(r.first) >= 0 || prev.last.Next() == r.first {
					t.Fatalf("ranges %v and %v overlap or touch", prev, r)
				}
			}
			if !p.Contains(r.first) || !p.Contains(r.last) {
				t.Fatalf("Contains misses the ends of %v", r)
			}
			if b := r.first.Prev(); b.IsValid() && (i == 0 || p.ranges[i-1].last != b) && p.Contains(b) {
				t.Fatalf("Contains(%v) before %v", b, r)
			}
			n := r.size()
			if n.IsInt64() && n.Int64() <= 4096 {
				// brute force
				var c int64
				for a := r.first; ; a = a.Next() {
					if !(avoidBuggy && buggy(a)) && unusableKind(a) == "" && !skipped(a) {
						c++
					}
					if a == r.last {
						break
					}
				}
				n = big.NewInt(c)
			} else {
				n = nil // too big to count one by one: checked below from the unusable ranges
			}
			fi := famIdx(FamilyOf(r.first))
			if n == nil {
				n = r.size()
				if avoidBuggy {
					n.Sub(n, buggyCount(r))
				}
				for _, u := range p.unusable {
					if r.contains(u.first) {
						if !r.contains(u.last) || unusableKind(u.first) == "" && !skipped(u.first) {
							t.Fatalf("unusable range %v is not inside %v or not unusable", u, r)
						}
						n.Sub(n, u.size())
						if avoidBuggy {
							n.Add(n, buggyCount(u))
						}
					}
				}
			}
			total[fi].Add(total[fi], n)
		}
		if p.Total(IPv4).Cmp(total[0]) != 0 || p.Total(IPv6).Cmp(total[1]) != 0 {
			t.Fatalf("totals %s/%s, counted %s/%s", p.Total(IPv4), p.Total(IPv6), total[0], total[1])
		}
	})
}

// FuzzParseServiceRequest: any annotations either fail with InvalidRequest,
// or give at most one valid IP per family that round-trips.
func FuzzParseServiceRequest(f *testing.F) {
	f.Add("192.0.2.1", "", "", "", "")
	f.Add("192.0.2.1,2001:db8::1", "2001:db8::1,192.0.2.1", "pool-a", "key", "")
	f.Add("", "", "", "", "192.0.2.7")
	f.Add("192.0.2.1", "", "", "", "192.0.2.1")
	f.Add("192.0.2.1,192.0.2.2", "", "Bad_Pool", "", "")
	f.Add("fe80::1%eth0", "x", "", "", "::ffff:1.2.3.4")
	f.Add(",", " ", "a..b", "k", "0.0.0.0")
	f.Add("192.0.2.1", "192.0.2.1", "", "k", "")
	f.Fuzz(func(t *testing.T, ips, legacyIPs, pool, share, lbIP string) {
		ann := map[string]string{
			"ipledger.io/loadBalancerIPs":              ips,
			"metallb.universe.tf/loadBalancerIPs":      legacyIPs,
			"lbipam.cilium.io/ips":                     legacyIPs,
			"ipledger.io/address-pool":                 pool,
			"metallb.io/allow-shared-ip":               share,
			"io.cilium/lb-ipam-sharing-key":            share,
			"lbipam.cilium.io/sharing-cross-namespace": pool,
		}
		req, err := ParseServiceRequest(ann, lbIP)
		if err != nil {
			var ae *Error
			if !errors.As(err, &ae) || ae.Reason != ReasonInvalidRequest || ae.Message == "" {
				t.Fatalf("error is not InvalidRequest: %#v", err)
			}
			return
		}
		hasList := strings.TrimSpace(ips) != "" || strings.TrimSpace(legacyIPs) != ""
		if hasList && strings.TrimSpace(lbIP) != "" {
			t.Fatal("accepted both the annotation and spec.loadBalancerIP")
		}
		if len(req.RequestedIPs) > 2 || len(req.RequestedIPs) == 2 && FamilyOf(req.RequestedIPs[0]) == FamilyOf(req.RequestedIPs[1]) {
			t.Fatalf("IPs %v: more than one per family", req.RequestedIPs)
		}
		var parts []string
		for _, ip := range req.RequestedIPs {
			if !ip.IsValid() || ip.Zone() != "" || ip.Is4In6() {
				t.Fatalf("bad IP %v", ip)
			}
			parts = append(parts, ip.String())
		}
		if len(parts) > 0 {
			again, err := ParseServiceRequest(map[string]string{AnnotationLoadBalancerIPs: strings.Join(parts, ",")}, "")
			if err != nil || fmt.Sprint(again.RequestedIPs) != fmt.Sprint(req.RequestedIPs) {
				t.Fatalf("round trip of %v: %v %v", parts, again.RequestedIPs, err)
			}
		}
		if req.Pool != strings.TrimSpace(pool) || req.SharingKey != strings.TrimSpace(share) {
			t.Fatalf("pool/share = %q/%q", req.Pool, req.SharingKey)
		}
	})
}

// FuzzAllocatorInvariants runs a byte-driven sequence of operations against
// small pools and checks after each that no IP is held by two Services that
// may not share it, nothing reserved is held by a stranger, every held IP is
// in the taken set, and the usage counts equal a recount.
func FuzzAllocatorInvariants(f *testing.F) {
	f.Add([]byte{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15})
	f.Add([]byte("restart order matters: ledger, status, requests, pending"))
	f.Add([]byte{5, 5, 5, 5, 1, 1, 1, 7, 7, 7, 9, 9, 2, 2, 200, 100, 50})
	f.Fuzz(func(t *testing.T, ops []byte) {
		runOps(t, ops)
	})
}

func TestAllocatorInvariantsRandom(t *testing.T) {
	for seed := range 200 {
		ops := make([]byte, 300)
		x := uint32(seed*2654435761 + 1)
		for i := range ops {
			x ^= x << 13
			x ^= x >> 17
			x ^= x << 5
			ops[i] = byte(x)
		}
		runOps(t, ops)
	}
}

func runOps(t *testing.T, ops []byte) {
	poolSets := [][]*Pool{
		{mustPool(t, "a", keeping(time.Hour, spec("10.0.0.0/30", "2001:db8::/126"))), mustPool(t, "b", quota(keeping(time.Hour, spec("10.0.0.4-10.0.0.6")), 2))},
		{mustPool(t, "a", spec("10.0.0.0/31")), mustPool(t, "c", keeping(time.Minute, spec("10.0.0.2-10.0.0.9", "2001:db8::/127")))},
		{mustPool(t, "b", spec("10.0.0.0/29"))},
	}
	now := time.Date(2026, 12, 5, 12, 0, 0, 0, time.UTC)
	a := New()
	a.SetPools(poolSets[0])
	ip := func(b byte) netip.Addr {
		if b&1 == 0 {
			return netip.AddrFrom4([4]byte{10, 0, 0, b >> 1 & 7})
		}
		return netip.MustParseAddr(fmt.Sprintf("2001:db8::%x", b>>1&3))
	}
	sharing := func(b byte) Sharing {
		switch b & 3 {
		case 0:
			return Sharing{}
		case 1:
			return Sharing{Key: "k", Ports: []Port{{Port: int32(b>>2&1) + 80}}}
		case 2:
			return Sharing{Key: "k", Ports: []Port{{Port: 80}}, Local: true, Selector: map[string]string{"app": string('a' + b>>2&1)}}
		}
		return Sharing{Key: "j", Ports: []Port{{Port: 443}}}
	}
	pols := []FamilyPolicy{SingleStack, PreferDualStack, RequireDualStack}
	for i := 0; i+2 < len(ops); i += 3 {
		op, x, y := ops[i], ops[i+1], ops[i+2]
		svc := fmt.Sprintf("%s/s%d", []string{"ns", "other"}[x>>5&1], x&7)
		switch op % 8 {
		case 7:
			if x&24 == 24 { // another controller's Service shows ip(y), or nothing
				var ips []netip.Addr
				if y&64 == 0 {
					ips = []netip.Addr{ip(y)}
				}
				a.SetForeign(fmt.Sprintf("foreign/s%d", x&7), ips)
				break
			}
			a.Claim(Request{Service: svc, RequestedIPs: []netip.Addr{ip(y)}})
		case 0, 1:
			req := Request{Service: svc, FamilyPolicy: pols[int(y)%3], Families: []Family{IPv4, IPv6}, Sharing: sharing(y >> 2)}
			if x&8 != 0 {
				req.RequestedIPs = []netip.Addr{ip(y)}
				if FamilyOf(ip(y)) == IPv6 && req.FamilyPolicy == SingleStack {
					req.Families = []Family{IPv6}
				}
			}
			if x&16 != 0 {
				req.Pool = string('a' + y%3)
			}
			before := a.Explain(req)
			res, err := a.Allocate(req)
			switch {
			case IsUnfit(err):
				if !strings.Contains(before.Decision, "release it and choose again") {
					t.Fatalf("Allocate: %v; Explain said %q", err, before.Decision)
				}
			case err != nil:
				want := reasonOf(err)
				if len(before.IPs) > 0 {
					want = ReasonAllocated // it keeps what it holds
				}
				if before.Reason != want {
					t.Fatalf("Allocate: %v (%s); Explain said %s: %s", err, reasonOf(err), before.Reason, before.Decision)
				}
			case res.Outside != "":
				if before.Reason != ReasonHeldOutsidePool || res.New || !slices.Equal(res.IPs, before.IPs) {
					t.Fatalf("Allocate kept %v outside its pool (%s); Explain said %s: %s", res.IPs, res.Outside, before.Reason, before.Decision)
				}
			default:
				want := ReasonAllocated
				if len(res.Across) > 0 {
					want = ReasonHeldSharedAcrossNamespaces
				}
				if before.Reason != want || !strings.Contains(before.Decision, addrList(res.IPs)) {
					t.Fatalf("Allocate gave %v from %s; Explain said %s: %s", res.IPs, res.Pool, before.Reason, before.Decision)
				}
				if len(res.IPs) == 0 {
					t.Fatal("allocated nothing")
				}
				for _, got := range res.IPs {
					// A kept address goes back to its Service whoever requests it.
					back := slices.ContainsFunc(res.Kept, func(r Reservation) bool { return r.IP == got && keptForRequest(&r, req) })
					if res.New && !back && !slices.Contains(req.RequestedIPs, got) && !slices.Contains(before.IPs, got) && a.idx.claimedByOther(got, svc) && len(a.Holders(got)) == 1 {
						t.Fatalf("%s auto-allocated %s, which another Service requests", svc, got)
					}
				}
			}
		case 2:
			a.Assign(svc, []netip.Addr{ip(y)}, sharing(y>>3))
		case 3:
			// Deleted (kept for it) or released to ask again (not kept).
			now = now.Add(time.Duration(y) * time.Second)
			var kept []Reservation
			if y&1 == 0 {
				kept = a.KeepOnRelease([]string{svc}, now)
			}
			a.Release(svc)
			for _, r := range kept {
				if err := a.Reserve(r); err != nil {
					t.Fatalf("keep %s for %s: %v", r.IP, svc, err)
				}
			}
		case 4:
			fs := ""
			if y&1 == 0 {
				fs = svc
			}
			a.Reserve(Reservation{IP: ip(y >> 1), Note: "n", ForService: fs})
		case 5:
			if y&1 == 0 {
				a.Unreserve(ip(y >> 1))
				break
			}
			for _, r := range a.ExpiredKept(now.Add(time.Duration(y) * time.Second)) {
				a.Unreserve(r.IP)
			}
		case 6:
			a.SetPools(poolSets[int(y)%len(poolSets)])
		}
		checkInvariants(t, a)
	}
}

// checkInvariants fails t when a's indexes disagree (indexes.check). Every
// operation checks them already (checkIndexes, TestMain); this says so at
// the fuzzer's every step whatever TestMain does.
func checkInvariants(t *testing.T, a *Allocator) {
	t.Helper()
	if err := a.idx.check(); err != nil {
		t.Fatal(err)
	}
}

func quota(s PoolSpec, max int) PoolSpec {
	s.MaxAddressesPerNamespace = max
	return s
}
