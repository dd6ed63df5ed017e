package ipamapi

import (
	"testing"

	"google.golang.org/protobuf/proto"

	ipamv1 "github.com/ipledger/ipledger/proto/ipledger/ipam/v1"
)

// The plugin turns the aggregated API's objects back into IPAMService's
// messages and prints them as it prints gRPC answers: each conversion
// must round-trip.
func TestConversionsRoundTrip(t *testing.T) {
	a := &ipamv1.Allocation{Ip: "fd00::7", Pool: "blue", Service: &ipamv1.ServiceRef{Namespace: "shop", Name: "web"},
		SharingKey: "k", AllocatedAt: "2026-12-01T10:00:00Z", KeptUntil: "2026-12-08T10:00:00Z"}
	got, ok := AllocationFrom(a)
	if !ok || got.Name != "web.fd00--7" || got.Namespace != "shop" || !proto.Equal(got.Proto(), a) {
		t.Errorf("allocation: %+v -> %v", got, got.Proto())
	}
	if _, ok := AllocationFrom(&ipamv1.Allocation{Ip: "192.0.2.1"}); ok {
		t.Error("an entry without a Service became an Allocation")
	}
	p := &ipamv1.Pool{Name: "blue", Addresses: []string{"192.0.2.0/24"}, AutoAssign: true, Priority: 3, HeldOutside: 1, Kept: 2,
		Ipv4:       &ipamv1.FamilyUsage{Total: "256", Used: "3", Held: "1", Available: "252"},
		Conditions: []*ipamv1.PoolCondition{{Type: "Ready", Status: "True", Reason: "R", Message: "M"}}}
	pool := PoolFrom(p)
	if !proto.Equal(pool.Proto(), p) {
		t.Errorf("pool: %v", pool.Proto())
	}
	e := &ipamv1.ExplainServiceResponse{Decision: "Pending", Reason: "NoPool", Ips: []string{"192.0.2.1"}, Gateway: "gw",
		Verdicts:      []*ipamv1.PoolVerdict{{Pool: "blue", Eligible: false, Reason: "Namespace", Message: "m"}},
		Announcements: []*ipamv1.Announcement{{Ip: "192.0.2.1", State: "Announced", Announcer: "x", Node: "n", Since: "s", Served: true, Message: "m"}}}
	if got := ExplanationFrom("shop", "web", e); !proto.Equal(got.Proto(), e) || got.Name != "web" {
		t.Errorf("explanation: %v", got.Proto())
	}
	r := &ipamv1.Reservation{Ip: "fd00::9", OwnerNote: "n", CreatedAt: "2026-12-01T10:00:00Z", ForService: &ipamv1.ServiceRef{Namespace: "a", Name: "b"}}
	if got := ReservationFrom(r); !proto.Equal(got.Proto(), r) || got.Name != "fd00--9" {
		t.Errorf("reservation: %+v", got)
	}
}
