package allocator

import (
	"math/big"
	"net/netip"
	"strings"
	"testing"
)

func bigPow2(n uint) *big.Int { return new(big.Int).Lsh(big.NewInt(1), n) }

func TestParsePool(t *testing.T) {
	// ::/0 without ::, ::1, fe80::/10 and ff00::/8 (its anycast is ::).
	v6All := new(big.Int).Sub(bigPow2(128), big.NewInt(2))
	v6All.Sub(v6All, bigPow2(118))
	v6All.Sub(v6All, bigPow2(120))
	tests := []struct {
		name      string
		spec      PoolSpec
		wantErr   string
		wantV4    *big.Int
		wantV6    *big.Int
		wantRange string // ranges joined by " "
	}{
		{name: "cidr v4", spec: PoolSpec{Addresses: []string{"10.0.0.0/24"}}, wantV4: big.NewInt(256), wantV6: big.NewInt(0), wantRange: "10.0.0.0-10.0.0.255"},
		{name: "single address /32", spec: PoolSpec{Addresses: []string{"10.0.0.7/32"}}, wantV4: big.NewInt(1), wantV6: big.NewInt(0), wantRange: "10.0.0.7"},
		{name: "range", spec: PoolSpec{Addresses: []string{"10.0.0.10 - 10.0.0.20"}}, wantV4: big.NewInt(11), wantV6: big.NewInt(0), wantRange: "10.0.0.10-10.0.0.20"},
		{name: "ipv6 /64 counted exactly", spec: PoolSpec{Addresses: []string{"2001:db8::/64"}}, wantV4: big.NewInt(0), wantV6: new(big.Int).Sub(bigPow2(64), big.NewInt(1))}, // the Subnet-Router anycast,
		{name: "ipv6 /0 counted exactly", spec: PoolSpec{Addresses: []string{"::/0"}}, wantV4: big.NewInt(0), wantV6: v6All},
		{name: "mixed families", spec: PoolSpec{Addresses: []string{"2001:db8::/126", "10.0.0.0/30"}}, wantV4: big.NewInt(4), wantV6: big.NewInt(3), wantRange: "10.0.0.0-10.0.0.3 2001:db8::-2001:db8::3"},
		{name: "overlapping and adjacent entries merge", spec: PoolSpec{Addresses: []string{"10.0.0.0/25", "10.0.0.100-10.0.0.200", "10.0.0.201-10.0.0.255"}}, wantV4: big.NewInt(256), wantV6: big.NewInt(0), wantRange: "10.0.0.0-10.0.0.255"},
		{name: "avoidBuggyIPs /24", spec: PoolSpec{Addresses: []string{"10.0.0.0/24"}, AvoidBuggyIPs: true}, wantV4: big.NewInt(254), wantV6: big.NewInt(0)},
		{name: "avoidBuggyIPs /16", spec: PoolSpec{Addresses: []string{"10.1.0.0/16"}, AvoidBuggyIPs: true}, wantV4: big.NewInt(65536 - 512), wantV6: big.NewInt(0)},
		{name: "avoidBuggyIPs range across a boundary", spec: PoolSpec{Addresses: []string{"10.0.0.250-10.0.1.5"}, AvoidBuggyIPs: true}, wantV4: big.NewInt(10), wantV6: big.NewInt(0)},
		{name: "avoidBuggyIPs whole IPv4 space", spec: PoolSpec{Addresses: []string{"0.0.0.0/0"}, AvoidBuggyIPs: true}, wantV4: big.NewInt(1<<32 - 2<<24 - (1<<24 - 1<<17) - (1<<16 - 1<<9) - (1<<28 - 1<<21)), wantV6: big.NewInt(0)},
		{name: "avoidBuggyIPs ignores IPv6", spec: PoolSpec{Addresses: []string{"2001:db8::/120"}, AvoidBuggyIPs: true}, wantV4: big.NewInt(0), wantV6: big.NewInt(255)},
		{name: "unspecified skipped", spec: PoolSpec{Addresses: []string{"0.0.0.0/30"}}, wantV4: big.NewInt(3), wantV6: big.NewInt(0)},
		{name: "whole IPv4 space without unusable blocks", spec: PoolSpec{Addresses: []string{"0.0.0.0/0"}}, wantV4: big.NewInt(1<<32 - 1 - 1<<24 - 1<<16 - 1<<28 - 1), wantV6: big.NewInt(0)},
		{name: "loopback only", spec: PoolSpec{Addresses: []string{"127.0.0.1-127.0.0.9"}}, wantV4: big.NewInt(0), wantV6: big.NewInt(0)},
		{name: "IPv6 range has no anycast", spec: PoolSpec{Addresses: []string{"2001:db8::-2001:db8::3"}}, wantV4: big.NewInt(0), wantV6: big.NewInt(4)},
		{name: "IPv6 /127 has no anycast", spec: PoolSpec{Addresses: []string{"2001:db8::/127"}}, wantV4: big.NewInt(0), wantV6: big.NewInt(2)},
		{name: "link-local and multicast v6", spec: PoolSpec{Addresses: []string{"fe80::-fe80::ff", "ff02::1-ff02::2", "2001:db8::5/128"}}, wantV4: big.NewInt(0), wantV6: big.NewInt(1)},
		{name: "exclude an address", spec: PoolSpec{Addresses: []string{"10.0.0.0/24"}, Exclude: []string{"10.0.0.1"}}, wantV4: big.NewInt(255), wantV6: big.NewInt(0)},
		{name: "exclude a range, a CIDR and an overlap of both", spec: PoolSpec{Addresses: []string{"10.0.0.0/24"}, Exclude: []string{"10.0.0.240-10.0.0.250", "10.0.0.128/28", "10.0.0.136-10.0.0.143"}}, wantV4: big.NewInt(256 - 11 - 16), wantV6: big.NewInt(0)},
		{name: "exclusion reaching past the pool counts only its part inside", spec: PoolSpec{Addresses: []string{"10.0.0.10-10.0.0.20"}, Exclude: []string{"10.0.0.0/28"}}, wantV4: big.NewInt(5), wantV6: big.NewInt(0)},
		{name: "exclusion over skipped addresses counts them once", spec: PoolSpec{Addresses: []string{"10.0.0.0/24", "2001:db8::/120"}, AvoidBuggyIPs: true, Exclude: []string{"10.0.0.0-10.0.0.9", "2001:db8::/126"}}, wantV4: big.NewInt(254 - 9), wantV6: big.NewInt(255 - 3)},
		{name: "skipFirstLastIPs on each CIDR", spec: PoolSpec{Addresses: []string{"10.0.0.0/24", "10.0.1.0/25", "2001:db8::/120"}, SkipFirstLastIPs: true}, wantV4: big.NewInt(254 + 126), wantV6: big.NewInt(254)},
		{name: "skipFirstLastIPs leaves ranges, /31, /32, /127 and /128", spec: PoolSpec{Addresses: []string{"10.0.0.10-10.0.0.20", "10.0.1.0/31", "10.0.2.7/32", "2001:db8::/127", "2001:db8:1::1/128"}, SkipFirstLastIPs: true}, wantV4: big.NewInt(11 + 2 + 1), wantV6: big.NewInt(3)},
		{name: "skipFirstLastIPs and avoidBuggyIPs count .0 and .255 once", spec: PoolSpec{Addresses: []string{"10.0.0.0/24"}, SkipFirstLastIPs: true, AvoidBuggyIPs: true}, wantV4: big.NewInt(254), wantV6: big.NewInt(0)},
		{name: "exclusion not an address", spec: PoolSpec{Addresses: []string{"10.0.0.0/24"}, Exclude: []string{"gateway"}}, wantErr: `spec.exclude[0] "gateway": neither an address, a CIDR nor a range`},
		{name: "exclusion reversed", spec: PoolSpec{Addresses: []string{"10.0.0.0/24"}, Exclude: []string{"10.0.0.1", "10.0.0.9-10.0.0.5"}}, wantErr: `spec.exclude[1] "10.0.0.9-10.0.0.5": range starts after it ends; write it as 10.0.0.5-10.0.0.9`},
		{name: "exclusion host bits", spec: PoolSpec{Addresses: []string{"10.0.0.0/24"}, Exclude: []string{"10.0.0.1/28"}}, wantErr: `spec.exclude[0] "10.0.0.1/28": host bits set; the CIDR is 10.0.0.0/28`},
		{name: "exclusion outside the pool", spec: PoolSpec{Addresses: []string{"10.0.0.0/24", "10.0.2.0/24"}, Exclude: []string{"10.0.1.1"}}, wantErr: `spec.exclude[0] "10.0.1.1": outside every entry of spec.addresses (10.0.0.0/24, 10.0.2.0/24); exclude addresses of this pool, or remove the entry`},
		{name: "exclusion of the other family", spec: PoolSpec{Addresses: []string{"10.0.0.0/24"}, Exclude: []string{"2001:db8::1"}}, wantErr: `spec.exclude[0] "2001:db8::1": outside every entry`},
		{name: "no addresses", spec: PoolSpec{}, wantErr: "spec.addresses: empty"},
		{name: "host bits", spec: PoolSpec{Addresses: []string{"10.0.0.1/24"}}, wantErr: `spec.addresses[0] "10.0.0.1/24": host bits set; the CIDR is 10.0.0.0/24`},
		{name: "bare address", spec: PoolSpec{Addresses: []string{"10.0.0.1"}}, wantErr: "10.0.0.7/32 for one address"},
		{name: "bad cidr", spec: PoolSpec{Addresses: []string{"10.0.0.0/33"}}, wantErr: "not a CIDR"},
		{name: "mixed range", spec: PoolSpec{Addresses: []string{"10.0.0.1-2001:db8::1"}}, wantErr: "mixes IPv4 and IPv6"},
		{name: "reversed range", spec: PoolSpec{Addresses: []string{"10.0.0.9-10.0.0.1"}}, wantErr: "write it as 10.0.0.1-10.0.0.9"},
		{name: "three-part range", spec: PoolSpec{Addresses: []string{"10.0.0.1-10.0.0.2-10.0.0.3"}}, wantErr: "is not an IP address"},
		{name: "zone", spec: PoolSpec{Addresses: []string{"fe80::1%eth0-fe80::9"}}, wantErr: "has a zone"},
		{name: "4in6", spec: PoolSpec{Addresses: []string{"::ffff:10.0.0.1-::ffff:10.0.0.9"}}, wantErr: "write 10.0.0.1"},
		{name: "negative priority", spec: PoolSpec{Addresses: []string{"10.0.0.0/24"}, Priority: -1}, wantErr: "priority"},
		{name: "empty namespace", spec: PoolSpec{Addresses: []string{"10.0.0.0/24"}, Namespaces: []string{""}}, wantErr: "spec.allocation.namespaces[0]"},
		{name: "uppercase namespace", spec: PoolSpec{Addresses: []string{"10.0.0.0/24"}, Namespaces: []string{"Team"}}, wantErr: `spec.allocation.namespaces[0] "Team": not a namespace name`},
		{name: "bad operator", spec: PoolSpec{Addresses: []string{"10.0.0.0/24"}, ServiceSelectors: []Selector{{MatchExpressions: []SelectorRequirement{{Key: "a", Operator: "Gt"}}}}}, wantErr: "spec.allocation.serviceSelectors[0].matchExpressions[0]: unknown operator"},
		{name: "In without values", spec: PoolSpec{Addresses: []string{"10.0.0.0/24"}, NamespaceSelectors: []Selector{{MatchExpressions: []SelectorRequirement{{Key: "a", Operator: OpIn}}}}}, wantErr: "needs at least one value"},
		{name: "Exists with values", spec: PoolSpec{Addresses: []string{"10.0.0.0/24"}, NamespaceSelectors: []Selector{{MatchExpressions: []SelectorRequirement{{Key: "a", Operator: OpExists, Values: []string{"x"}}}}}}, wantErr: "takes no values"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := ParsePool("p", tt.spec)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := p.Total(IPv4); got.Cmp(tt.wantV4) != 0 {
				t.Errorf("IPv4 total = %s, want %s", got, tt.wantV4)
			}
			if got := p.Total(IPv6); got.Cmp(tt.wantV6) != 0 {
				t.Errorf("IPv6 total = %s, want %s", got, tt.wantV6)
			}
			if tt.wantRange != "" {
				var rs []string
				for _, r := range p.ranges {
					rs = append(rs, r.String())
				}
				if got := strings.Join(rs, " "); got != tt.wantRange {
					t.Errorf("ranges = %s, want %s", got, tt.wantRange)
				}
			}
		})
	}
}

