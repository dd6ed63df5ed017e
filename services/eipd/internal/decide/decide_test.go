package decide

import (
	"testing"
	"time"
)

func TestChoose(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	target := Target{InstanceID: "i-1", NetworkInterfaceID: "eni-1", PrivateIP: "10.0.0.1"}
	assoc := func(a Address, eni, ip string) Address {
		a.AssociationID, a.NetworkInterfaceID, a.PrivateIP = "eipassoc-"+a.AllocationID, eni, ip
		return a
	}
	a := func(id, ip, node string, age int) Address {
		return Address{AllocationID: id, PublicIP: ip, Node: node, AllocatedAt: t0.Add(time.Duration(age) * time.Minute)}
	}
	tests := []struct {
		name        string
		in          Input
		wantAction  Action
		wantAddress string
		wantRelease []string
	}{
		{
			name:       "nothing: allocate",
			in:         Input{Node: "n1", Target: target},
			wantAction: Allocate,
		},
		{
			name:        "tagged for the node wins over orphans",
			in:          Input{Node: "n1", Addresses: []Address{a("e-1", "1.1.1.1", "", 0), a("e-2", "1.1.1.2", "n1", 5)}},
			wantAction:  UseTagged,
			wantAddress: "e-2",
		},
		{
			name:       "addresses of other nodes are neither kept nor orphans",
			in:         Input{Node: "n1", Addresses: []Address{a("e-1", "1.1.1.1", "n2", 0)}},
			wantAction: Allocate,
		},
		{
			name: "associated orphan (still in use) is not claimed",
			in: Input{Node: "n1", Addresses: []Address{
				assoc(a("e-1", "1.1.1.1", "", 0), "eni-9", "10.0.0.9"),
			}},
			wantAction: Allocate,
		},
		{
			name: "orphan most referenced by pods",
			in: Input{Node: "n1",
				Addresses: []Address{a("e-1", "1.1.1.1", "", 0), a("e-2", "1.1.1.2", "", 0), a("e-3", "1.1.1.3", "", 0)},
				PodRefs:   map[string]int{"1.1.1.1": 1, "1.1.1.3": 2},
			},
			wantAction:  ClaimOrphan,
			wantAddress: "e-3",
		},
		{
			name: "orphans tie: smallest allocation ID, whatever the input order",
			in: Input{Node: "n1",
				Addresses: []Address{a("e-3", "1.1.1.3", "", 0), a("e-1", "1.1.1.1", "", 9), a("e-2", "1.1.1.2", "", 0)},
			},
			wantAction:  ClaimOrphan,
			wantAddress: "e-1",
		},
		{
			name: "orphan claimed by another node is skipped",
			in: Input{Node: "n1",
				Addresses:   []Address{a("e-1", "1.1.1.1", "", 0), a("e-2", "1.1.1.2", "", 0)},
				PodRefs:     map[string]int{"1.1.1.1": 5},
				Unavailable: map[string]bool{"e-1": true},
			},
			wantAction:  ClaimOrphan,
			wantAddress: "e-2",
		},
		{
			name: "duplicates: keep the one associated with the node, release the rest",
			in: Input{Node: "n1", Target: target, Addresses: []Address{
				a("e-1", "1.1.1.1", "n1", 0),
				assoc(a("e-2", "1.1.1.2", "n1", 10), "eni-1", "10.0.0.1"),
				a("e-3", "1.1.1.3", "n1", 20),
			}},
			wantAction:  UseTagged,
			wantAddress: "e-2",
			wantRelease: []string{"e-1", "e-3"},
		},
		{
			name: "duplicates: associated elsewhere beats unassociated",
			in: Input{Node: "n1", Target: target, Addresses: []Address{
				a("e-1", "1.1.1.1", "n1", 0),
				assoc(a("e-2", "1.1.1.2", "n1", 10), "eni-7", "10.0.0.7"),
			}},
			wantAction:  UseTagged,
			wantAddress: "e-2",
			wantRelease: []string{"e-1"},
		},
		{
			name: "duplicates: the one the node publishes beats an older one",
			in: Input{Node: "n1", Target: target, CurrentAllocationID: "e-2", Addresses: []Address{
				a("e-1", "1.1.1.1", "n1", 0),
				a("e-2", "1.1.1.2", "n1", 10),
			}},
			wantAction:  UseTagged,
			wantAddress: "e-2",
			wantRelease: []string{"e-1"},
		},
		{
			name: "duplicates, none associated: oldest, then allocation ID",
			in: Input{Node: "n1", Target: target, Addresses: []Address{
				a("e-9", "1.1.1.9", "n1", 30),
				a("e-5", "1.1.1.5", "n1", 10),
				a("e-4", "1.1.1.4", "n1", 10),
			}},
			wantAction:  UseTagged,
			wantAddress: "e-4",
			wantRelease: []string{"e-5", "e-9"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Choose(tt.in)
			if got.Action != tt.wantAction {
				t.Fatalf("action = %v, want %v (plan %+v)", got.Action, tt.wantAction, got)
			}
			if got.Address.AllocationID != tt.wantAddress {
				t.Errorf("address = %q, want %q", got.Address.AllocationID, tt.wantAddress)
			}
			var rel []string
			for _, r := range got.Release {
				rel = append(rel, r.AllocationID)
			}
			if len(rel) != len(tt.wantRelease) {
				t.Fatalf("release = %v, want %v", rel, tt.wantRelease)
			}
			for i := range rel {
				if rel[i] != tt.wantRelease[i] {
					t.Errorf("release = %v, want %v", rel, tt.wantRelease)
				}
			}
		})
	}
}

