package ledger

import (
	"net/netip"
	"reflect"
	"slices"
	"testing"
)

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
	keys := make([]string, 0, len(byService))
	for k := range byService {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	if !slices.Equal(keys, []string{"ns/b", "ns/c"}) || !reflect.DeepEqual(byService["ns/b"], []Allocation{moved}) {
		t.Fatalf("after the commit: %+v", byService)
	}
}
