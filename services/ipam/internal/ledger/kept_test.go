package ledger

import (
	"bytes"
	"encoding/json"
	"net/netip"
	"strings"
	"testing"
	"time"
)

// A kept address is written in the shape the previous release (0.2) reads:
// a reservation line with only the fields it knows, which its strict
// decoder (DisallowUnknownFields) takes as a reservation for the Service —
// so a 0.2 leader during a roll or after a downgrade hands the address to
// nobody else. And it reads back as kept, with its sharing key.
func TestKeptRecordIsWhatThePreviousReleaseReads(t *testing.T) {
	at := time.Date(2026, 12, 5, 12, 0, 0, 0, time.UTC)
	shard := Shard{Name: HeadName, Epoch: 3, Reservations: []Reservation{
		{IP: netip.MustParseAddr("10.0.0.1"), Note: KeptNote(""), CreatedAt: at, ForService: &ServiceRef{Namespace: "ns", Name: "web", UID: "u1"}},
		{IP: netip.MustParseAddr("10.0.0.2"), Note: KeptNote("team k"), CreatedAt: at, ForService: &ServiceRef{Namespace: "ns", Name: "sa", UID: "u2"}},
		{IP: netip.MustParseAddr("10.0.0.3"), Note: "lab router", CreatedAt: at},
	}}
	data := Encode(shard)
	// 0.2's reservationLine, field for field.
	type v02Line struct {
		IP         string `json:"ip"`
		Note       string `json:"note"`
		ForService string `json:"forService,omitempty"`
		ForUID     string `json:"forUid,omitempty"`
		CreatedAt  string `json:"createdAt"`
	}
	for _, line := range strings.Split(strings.TrimSpace(data[keyReservations]), "\n") {
		d := json.NewDecoder(bytes.NewReader([]byte(line)))
		d.DisallowUnknownFields()
		var l v02Line
		if err := d.Decode(&l); err != nil {
			t.Fatalf("0.2 cannot read %s: %v", line, err)
		}
	}
	got, err := Decode(HeadName, data)
	if err != nil {
		t.Fatal(err)
	}
	want := []struct {
		key  string
		kept bool
	}{{"", true}, {"team k", true}, {"", false}}
	for i, r := range got.Reservations {
		key, kept := r.Kept()
		if key != want[i].key || kept != want[i].kept {
			t.Errorf("%s: Kept() = %q, %v; want %q, %v", r.IP, key, kept, want[i].key, want[i].kept)
		}
	}
	// A kept note without the Service it is kept for keeps nothing.
	if _, ok := (Reservation{Note: KeptNote("")}).Kept(); ok {
		t.Errorf("a reservation for no Service reads as kept")
	}
}

// TestKeptNoteTenant: a kept reservation of a Gateway's Service records the
// namespace whose quota it counts against, beside its sharing key.
func TestKeptNoteTenant(t *testing.T) {
	svc := &ServiceRef{Namespace: "envoy-gateway-system", Name: "envoy-a", UID: "u"}
	for _, tc := range []struct{ key, tenant string }{{"", ""}, {"k", ""}, {"", "team-a"}, {"k v", "team-a"}} {
		r := Reservation{Note: KeptNoteFor(tc.key, tc.tenant), ForService: svc}
		key, ok := r.Kept()
		if !ok || key != tc.key || r.KeptTenant() != tc.tenant {
			t.Errorf("%q: Kept() = %q, %v, KeptTenant() = %q; want %q, %q", r.Note, key, ok, r.KeptTenant(), tc.key, tc.tenant)
		}
	}
	if _, ok := (Reservation{Note: "ipledger.io/kept tenant=", ForService: svc}).Kept(); ok {
		t.Error("an empty tenant read as kept")
	}
}
