package convert

import (
	"testing"

	"google.golang.org/protobuf/proto"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	watcherv1 "github.com/ipledger/ipledger/proto/ipledger/watcher/v1"
)

// TestMetalLB converts each MetalLB kind ipledger reads, as MetalLB
// v0.16.1's types spell their fields, and refuses another group's kind of
// the same name.
func TestMetalLB(t *testing.T) {
	obj := func(kind string, fields map[string]any) *unstructured.Unstructured {
		o := map[string]any{"apiVersion": "metallb.io/v1beta1", "kind": kind, "metadata": map[string]any{"namespace": "metallb-system", "name": "x"}}
		for k, v := range fields {
			o[k] = v
		}
		return &unstructured.Unstructured{Object: o}
	}
	sel := map[string]any{"matchLabels": map[string]any{"a": "b"}}
	wantSel := []*watcherv1.LabelSelector{{MatchLabels: map[string]string{"a": "b"}}}
	for _, c := range []struct {
		in   *unstructured.Unstructured
		kind watcherv1.Kind
		want proto.Message
		get  func(*watcherv1.Object) proto.Message
	}{
		{obj("IPAddressPool", map[string]any{"spec": map[string]any{"addresses": []any{"10.0.0.0/28", "10.0.1.1-10.0.1.9"}, "autoAssign": false}}),
			watcherv1.Kind_KIND_METALLB_IP_ADDRESS_POOL, &watcherv1.MetalLBIPAddressPool{Addresses: []string{"10.0.0.0/28", "10.0.1.1-10.0.1.9"}},
			func(o *watcherv1.Object) proto.Message { return o.GetMetallbIpAddressPool() }},
		{obj("L2Advertisement", map[string]any{"spec": map[string]any{"ipAddressPools": []any{"p"}, "ipAddressPoolSelectors": []any{sel},
			"serviceSelectors": []any{sel}, "nodeSelectors": []any{sel}, "interfaces": []any{"eth1"}}}),
			watcherv1.Kind_KIND_METALLB_L2_ADVERTISEMENT, &watcherv1.MetalLBAdvertisement{IpAddressPools: []string{"p"}, IpAddressPoolSelectors: wantSel,
				ServiceSelectors: wantSel, NodeSelectors: wantSel, Interfaces: []string{"eth1"}},
			func(o *watcherv1.Object) proto.Message { return o.GetMetallbAdvertisement() }},
		{obj("BGPAdvertisement", map[string]any{"spec": map[string]any{"ipAddressPools": []any{"p"}, "peers": []any{"tor"}}}),
			watcherv1.Kind_KIND_METALLB_BGP_ADVERTISEMENT, &watcherv1.MetalLBAdvertisement{IpAddressPools: []string{"p"}},
			func(o *watcherv1.Object) proto.Message { return o.GetMetallbAdvertisement() }},
		{obj("ServiceL2Status", map[string]any{"status": map[string]any{"node": "n1", "serviceName": "web", "serviceNamespace": "shop",
			"interfaces": []any{map[string]any{"name": "eth1"}}}}),
			watcherv1.Kind_KIND_METALLB_SERVICE_L2_STATUS, &watcherv1.MetalLBServiceStatus{Node: "n1", ServiceName: "web", ServiceNamespace: "shop"},
			func(o *watcherv1.Object) proto.Message { return o.GetMetallbServiceStatus() }},
		{obj("ServiceBGPStatus", map[string]any{"status": map[string]any{"node": "n1", "serviceName": "web", "serviceNamespace": "shop", "peers": []any{"tor"}}}),
			watcherv1.Kind_KIND_METALLB_SERVICE_BGP_STATUS, &watcherv1.MetalLBServiceStatus{Node: "n1", ServiceName: "web", ServiceNamespace: "shop", Peers: []string{"tor"}},
			func(o *watcherv1.Object) proto.Message { return o.GetMetallbServiceStatus() }},
	} {
		t.Run(c.in.GetKind(), func(t *testing.T) {
			got, err := Object(c.in)
			if err != nil {
				t.Fatal(err)
			}
			if got.GetKind() != c.kind || got.GetMeta().GetName() != "x" || !proto.Equal(c.get(got), c.want) {
				t.Errorf("got %v, want kind %v body %v", got, c.kind, c.want)
			}
		})
	}
	other := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "example.com/v1", "kind": "IPAddressPool", "metadata": map[string]any{"name": "x"}}}
	if _, err := Object(other); err == nil {
		t.Error("an IPAddressPool of another group converted")
	}
}
