package ledger

import (
	"maps"
	"net/netip"
	"reflect"
	"slices"
	"testing"
)

func TestAddrIndexApply(t *testing.T) {
	entry := func(svc, ip, pool string) Allocation {
		return Allocation{IP: netip.MustParseAddr(ip), Pool: pool, Service: ServiceRef{Namespace: "ns", Name: svc}}
	}
	x := indexAddrs([]Allocation{entry("a", "10.0.0.1", "one"), entry("b", "10.0.0.2", "one")})
	x.apply(Change{
		Release:  []Allocation{entry("a", "10.0.0.1", "one")},
		Allocate: []Allocation{entry("b", "10.0.0.2", "two"), entry("c", "10.0.0.3", "one"), entry("b", "10.0.0.0", "one")},
	})
	if keys := slices.Sorted(maps.Keys(x)); !slices.Equal(keys, []string{"ns/b", "ns/c"}) {
		t.Fatalf("after the commit the index holds %v, want ns/b and ns/c", keys)
	}
	if got, want := x["ns/b"], []netip.Addr{netip.MustParseAddr("10.0.0.0"), netip.MustParseAddr("10.0.0.2")}; !slices.Equal(got, want) {
		t.Fatalf("ns/b holds %v, want %v (in IP order, re-recorded once)", got, want)
	}
}

func TestByServiceApply(t *testing.T) {
	entry := func(svc, ip, pool string) Allocation {
		return Allocation{IP: netip.MustParseAddr(ip), Pool: pool, Service: ServiceRef{Namespace: "ns", Name: svc}}
	}
	byService := IndexByService([]Allocation{entry("a", "10.0.0.1", "one"), entry("b", "10.0.0.2", "one")})
	moved := entry("b", "10.0.0.2", "two")
	byService.Apply(Change{
		Release:  []Allocation{entry("a", "10.0.0.1", "one")},
		Allocate: []Allocation{moved, entry("c", "10.0.0.3", "one")},
	})
	if keys := slices.Sorted(maps.Keys(byService)); !slices.Equal(keys, []string{"ns/b", "ns/c"}) || !reflect.DeepEqual(byService.Of("ns/b"), []Allocation{moved}) {
		t.Fatalf("after the commit: %+v", byService)
	}
}
