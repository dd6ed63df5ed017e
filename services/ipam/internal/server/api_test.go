package server

import (
	"encoding/base64"
	"net/netip"
	"testing"

	"github.com/ipledger/ipledger/services/ipam/internal/ledger"
)

func TestPageTokenRoundTrip(t *testing.T) {
	for _, p := range []position{
		{Allocation: ledger.Allocation{IP: netip.MustParseAddr("10.0.0.1"), Service: ledger.ServiceRef{Namespace: "ns", Name: "web"}}},
		{Allocation: ledger.Allocation{IP: netip.MustParseAddr("2001:db8::1"), Service: ledger.ServiceRef{Namespace: "a", Name: "b"}}},
		{Allocation: ledger.Allocation{IP: netip.MustParseAddr("10.0.0.2"), Service: ledger.ServiceRef{Namespace: "ns", Name: "gone"}}, kept: true},
	} {
		got, err := parsePageToken(pageToken(p))
		if err != nil || got.IP != p.IP || got.Service.Key() != p.Service.Key() || got.kept != p.kept {
			t.Errorf("round trip of %v = %v, %v", p, got, err)
		}
	}
	// A token of ipam before kept addresses names a held address.
	if got, err := parsePageToken(base64.RawURLEncoding.EncodeToString([]byte("10.0.0.1 ns/web"))); err != nil || got.kept || got.Service.Name != "web" {
		t.Errorf("an old token = %v, %v", got, err)
	}
	for _, bad := range []string{"!!", "bm9zcGFjZQ", "eCB5", base64.RawURLEncoding.EncodeToString([]byte("10.0.0.1 ns/web held"))} { // not base64, "nospace", "x y", an unknown flag
		if _, err := parsePageToken(bad); err == nil {
			t.Errorf("parsePageToken(%q) accepted", bad)
		}
	}
}

func TestRulesCoverEveryMethod(t *testing.T) {
	rules := Rules()
	for method, want := range map[string]string{
		"ListAllocations": "list allocations", "ListPools": "list allocations",
		"GetAllocation": "get allocations", "ExplainService": "get allocations", "PreviewPool": "get allocations",
		"ReserveAddress": "create reservations", "ReleaseReservation": "delete reservations",
		"AddressHistory": "get history",
	} {
		r, ok := rules["/ipledger.ipam.v1.IPAMService/"+method]
		if !ok || r.Verb+" "+r.Resource != want {
			t.Errorf("%s: rule %+v, want %s", method, r, want)
		}
	}
	if len(rules) != 8 {
		t.Errorf("%d rules, want 8", len(rules))
	}
	if !rules["/ipledger.ipam.v1.IPAMService/AddressHistory"].Namespaced {
		t.Error("AddressHistory: not Namespaced; a reader granted it in some namespaces would be refused")
	}
}
