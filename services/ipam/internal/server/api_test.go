package server

import (
	"net/netip"
	"testing"

	"github.com/ipledger/ipledger/services/ipam/internal/ledger"
)

func TestPageTokenRoundTrip(t *testing.T) {
	for _, a := range []ledger.Allocation{
		{IP: netip.MustParseAddr("10.0.0.1"), Service: ledger.ServiceRef{Namespace: "ns", Name: "web"}},
		{IP: netip.MustParseAddr("2001:db8::1"), Service: ledger.ServiceRef{Namespace: "a", Name: "b"}},
	} {
		got, err := parsePageToken(pageToken(a))
		if err != nil || got.IP != a.IP || got.Service.Key() != a.Service.Key() {
			t.Errorf("round trip of %v = %v, %v", a, got, err)
		}
	}
	for _, bad := range []string{"!!", "bm9zcGFjZQ", "eCB5"} { // not base64, "nospace", "x y"
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
	} {
		r, ok := rules["/ipledger.ipam.v1.IPAMService/"+method]
		if !ok || r.Verb+" "+r.Resource != want {
			t.Errorf("%s: rule %+v, want %s", method, r, want)
		}
	}
	if len(rules) != 7 {
		t.Errorf("%d rules, want 7", len(rules))
	}
}
