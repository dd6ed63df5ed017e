package allocator

import (
	"errors"
	"net/netip"
	"slices"
	"strings"
	"testing"
)

func addrs(ss ...string) []netip.Addr {
	var out []netip.Addr
	for _, s := range ss {
		out = append(out, netip.MustParseAddr(s))
	}
	return out
}

func TestParseServiceRequest(t *testing.T) {
	tests := []struct {
		name    string
		ann     map[string]string
		lbIP    string
		want    ServiceRequest
		wantErr string
	}{
		{name: "nothing", want: ServiceRequest{}},
		{name: "one IP", ann: map[string]string{"ipledger.io/loadBalancerIPs": "192.0.2.10"}, want: ServiceRequest{RequestedIPs: addrs("192.0.2.10")}},
		{name: "dual stack list with spaces", ann: map[string]string{"ipledger.io/loadBalancerIPs": " 2001:db8::10 , 192.0.2.10 "}, want: ServiceRequest{RequestedIPs: addrs("2001:db8::10", "192.0.2.10")}},
		{name: "spec.loadBalancerIP", lbIP: "192.0.2.11", want: ServiceRequest{RequestedIPs: addrs("192.0.2.11")}},
		{name: "metallb.universe.tf spelling", ann: map[string]string{"metallb.universe.tf/loadBalancerIPs": "192.0.2.12", "metallb.universe.tf/address-pool": "old", "metallb.universe.tf/allow-shared-ip": "k"}, want: ServiceRequest{RequestedIPs: addrs("192.0.2.12"), Pool: "old", SharingKey: "k"}},
		{name: "metallb.io spelling", ann: map[string]string{"metallb.io/address-pool": "p1", "metallb.io/allow-shared-ip": "k2"}, want: ServiceRequest{Pool: "p1", SharingKey: "k2"}},
		{name: "spellings that agree", ann: map[string]string{"ipledger.io/address-pool": "p", "metallb.io/address-pool": "p", "ipledger.io/loadBalancerIPs": "192.0.2.1,2001:db8::1", "metallb.universe.tf/loadBalancerIPs": "2001:db8::1, 192.0.2.1"}, want: ServiceRequest{RequestedIPs: addrs("192.0.2.1", "2001:db8::1"), Pool: "p"}},
		{name: "empty value is absent", ann: map[string]string{"ipledger.io/loadBalancerIPs": " ", "ipledger.io/address-pool": ""}, lbIP: "192.0.2.1", want: ServiceRequest{RequestedIPs: addrs("192.0.2.1")}},
		{name: "spellings that disagree", ann: map[string]string{"ipledger.io/address-pool": "a", "metallb.universe.tf/address-pool": "b"}, wantErr: `ipledger.io/address-pool="a" and metallb.universe.tf/address-pool="b" disagree`},
		{name: "sharing keys disagree", ann: map[string]string{"metallb.io/allow-shared-ip": "a", "metallb.universe.tf/allow-shared-ip": "b"}, wantErr: "metallb.io/allow-shared-ip"},
		{name: "IP lists disagree", ann: map[string]string{"ipledger.io/loadBalancerIPs": "192.0.2.1", "metallb.io/loadBalancerIPs": "192.0.2.2"}, wantErr: "disagree"},
		{name: "annotation and spec both set", ann: map[string]string{"ipledger.io/loadBalancerIPs": "192.0.2.1"}, lbIP: "192.0.2.1", wantErr: "both ipledger.io/loadBalancerIPs and spec.loadBalancerIP are set"},
		{name: "legacy annotation and spec both set", ann: map[string]string{"metallb.universe.tf/loadBalancerIPs": "192.0.2.1"}, lbIP: "192.0.2.2", wantErr: "both metallb.universe.tf/loadBalancerIPs and spec.loadBalancerIP"},
		{name: "two IPv4", ann: map[string]string{"ipledger.io/loadBalancerIPs": "192.0.2.1,192.0.2.2"}, wantErr: "192.0.2.1 and 192.0.2.2 are both IPv4; list at most one IP per family"},
		{name: "same IP twice", ann: map[string]string{"ipledger.io/loadBalancerIPs": "192.0.2.1,192.0.2.1"}, wantErr: "at most one IP per family"},
		{name: "unparsable", ann: map[string]string{"ipledger.io/loadBalancerIPs": "192.0.2.300"}, wantErr: `ipledger.io/loadBalancerIPs: "192.0.2.300" is not an IP address`},
		{name: "unparsable spec", lbIP: "nope", wantErr: `spec.loadBalancerIP: "nope" is not an IP address`},
		{name: "empty entry", ann: map[string]string{"ipledger.io/loadBalancerIPs": "192.0.2.1,"}, wantErr: "entry 1"},
		{name: "zone", ann: map[string]string{"ipledger.io/loadBalancerIPs": "fe80::1%eth0"}, wantErr: "has a zone"},
		{name: "4in6", ann: map[string]string{"ipledger.io/loadBalancerIPs": "::ffff:192.0.2.1"}, wantErr: "write 192.0.2.1"},
		{name: "unspecified", lbIP: "0.0.0.0", wantErr: "unspecified"},
		// Cilium LB-IPAM's annotations, read as the ipledger.io/ ones they
		// mean, under the same rule: spellings agree or the request is invalid.
		{name: "cilium ips", ann: map[string]string{"lbipam.cilium.io/ips": "192.0.2.20, 2001:db8::20"}, want: ServiceRequest{RequestedIPs: addrs("192.0.2.20", "2001:db8::20")}},
		{name: "cilium older ips", ann: map[string]string{"io.cilium/lb-ipam-ips": "192.0.2.21"}, want: ServiceRequest{RequestedIPs: addrs("192.0.2.21")}},
		{name: "cilium sharing key and cross namespace", ann: map[string]string{"lbipam.cilium.io/sharing-key": "k", "lbipam.cilium.io/sharing-cross-namespace": "team-b, team-a"},
			want: ServiceRequest{SharingKey: "k", CrossNamespace: []string{"team-a", "team-b"}}},
		{name: "cilium older sharing spellings", ann: map[string]string{"io.cilium/lb-ipam-sharing-key": "k", "io.cilium/lb-ipam-sharing-cross-namespace": "*"},
			want: ServiceRequest{SharingKey: "k", CrossNamespace: []string{"*"}}},
		{name: "cilium and metallb agree", ann: map[string]string{"lbipam.cilium.io/ips": "192.0.2.22", "metallb.universe.tf/loadBalancerIPs": "192.0.2.22",
			"lbipam.cilium.io/sharing-key": "k", "metallb.io/allow-shared-ip": "k", "io.cilium/lb-ipam-sharing-key": "k"},
			want: ServiceRequest{RequestedIPs: addrs("192.0.2.22"), SharingKey: "k"}},
		{name: "cross namespace lists agree as sets", ann: map[string]string{"ipledger.io/sharing-cross-namespace": "a,b", "lbipam.cilium.io/sharing-cross-namespace": "b, a,a"},
			want: ServiceRequest{CrossNamespace: []string{"a", "b"}}},
		{name: "metallb and cilium ips disagree", ann: map[string]string{"metallb.universe.tf/loadBalancerIPs": "192.0.2.1", "lbipam.cilium.io/ips": "192.0.2.2"},
			wantErr: `metallb.universe.tf/loadBalancerIPs="192.0.2.1" and lbipam.cilium.io/ips="192.0.2.2" disagree; remove lbipam.cilium.io/ips or make them equal`},
		{name: "cilium spellings disagree", ann: map[string]string{"lbipam.cilium.io/sharing-key": "a", "io.cilium/lb-ipam-sharing-key": "b"},
			wantErr: `lbipam.cilium.io/sharing-key="a" and io.cilium/lb-ipam-sharing-key="b" disagree`},
		{name: "metallb and cilium sharing keys disagree", ann: map[string]string{"metallb.universe.tf/allow-shared-ip": "a", "lbipam.cilium.io/sharing-key": "b"},
			wantErr: `metallb.universe.tf/allow-shared-ip="a" and lbipam.cilium.io/sharing-key="b" disagree`},
		{name: "cross namespace lists disagree", ann: map[string]string{"ipledger.io/sharing-cross-namespace": "a", "io.cilium/lb-ipam-sharing-cross-namespace": "*"},
			wantErr: `ipledger.io/sharing-cross-namespace="a" and io.cilium/lb-ipam-sharing-cross-namespace="*" disagree`},
		{name: "cilium ips and spec both set", ann: map[string]string{"lbipam.cilium.io/ips": "192.0.2.1"}, lbIP: "192.0.2.1", wantErr: "both lbipam.cilium.io/ips and spec.loadBalancerIP are set"},
		{name: "cilium two IPv4", ann: map[string]string{"lbipam.cilium.io/ips": "192.0.2.1,192.0.2.2"}, wantErr: "lbipam.cilium.io/ips: 192.0.2.1 and 192.0.2.2 are both IPv4"},
		{name: "cilium cross namespace not a name", ann: map[string]string{"lbipam.cilium.io/sharing-cross-namespace": "Team_A"}, wantErr: `lbipam.cilium.io/sharing-cross-namespace: entry 0 "Team_A" is not a namespace name`},
		{name: "bad pool name", ann: map[string]string{"ipledger.io/address-pool": "Pool_A"}, wantErr: `ipledger.io/address-pool: "Pool_A" is not a valid IPPool name`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseServiceRequest(tt.ann, tt.lbIP)
			if tt.wantErr != "" {
				var ae *Error
				if !errors.As(err, &ae) || ae.Reason != ReasonInvalidRequest || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want InvalidRequest containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got.RequestedIPs, tt.want.RequestedIPs) || got.Pool != tt.want.Pool || got.SharingKey != tt.want.SharingKey ||
				!slices.Equal(got.CrossNamespace, tt.want.CrossNamespace) {
				t.Fatalf("got %+v, want %+v", got, tt.want)
			}
		})
	}
}
