package clusternet

import (
	"net/netip"
	"slices"
	"strings"
	"testing"

	watcherv1 "github.com/ipledger/ipledger/proto/ipledger/watcher/v1"
	"github.com/ipledger/ipledger/services/endpoints/internal/probepolicy"
)

func node(name string, podCIDRs []string, addrs ...string) *watcherv1.Object {
	n := &watcherv1.Node{PodCidrs: podCIDRs}
	for _, a := range addrs {
		n.Addresses = append(n.Addresses, &watcherv1.NodeAddress{Type: "InternalIP", Address: a})
	}
	return &watcherv1.Object{Kind: watcherv1.Kind_KIND_NODE, Meta: &watcherv1.ObjectMeta{Name: name}, Body: &watcherv1.Object_Node{Node: n}}
}

func serviceCIDR(name string, cidrs ...string) *watcherv1.Object {
	return &watcherv1.Object{Kind: watcherv1.Kind_KIND_SERVICE_CIDR, Meta: &watcherv1.ObjectMeta{Name: name},
		Body: &watcherv1.Object_ServiceCidr{ServiceCidr: &watcherv1.ServiceCIDR{Cidrs: cidrs}}}
}

func apiServer(addrs ...string) *watcherv1.Object {
	return &watcherv1.Object{Kind: watcherv1.Kind_KIND_KUBERNETES_ENDPOINT_SLICE, Meta: &watcherv1.ObjectMeta{Namespace: "default", Name: "kubernetes"},
		Body: &watcherv1.Object_EndpointSlice{EndpointSlice: &watcherv1.EndpointSlice{Endpoints: []*watcherv1.Endpoint{{Addresses: addrs}}}}}
}

func TestSlice(t *testing.T) {
	nets := Learn(
		[]*watcherv1.Object{node("n1", []string{"10.244.1.0/24", "fd00:244:1::/64"}, "192.168.5.11"), node("cp", nil, "192.168.5.10"), node("bad", []string{"nonsense"}, "nope")},
		[]*watcherv1.Object{serviceCIDR("kubernetes", "10.96.0.0/12", "fd00:10:96::/108")},
		[]*watcherv1.Object{apiServer("192.168.5.10", "172.20.0.5")},
	)
	flags := probepolicy.Policy{PodCIDRs: []netip.Prefix{netip.MustParsePrefix("10.200.0.0/16")},
		Allowed: []netip.Prefix{netip.MustParsePrefix("10.200.7.0/24")}, Denied: []netip.Prefix{netip.MustParsePrefix("192.0.2.0/24")}}
	for _, tc := range []struct {
		addr, reason string
		says         []string
	}{
		{"10.96.0.1", ReasonServiceCIDR, []string{"10.96.0.1", "Service range 10.96.0.0/12", "ServiceCIDR kubernetes"}},
		{"fd00:10:96::a", ReasonServiceCIDR, []string{"fd00:10:96::/108"}},
		{"::ffff:10.96.0.10", ReasonServiceCIDR, []string{"10.96.0.10"}},
		{"10.244.1.9", ReasonPodCIDR, []string{"Pod range 10.244.1.0/24", "Node n1 spec.podCIDRs"}},
		{"fd00:244:1::9", ReasonPodCIDR, nil},
		{"192.168.5.11", ReasonNodeAddress, []string{"Node n1 status.addresses (InternalIP)"}},
		// The API server on a control-plane Node: named as the API server.
		{"192.168.5.10", ReasonAPIServer, []string{"API server", "EndpointSlice default/kubernetes"}},
		{"172.20.0.5", ReasonAPIServer, nil},
		{"169.254.169.254", probepolicy.ReasonCloudMetadata, nil},
		{"127.0.0.1", probepolicy.ReasonLoopback, nil},
		{"224.0.0.5", probepolicy.ReasonMulticast, nil},
		// The operator's flags: --pod-cidrs refuses, a narrower allow admits.
		{"10.200.1.1", probepolicy.ReasonPodCIDR, []string{"--pod-cidrs"}},
		{"10.200.7.1", "", nil},
		// --probe-denied-cidrs is about probes only.
		{"192.0.2.1", "", nil},
		{"10.244.2.1", "", nil},
		{"192.168.5.12", "", nil},
	} {
		r := nets.Slice(netip.MustParseAddr(tc.addr), flags)
		if r.Reason != tc.reason {
			t.Errorf("Slice(%s) = %q (%s), want %q", tc.addr, r.Reason, r.Message, tc.reason)
			continue
		}
		for _, s := range tc.says {
			if !strings.Contains(r.Message, s) {
				t.Errorf("Slice(%s) says %q, want it to name %q", tc.addr, r.Message, s)
			}
		}
	}
	if r := nets.Probe(netip.MustParseAddr("192.0.2.1"), flags); r.Reason != probepolicy.ReasonDeniedCIDR {
		t.Errorf("Probe(192.0.2.1) = %q, want the probe policy's %q", r.Reason, probepolicy.ReasonDeniedCIDR)
	}
	if r := nets.Probe(netip.MustParseAddr("10.244.1.9"), probepolicy.Policy{Allowed: []netip.Prefix{netip.MustParsePrefix("10.244.1.0/24")}}); r.Reason != ReasonPodCIDR {
		t.Errorf("Probe of a learnt Pod range allowed by flag = %q, want %q: learnt ranges are never probed", r.Reason, ReasonPodCIDR)
	}
	var none *Networks
	if r := none.Slice(netip.MustParseAddr("10.96.0.1"), probepolicy.Policy{}); r.Refused() {
		t.Errorf("nil Networks refuse %s", r.Message)
	}
}

func TestChanged(t *testing.T) {
	before := Learn([]*watcherv1.Object{node("n1", []string{"10.244.1.0/24"}, "192.168.5.11")}, nil, nil)
	for _, tc := range []struct {
		name  string
		after *Networks
		want  []string
	}{
		{"same", Learn([]*watcherv1.Object{node("n1", []string{"10.244.1.0/24"}, "192.168.5.11")}, nil, nil), nil},
		{"a Node joins", Learn([]*watcherv1.Object{node("n1", []string{"10.244.1.0/24"}, "192.168.5.11"), node("n2", []string{"10.244.2.0/24"})}, nil, nil),
			[]string{"10.244.2.0/24"}},
		{"a Node leaves", Learn(nil, nil, nil), []string{"10.244.1.0/24", "192.168.5.11/32"}},
		{"the address becomes the API server's", Learn([]*watcherv1.Object{node("n1", []string{"10.244.1.0/24"}, "192.168.5.11")}, nil,
			[]*watcherv1.Object{apiServer("192.168.5.11")}), []string{"192.168.5.11/32"}},
		{"from none", nil, []string{"10.244.1.0/24", "192.168.5.11/32"}},
	} {
		var got []string
		for _, p := range Changed(before, tc.after) {
			got = append(got, p.String())
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("%s: Changed = %v, want %v", tc.name, got, tc.want)
		}
	}
}
