package history

import (
	"fmt"
	"net/netip"
	"testing"
)

// TestIndexOf: a ConfigMap's indexes name its entries' distinct addresses
// and pools, and hold a Bloom filter of their Services (entries for no
// Service add none) that never misses one of them and says "may hold" of
// few others; the whole stays within the budget (the pools' index left out
// past it), and a ConfigMap without an index, or with one it cannot
// parse, may hold anything (mayHoldMatching).
func TestIndexOf(t *testing.T) {
	a, b := netip.MustParseAddr("10.0.0.2"), netip.MustParseAddr("10.0.0.1")
	entries := []Entry{
		{IP: a, Pool: "lan", Namespace: "shop", Name: "web"},
		{IP: b, Pool: "lan", Namespace: "shop", Name: "web"},
		{IP: b, Pool: "dmz", Namespace: "ops", Name: "db"},
		{IP: b, Action: Reserved}, // for no Service
	}
	got := indexOf(entries, IndexBudget)
	if got[AddressesAnnotation] != "10.0.0.1 10.0.0.2" || got[PoolsAnnotation] != "dmz lan" {
		t.Fatalf("indexOf = %v, want addresses %q, pools %q", got, "10.0.0.1 10.0.0.2", "dmz lan")
	}

	// The worst a sealed segment may hold: 2,600 entries, each of its own
	// Service with the longest namespace/name (63 + 1 + 63) and an IPv6
	// address; then the same with pools of the longest names (253).
	var worst []Entry
	ip := netip.MustParseAddr("2001:db8:ffff:ffff:ffff:ffff:ffff:0")
	for i := range 2600 {
		worst = append(worst, Entry{IP: ip, Pool: "lan", Namespace: fmt.Sprintf("%063d", i), Name: fmt.Sprintf("%063d", i)})
		ip = ip.Next()
	}
	size := func(idx map[string]string) int {
		n := 0
		for k, v := range idx {
			n += len(k) + len(v)
		}
		return n
	}
	idx := indexOf(worst, IndexBudget)
	if len(idx[ServicesAnnotation]) > 4500 || idx[PoolsAnnotation] != "lan" || size(idx) > IndexBudget {
		t.Fatalf("worst Services: Services index %d bytes (want ≤ 4,500), pools %q, all %d bytes (budget %d)",
			len(idx[ServicesAnnotation]), idx[PoolsAnnotation], size(idx), IndexBudget)
	}
	for _, e := range worst {
		if !bloomMayHold(idx[ServicesAnnotation], e.Namespace+"/"+e.Name) {
			t.Fatalf("the Services index misses %s/%s, which it holds", e.Namespace, e.Name)
		}
	}
	falsePos := 0
	for i := range 10000 {
		if bloomMayHold(idx[ServicesAnnotation], fmt.Sprintf("other-%d/svc", i)) {
			falsePos++
		}
	}
	if falsePos > 300 {
		t.Fatalf("the Services index of 2,600 Services says %d of 10,000 others may be there, want ≤ 3 %%", falsePos)
	}
	longPools := append([]Entry(nil), worst...)
	for i := range longPools {
		longPools[i].Pool = fmt.Sprintf("%0253d", i)
	}
	idx = indexOf(longPools, IndexBudget)
	if _, ok := idx[PoolsAnnotation]; ok || idx[ServicesAnnotation] == "" || size(idx) > IndexBudget {
		t.Fatalf("past the budget: pools' index present %v (want left out), Services' %d bytes (want kept), all %d bytes",
			ok, len(idx[ServicesAnnotation]), size(idx))
	}

	for _, tc := range []struct {
		ann  map[string]string
		f    Filter
		want bool
	}{
		{got, Filter{Namespace: "shop", Name: "web"}, true},
		{got, Filter{Namespace: "ops", Name: "db"}, true},
		{got, Filter{Namespace: "shop", Name: "db"}, false},
		{got, Filter{Pool: "dmz"}, true},
		{got, Filter{Pool: "wan"}, false},
		{got, Filter{IP: a, Pool: "wan"}, false},
		{got, Filter{Namespace: "shop"}, true}, // a namespace alone is not indexed
		{idx, Filter{Pool: "lan"}, true},       // no pools' index
		{map[string]string{ServicesAnnotation: "bloom9 7 AAAA"}, Filter{Namespace: "x", Name: "y"}, true},
		{nil, Filter{IP: a, Pool: "wan", Namespace: "x", Name: "y"}, true},
	} {
		if g := mayHoldMatching(tc.ann, tc.f); g != tc.want {
			t.Errorf("mayHoldMatching(%+v) = %v, want %v", tc.f, g, tc.want)
		}
	}
}
