package decide

import (
	"strings"
	"testing"
)

func TestTriage(t *testing.T) {
	const pid = "aws:///us-east-1a/i-0abc"
	tests := []struct {
		name           string
		in             NodeFacts
		want           Next
		wantInstance   string
		wantWarnLegacy bool
		wantReason     string // a part of Reason
	}{
		{name: "gone, nothing tagged or published: give back without a read", in: NodeFacts{Node: "n1"}, want: NextGiveBack},
		{name: "gone with an address, from the view: confirm first", in: NodeFacts{Node: "n1", Tagged: 1}, want: NextConfirm},
		{name: "gone with an address, confirmed: give back", in: NodeFacts{Node: "n1", Tagged: 1, Confirmed: true}, want: NextGiveBack},
		{name: "no longer opted in, still publishing: confirm first", in: NodeFacts{Node: "n1", Published: true, ProviderID: pid}, want: NextConfirm},
		{name: "no longer opted in, published, confirmed: give back", in: NodeFacts{Node: "n1", Published: true, Confirmed: true}, want: NextGiveBack},
		{name: "opted in, an allocation unanswered: wait for EC2 (never allocate twice)",
			in: NodeFacts{Node: "n1", OptIn: OperatorOptIn, ProviderID: pid, Waiting: true}, want: NextAwaitEC2, wantReason: "allocation had no answer"},
		{name: "gone while an allocation is unanswered: give back (the give-back waits)",
			in: NodeFacts{Node: "n1", Waiting: true, Confirmed: true}, want: NextGiveBack},
		{name: "no providerID yet", in: NodeFacts{Node: "n1", OptIn: OperatorOptIn}, want: NextAwaitProviderID, wantReason: "spec.providerID"},
		{name: "providerID of another cloud", in: NodeFacts{Node: "n1", OptIn: OperatorOptIn, ProviderID: "gce://p/z/n1"}, want: NextInvalidProviderID, wantReason: "not an AWS one"},
		{name: "opted in: look up its instance", in: NodeFacts{Node: "n1", OptIn: OperatorOptIn, ProviderID: pid, Tagged: 2, Published: true},
			want: NextLookUp, wantInstance: "i-0abc"},
		{name: "opted in by the legacy label: look up and warn", in: NodeFacts{Node: "n1", OptIn: LegacyOptIn, ProviderID: pid},
			want: NextLookUp, wantInstance: "i-0abc", wantWarnLegacy: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Triage(tt.in)
			if got.Next != tt.want || got.InstanceID != tt.wantInstance || got.WarnLegacy != tt.wantWarnLegacy {
				t.Fatalf("Triage = %+v, want next %v, instance %q, warnLegacy %v", got, tt.want, tt.wantInstance, tt.wantWarnLegacy)
			}
			if !strings.Contains(got.Reason, tt.wantReason) || (tt.wantReason == "") != (got.Reason == "") {
				t.Errorf("Reason = %q, want one containing %q", got.Reason, tt.wantReason)
			}
		})
	}
}

func TestAssign(t *testing.T) {
	target := Target{InstanceID: "i-1", NetworkInterfaceID: "eni-1", PrivateIP: "10.0.0.1"}
	on := func(a Address) Address {
		a.AssociationID, a.NetworkInterfaceID, a.PrivateIP = "eipassoc-"+a.AllocationID, target.NetworkInterfaceID, target.PrivateIP
		return a
	}
	own := Address{AllocationID: "e-1", PublicIP: "1.1.1.1", Node: "n1"}
	dup := Address{AllocationID: "e-2", PublicIP: "1.1.1.2", Node: "n1"}
	orphan := Address{AllocationID: "e-9", PublicIP: "1.1.1.9"}
	none := Reservations{OtherNodes: OtherNodesNone}
	tests := []struct {
		name        string
		in          Input
		cordoned    bool
		confirmed   bool
		want        Step
		wantAction  Action
		wantSeen    bool
		wantRelease int
		wantReason  string // a part of Reason
	}{
		{name: "its own address, already on its instance: carry, seen", in: Input{Node: "n1", Target: target, Addresses: []Address{on(own)}},
			want: Carry, wantAction: UseTagged, wantSeen: true},
		{name: "its own address, not yet associated: carry, not seen", in: Input{Node: "n1", Target: target, Addresses: []Address{own}},
			want: Carry, wantAction: UseTagged},
		{name: "an orphan to claim", in: Input{Node: "n1", Target: target, Addresses: []Address{orphan}}, want: Carry, wantAction: ClaimOrphan},
		{name: "nothing: allocate", in: Input{Node: "n1", Target: target}, want: Carry, wantAction: Allocate},
		{name: "cordoned with nothing: takes no new address", in: Input{Node: "n1", Target: target, Addresses: []Address{orphan}}, cordoned: true,
			want: Cordoned, wantReason: "cordoned"},
		{name: "cordoned keeps the address it has", in: Input{Node: "n1", Target: target, Addresses: []Address{on(own)}}, cordoned: true,
			want: Carry, wantAction: UseTagged, wantSeen: true},
		{name: "duplicates from the view: confirm before releasing", in: Input{Node: "n1", Target: target, Addresses: []Address{on(own), dup}},
			want: ConfirmDuplicates, wantAction: UseTagged, wantRelease: 1},
		{name: "duplicates, confirmed: carry, releasing them", in: Input{Node: "n1", Target: target, Addresses: []Address{on(own), dup}}, confirmed: true,
			want: Carry, wantAction: UseTagged, wantSeen: true, wantRelease: 1},
		{name: "may not allocate: wait", in: Input{Node: "n1", Target: target, Reservations: none}, want: Waits, wantAction: Wait, wantReason: "otherNodes: none"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Assign(tt.in, tt.cordoned, tt.confirmed)
			if got.Step != tt.want || got.Plan.Action != tt.wantAction || got.Seen != tt.wantSeen || len(got.Plan.Release) != tt.wantRelease {
				t.Fatalf("Assign = %+v, want step %v, action %v, seen %v, %d released", got, tt.want, tt.wantAction, tt.wantSeen, tt.wantRelease)
			}
			if !strings.Contains(got.Reason, tt.wantReason) || (tt.wantReason == "") != (got.Reason == "") {
				t.Errorf("Reason = %q, want one containing %q", got.Reason, tt.wantReason)
			}
		})
	}
}
