package decide

import (
	"strings"
	"testing"
)

func TestNodeOptIn(t *testing.T) {
	tests := []struct {
		name         string
		labels       map[string]string
		acceptLegacy bool
		want         OptIn
	}{
		{name: "no labels", want: NoOptIn},
		{name: "operator label", labels: map[string]string{LabelOptIn: "true"}, want: OperatorOptIn},
		{name: "operator label, legacy not accepted", labels: map[string]string{LabelOptIn: "true"}, acceptLegacy: false, want: OperatorOptIn},
		{name: "operator label false", labels: map[string]string{LabelOptIn: "false"}, acceptLegacy: true, want: NoOptIn},
		{name: "legacy label accepted", labels: map[string]string{LabelLegacyOptIn: "true"}, acceptLegacy: true, want: LegacyOptIn},
		{name: "legacy label set by the kubelet, not accepted", labels: map[string]string{LabelLegacyOptIn: "true"}, want: NoOptIn},
		{name: "both: the operator's wins", labels: map[string]string{LabelLegacyOptIn: "true", LabelOptIn: "true"}, acceptLegacy: true, want: OperatorOptIn},
		{name: "operator label says no to a Node that labels itself", labels: map[string]string{LabelLegacyOptIn: "true", LabelOptIn: "false"}, acceptLegacy: true, want: NoOptIn},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := NodeOptIn(tt.labels, tt.acceptLegacy); got != tt.want {
				t.Errorf("NodeOptIn = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestAdmit(t *testing.T) {
	m := Membership{TagKey: TagCluster, TagValue: "prod"}
	primary := Target{InstanceID: "i-1", NetworkInterfaceID: "eni-1", PrivateIP: "10.0.0.1"}
	member := Instance{ID: "i-1", VPCID: "vpc-1", Tags: map[string]string{TagCluster: "prod"}, Primary: primary}
	with := func(f func(*Instance)) Instance {
		i := member
		i.Tags = map[string]string{}
		for k, v := range member.Tags {
			i.Tags[k] = v
		}
		f(&i)
		return i
	}
	claim := Claim{Node: "n1", InstanceID: "i-1", InternalIPs: []string{"10.0.0.1"}}
	tests := []struct {
		name       string
		claim      Claim
		inst       Instance
		notFound   bool
		m          Membership
		wantReason string
		wantIn     string // in the refusal's message
	}{
		{name: "member, its IP: admitted", claim: claim, inst: member, m: m},
		{name: "dual-stack Node: the IPv4 among its InternalIPs", claim: Claim{InstanceID: "i-1", InternalIPs: []string{"fd00::1", "10.0.0.1"}}, inst: member, m: m},
		{name: "VPC pinned and matching", claim: claim, inst: member, m: Membership{TagKey: TagCluster, TagValue: "prod", VPCID: "vpc-1"}},
		{name: "instance EC2 does not list", claim: claim, notFound: true, m: m, wantReason: RefusedNoInstance, wantIn: "i-1"},
		{name: "instance without the cluster tag", claim: claim, inst: with(func(i *Instance) { delete(i.Tags, TagCluster) }), m: m, wantReason: RefusedNotInCluster, wantIn: "no tag ipledger.io/cluster"},
		{name: "instance of another cluster", claim: claim, inst: with(func(i *Instance) { i.Tags[TagCluster] = "staging" }), m: m, wantReason: RefusedNotInCluster, wantIn: "staging"},
		{name: "tag key differs in case only", claim: claim, inst: with(func(i *Instance) { delete(i.Tags, TagCluster); i.Tags["IPLEDGER.IO/CLUSTER"] = "prod" }), m: m, wantReason: RefusedNotInCluster},
		{name: "another VPC", claim: claim, inst: with(func(i *Instance) { i.VPCID = "vpc-2" }), m: Membership{TagKey: TagCluster, TagValue: "prod", VPCID: "vpc-1"}, wantReason: RefusedWrongVPC, wantIn: "vpc-2"},
		{name: "operator's own tag, e.g. kubernetes.io/cluster/prod=owned", claim: claim, inst: with(func(i *Instance) { i.Tags["kubernetes.io/cluster/prod"] = "owned" }), m: Membership{TagKey: "kubernetes.io/cluster/prod", TagValue: "owned"}},
		{name: "Node names a member instance whose IP is not its own", claim: Claim{InstanceID: "i-1", InternalIPs: []string{"10.0.0.99"}}, inst: member, m: m, wantReason: RefusedIPMismatch, wantIn: "10.0.0.99"},
		{name: "Node reports no InternalIP", claim: Claim{InstanceID: "i-1"}, inst: member, m: m, wantReason: RefusedNoInternalIP},
		{name: "two Nodes name one instance", claim: Claim{InstanceID: "i-1", InternalIPs: []string{"10.0.0.1"}, Rivals: []string{"n3", "n2"}}, inst: member, m: m, wantReason: RefusedClaimedTwice, wantIn: "n2, n3"},
		{name: "not a member wins over everything else", claim: Claim{InstanceID: "i-1", Rivals: []string{"n2"}}, inst: with(func(i *Instance) { i.Tags = nil }), m: m, wantReason: RefusedNotInCluster},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			target, refusal := Admit(tt.claim, tt.inst, !tt.notFound, tt.m)
			if tt.wantReason == "" {
				if refusal != nil {
					t.Fatalf("refused: %v", refusal)
				}
				if target != primary {
					t.Errorf("target = %+v, want %+v", target, primary)
				}
				return
			}
			if refusal == nil {
				t.Fatalf("admitted (target %+v), want refusal %s", target, tt.wantReason)
			}
			if refusal.Reason != tt.wantReason || !strings.Contains(refusal.Message, tt.wantIn) {
				t.Errorf("refusal = %v, want reason %s mentioning %q", refusal, tt.wantReason, tt.wantIn)
			}
			if target != (Target{}) {
				t.Errorf("refused with a target %+v", target)
			}
		})
	}
}

func TestHeldOutside(t *testing.T) {
	m := Membership{TagKey: TagCluster, TagValue: "prod"}
	owners := map[string]Instance{
		"eni-ours":   {ID: "i-ours", Tags: map[string]string{TagCluster: "prod"}},
		"eni-ours2":  {ID: "i-ours", Tags: map[string]string{TagCluster: "prod"}},
		"eni-theirs": {ID: "i-theirs", Tags: map[string]string{TagCluster: "other"}},
		"eni-plain":  {ID: "i-plain"},
	}
	assoc := func(eni string) Address {
		// InstanceID is left empty: EC2 (and moto) may not name the instance
		// of an association made through the interface.
		return Address{AllocationID: "e-1", AssociationID: "eipassoc-1", NetworkInterfaceID: eni}
	}
	tests := []struct {
		name string
		a    Address
		want bool
	}{
		{name: "unassociated", a: Address{AllocationID: "e-1"}},
		{name: "on a member instance", a: assoc("eni-ours")},
		{name: "on a member instance's second interface", a: assoc("eni-ours2")},
		{name: "on another cluster's instance", a: assoc("eni-theirs"), want: true},
		{name: "on an untagged instance", a: assoc("eni-plain"), want: true},
		{name: "on an interface of no instance EC2 lists (NAT gateway, gone)", a: assoc("eni-nat"), want: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := HeldOutside(tt.a, owners, m); got != tt.want {
				t.Errorf("HeldOutside = %v, want %v", got, tt.want)
			}
		})
	}
}