func TestPoolContains(t *testing.T) {
	p := mustPool(t, "p", PoolSpec{Addresses: []string{"10.0.0.0/30", "10.0.1.5-10.0.1.6", "2001:db8::/127"}})
	for ip, want := range map[string]bool{
		"10.0.0.0": true, "10.0.0.3": true, "10.0.0.4": false, "10.0.1.4": false, "10.0.1.6": true,
		"2001:db8::1": true, "2001:db8::2": false, "9.255.255.255": false,
	} {
		if got := p.Contains(netip.MustParseAddr(ip)); got != want {
			t.Errorf("Contains(%s) = %v, want %v", ip, got, want)
		}
	}
}

func TestSelectorMatches(t *testing.T) {
	labels := map[string]string{"team": "a", "tier": "web"}
	tests := []struct {
		name string
		sel  Selector
		want bool
	}{
		{"empty matches all", Selector{}, true},
		{"matchLabels hit", Selector{MatchLabels: map[string]string{"team": "a"}}, true},
		{"matchLabels miss", Selector{MatchLabels: map[string]string{"team": "b"}}, false},
		{"In hit", Selector{MatchExpressions: []SelectorRequirement{{Key: "tier", Operator: OpIn, Values: []string{"db", "web"}}}}, true},
		{"In absent key", Selector{MatchExpressions: []SelectorRequirement{{Key: "x", Operator: OpIn, Values: []string{"web"}}}}, false},
		{"NotIn hit", Selector{MatchExpressions: []SelectorRequirement{{Key: "tier", Operator: OpNotIn, Values: []string{"web"}}}}, false},
		{"NotIn absent key", Selector{MatchExpressions: []SelectorRequirement{{Key: "x", Operator: OpNotIn, Values: []string{"web"}}}}, true},
		{"Exists", Selector{MatchExpressions: []SelectorRequirement{{Key: "team", Operator: OpExists}}}, true},
		{"DoesNotExist", Selector{MatchExpressions: []SelectorRequirement{{Key: "team", Operator: OpDoesNotExist}}}, false},
		{"labels AND expressions", Selector{MatchLabels: map[string]string{"team": "a"}, MatchExpressions: []SelectorRequirement{{Key: "tier", Operator: OpIn, Values: []string{"db"}}}}, false},
		{"unknown operator never matches", Selector{MatchExpressions: []SelectorRequirement{{Key: "team", Operator: "Gt"}}}, false},
	}
	for _, tt := range tests {
		if got := tt.sel.Matches(labels); got != tt.want {
			t.Errorf("%s: Matches = %v, want %v", tt.name, got, tt.want)
		}
	}
}