func TestStale(t *testing.T) {
	addrs := []Address{
		{AllocationID: "e-3", Node: "gone"},
		{AllocationID: "e-1", Node: "kept"},
		{AllocationID: "e-2", Node: ""},
		{AllocationID: "e-0", Node: "gone"},
	}
	got := Stale(addrs, func(n string) bool { return n == "kept" })
	if len(got) != 2 || got[0].AllocationID != "e-0" || got[1].AllocationID != "e-3" {
		t.Fatalf("Stale = %+v, want e-0, e-3 of node gone", got)
	}
}

func TestInstanceID(t *testing.T) {
	tests := []struct {
		in      string
		want    string
		wantErr bool
	}{
		{in: "aws:///us-east-1a/i-0123456789abcdef0", want: "i-0123456789abcdef0"},
		{in: "aws:///i-0abc", want: "i-0abc"},
		{in: "aws://i-0abc", want: "i-0abc"},
		{in: "", wantErr: true},
		{in: "gce://p/z/n", wantErr: true},
		{in: "aws:///us-east-1a/", wantErr: true},
		{in: "aws:///us-east-1a/i-", wantErr: true},
		{in: "aws:///us-east-1a/i-XYZ", wantErr: true},
		{in: "aws:///a/b/i-0abc", wantErr: true},
		{in: "aws:///us-east-1a/eni-0abc", wantErr: true},
	}
	for _, tt := range tests {
		got, err := InstanceID(tt.in)
		if (err != nil) != tt.wantErr || got != tt.want {
			t.Errorf("InstanceID(%q) = %q, %v; want %q, err %v", tt.in, got, err, tt.want, tt.wantErr)
		}
	}
}

func FuzzInstanceID(f *testing.F) {
	for _, s := range []string{"aws:///us-east-1a/i-0abc", "aws://i-1", "aws:///", "x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		id, err := InstanceID(s)
		if err != nil {
			return
		}
		if len(id) < 3 || id[:2] != "i-" {
			t.Fatalf("InstanceID(%q) = %q: not an instance ID", s, id)
		}
	})
}

func TestIntentDestroys(t *testing.T) {
	tests := []struct {
		name string
		in   Intent
		want bool
	}{
		{name: "node keeps its one address", in: Intent{Tagged: 1, Published: true}},
		{name: "node gets its first address", in: Intent{}},
		{name: "node keeps one of two", in: Intent{Tagged: 2, Published: true, Duplicates: 1}, want: true},
		{name: "gone node with an address", in: Intent{GiveBack: true, Tagged: 1}, want: true},
		{name: "unlabelled node still publishing an address EC2 no longer lists", in: Intent{GiveBack: true, Published: true}, want: true},
		{name: "gone node with nothing: nothing to confirm", in: Intent{GiveBack: true}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.in.Destroys(); got != tt.want {
				t.Errorf("Destroys() = %v, want %v", got, tt.want)
			}
		})
	}
}
