package history

import (
	"fmt"
	"net/netip"
	"strings"
	"testing"
)

// TestIndexOf: a ConfigMap's indexes name its entries' distinct addresses,
// pools and Services (entries for no Service name none); past the budget
// the Services' index, then the pools', is left out, and a ConfigMap
// without an index may hold anything (mayHoldMatching).
func TestIndexOf(t *testing.T) {
	a, b := netip.MustParseAddr("10.0.0.2"), netip.MustParseAddr("10.0.0.1")
	entries := []Entry{
		{IP: a, Pool: "lan", Namespace: "shop", Name: "web"},
		{IP: b, Pool: "lan", Namespace: "shop", Name: "web"},
		{IP: b, Pool: "dmz", Namespace: "ops", Name: "db"},
		{IP: b, Action: Reserved}, // for no Service
	}
	got := indexOf(entries, IndexBudget)
	want := map[string]string{AddressesAnnotation: "10.0.0.1 10.0.0.2", PoolsAnnotation: "dmz lan", ServicesAnnotation: "ops/db shop/web"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("indexOf = %v, want %v", got, want)
	}
	// The worst a sealed segment may hold: 2,600 entries, each of its own
	// Service with the longest namespace/name (63 + 1 + 63) and an IPv6
	// address.
	var worst []Entry
	ip := netip.MustParseAddr("2001:db8:ffff:ffff:ffff:ffff:ffff:0")
	for i := range 2600 {
		worst = append(worst, Entry{IP: ip, Pool: "lan", Namespace: fmt.Sprintf("%063d", i), Name: fmt.Sprintf("%063d", i)})
		ip = ip.Next()
	}
	idx := indexOf(worst, IndexBudget)
	size := 0
	for k, v := range idx {
		size += len(k) + len(v)
	}
	if _, ok := idx[ServicesAnnotation]; ok || idx[PoolsAnnotation] != "lan" || size > IndexBudget || size > 256*1024 {
		t.Fatalf("past the budget: indexes %d bytes (budget %d), Services' index present %v, pools' %q; want it left out, the pools' kept",
			size, IndexBudget, ok, idx[PoolsAnnotation])
	}
	for _, tc := range []struct {
		ann  map[string]string
		f    Filter
		want bool
	}{
		{got, Filter{Namespace: "shop", Name: "web"}, true},
		{got, Filter{Namespace: "shop", Name: "db"}, false},
		{got, Filter{Pool: "dmz"}, true},
		{got, Filter{Pool: "wan"}, false},
		{got, Filter{IP: a, Pool: "wan"}, false},
		{got, Filter{Namespace: "shop"}, true}, // a namespace alone is not indexed
		{idx, Filter{Namespace: "x", Name: "y"}, true},
		{nil, Filter{IP: a, Pool: "wan", Namespace: "x", Name: "y"}, true},
	} {
		if g := mayHoldMatching(tc.ann, tc.f); g != tc.want {
			t.Errorf("mayHoldMatching(%.60v…, %+v) = %v, want %v", strings.TrimSpace(fmt.Sprint(tc.ann)), tc.f, g, tc.want)
		}
	}
}