func mustPool(t testing.TB, name string, spec PoolSpec) *Pool {
	t.Helper()
	p, err := ParsePool(name, spec)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestOverlapWithinAPoolIsMerged: entries of one pool that overlap (a CIDR
// listed beside a range inside it, say, after an edit that grew the pool)
// are merged, not a conflict: the pool serves, counts each address once,
// and hands each out once. Only overlaps between two pools make one of
// them Conflicting (docs/pools.md, "Overlapping entries").
func TestOverlapWithinAPoolIsMerged(t *testing.T) {
	p := mustPool(t, "a", spec("10.0.0.0/30", "10.0.0.2-10.0.0.3", "10.0.0.3/32"))
	a := New()
	if upd := a.SetPools([]*Pool{p}); len(upd.Conflicts) > 0 {
		t.Fatalf("conflicts: %+v", upd.Conflicts)
	}
	if u, _ := a.Usage("a"); u.IPv4.Total.Int64() != 4 {
		t.Fatalf("total = %s, want 4", u.IPv4.Total)
	}
	seen := map[netip.Addr]bool{}
	for i := range 4 {
		res := mustAllocate(t, a, Request{Service: "ns/s" + string(rune('a'+i))})
		if seen[res.IPs[0]] {
			t.Fatalf("%s handed out twice", res.IPs[0])
		}
		seen[res.IPs[0]] = true
	}
	if _, err := a.Allocate(Request{Service: "ns/full"}); reasonOf(err) != ReasonPoolExhausted {
		t.Fatalf("a fifth Service: err = %v, want PoolExhausted", err)
	}
}
