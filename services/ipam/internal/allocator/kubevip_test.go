package allocator

import (
	"errors"
	"net/netip"
	"reflect"
	"strings"
	"testing"
)

// TestKubeVIPRequest: kube-vip.io/loadbalancerIPs, as kube-vip-cloud-provider
// or a user writes it, is a request like ipledger.io/loadBalancerIPs, and
// the spec.loadBalancerIP kube-vip-cloud-provider copies from its first
// address is that same request, not a second one.
func TestKubeVIPRequest(t *testing.T) {
	const key = "kube-vip.io/loadbalancerIPs"
	tests := []struct {
		name    string
		ann     map[string]string
		lbIP    string
		want    ServiceRequest
		wantErr string
	}{
		{name: "one address", ann: map[string]string{key: "192.0.2.30"}, want: ServiceRequest{RequestedIPs: addrs("192.0.2.30")}},
		{name: "dual-stack, in its order", ann: map[string]string{key: "2001:db8::30,192.0.2.30"}, want: ServiceRequest{RequestedIPs: addrs("2001:db8::30", "192.0.2.30")}},
		{name: "spec.loadBalancerIP mirroring its first address", ann: map[string]string{key: "192.0.2.31,2001:db8::31"}, lbIP: "192.0.2.31",
			want: ServiceRequest{RequestedIPs: addrs("192.0.2.31", "2001:db8::31")}},
		{name: "spec.loadBalancerIP saying otherwise", ann: map[string]string{key: "192.0.2.31"}, lbIP: "192.0.2.32",
			wantErr: "both kube-vip.io/loadbalancerIPs and spec.loadBalancerIP are set"},
		{name: "agrees with ipledger's", ann: map[string]string{key: "192.0.2.33", AnnotationLoadBalancerIPs: "192.0.2.33"}, lbIP: "192.0.2.33",
			want: ServiceRequest{RequestedIPs: addrs("192.0.2.33")}},
		{name: "disagrees with MetalLB's", ann: map[string]string{key: "192.0.2.33", "metallb.universe.tf/loadBalancerIPs": "192.0.2.34"},
			wantErr: `metallb.universe.tf/loadBalancerIPs="192.0.2.34" and kube-vip.io/loadbalancerIPs="192.0.2.33" disagree`},
		{name: "DHCP", ann: map[string]string{key: "0.0.0.0"}, lbIP: "0.0.0.0", wantErr: "DHCP"},
		{name: "other kube-vip annotations are not requests", ann: map[string]string{"kube-vip.io/loadbalancerHostname": "x", "kube-vip.io/serviceInterface": "eth1"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseServiceRequest(tt.ann, tt.lbIP)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil || !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("= %+v, %v; want %+v", got, err, tt.want)
			}
		})
	}
}

// FuzzKubeVIPRequest: with kube-vip's annotation, any input fails with
// InvalidRequest or is accepted; spec.loadBalancerIP beside an annotation
// is accepted only as the copy of kube-vip's first address.
func FuzzKubeVIPRequest(f *testing.F) {
	f.Add("192.0.2.1", "", "192.0.2.1")
	f.Add("192.0.2.1,2001:db8::1", "192.0.2.1,2001:db8::1", "")
	f.Add("0.0.0.0", "", "0.0.0.0")
	f.Add(" 2001:db8::1 ,192.0.2.1", "", "2001:db8::1")
	f.Add("192.0.2.1", "", "192.0.2.2")
	f.Fuzz(func(t *testing.T, kv, ours, lbIP string) {
		req, err := ParseServiceRequest(map[string]string{"kube-vip.io/loadbalancerIPs": kv, AnnotationLoadBalancerIPs: ours}, lbIP)
		if err != nil {
			var ae *Error
			if !errors.As(err, &ae) || ae.Reason != ReasonInvalidRequest || ae.Message == "" {
				t.Fatalf("error is not InvalidRequest: %#v", err)
			}
			return
		}
		if strings.TrimSpace(lbIP) == "" || strings.TrimSpace(kv) == "" && strings.TrimSpace(ours) == "" {
			return
		}
		first, _, _ := strings.Cut(kv, ",")
		a, errA := netip.ParseAddr(strings.TrimSpace(first))
		b, errB := netip.ParseAddr(strings.TrimSpace(lbIP))
		if errA != nil || errB != nil || a != b || len(req.RequestedIPs) == 0 || req.RequestedIPs[0] != a {
			t.Fatalf("accepted spec.loadBalancerIP %q beside kube-vip.io/loadbalancerIPs %q (ipledger.io: %q): %v", lbIP, kv, ours, req.RequestedIPs)
		}
	})
}
