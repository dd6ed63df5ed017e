package controller

import (
	"testing"

	watcherv1 "github.com/ipledger/ipledger/proto/ipledger/watcher/v1"
)

func TestPoolSpecChanged(t *testing.T) {
	pool := func(addrs []string, cond string, rv string) *watcherv1.Object {
		return &watcherv1.Object{Kind: watcherv1.Kind_KIND_IP_POOL,
			Meta: &watcherv1.ObjectMeta{Name: "p", ResourceVersion: rv, CreationTimestamp: 1},
			Body: &watcherv1.Object_IpPool{IpPool: &watcherv1.IPPool{Addresses: addrs,
				Conditions: []*watcherv1.Condition{{Type: "Ready", Status: cond}}}}}
	}
	base := pool([]string{"10.0.0.0/24"}, "True", "1")
	if poolSpecChanged(base, pool([]string{"10.0.0.0/24"}, "False", "2")) {
		t.Error("a status-only update (our own usage write) counts as a spec change: every Service would be decided again")
	}
	if !poolSpecChanged(base, pool([]string{"10.0.1.0/24"}, "True", "3")) {
		t.Error("a changed address list does not count as a spec change")
	}
	if !poolSpecChanged(&watcherv1.Object{Meta: &watcherv1.ObjectMeta{Name: "p"}}, base) {
		t.Error("an update from an object without a pool body must count as a change")
	}
}

func TestGatewayRequestChanged(t *testing.T) {
	gw := func(addr, rv string, ann map[string]string) *watcherv1.Object {
		return &watcherv1.Object{Kind: watcherv1.Kind_KIND_GATEWAY, Meta: &watcherv1.ObjectMeta{Namespace: "ns", Name: "gw", ResourceVersion: rv, Annotations: ann},
			Body: &watcherv1.Object_Gateway{Gateway: &watcherv1.Gateway{GatewayClassName: "c", Addresses: []*watcherv1.GatewayAddress{{Type: "IPAddress", Value: addr}}}}}
	}
	for _, tc := range []struct {
		name string
		o, n *watcherv1.Object
		want bool
	}{
		{"a status rewrite (new resourceVersion only)", gw("10.0.0.1", "1", nil), gw("10.0.0.1", "2", nil), false},
		{"another address", gw("10.0.0.1", "1", nil), gw("10.0.0.2", "2", nil), true},
		{"an annotation", gw("10.0.0.1", "1", nil), gw("10.0.0.1", "2", map[string]string{"ipledger.io/address-pool": "p"}), true},
	} {
		if got := gatewayRequestChanged(tc.o, tc.n); got != tc.want {
			t.Errorf("%s: %v", tc.name, got)
		}
	}
}
