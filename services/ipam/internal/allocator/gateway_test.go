package allocator

import (
	"slices"
	"strings"
	"testing"
)

func TestParseGatewayRequest(t *testing.T) {
	for _, tc := range []struct {
		name     string
		addrs    []GatewayAddress
		wantIPs  []string
		wantPool string
		wantErr  string
	}{
		{name: "none"},
		{name: "an entry without a type is an IPAddress", addrs: []GatewayAddress{{Value: "192.0.2.1"}, {Type: GatewayIPAddress, Value: "2001:db8::1"}},
			wantIPs: []string{"192.0.2.1", "2001:db8::1"}},
		{name: "a NamedAddress is a pool", addrs: []GatewayAddress{{Type: GatewayNamedAddress, Value: "public"}, {Value: "192.0.2.1"}},
			wantIPs: []string{"192.0.2.1"}, wantPool: "public"},
		{name: "two of one family", addrs: []GatewayAddress{{Value: "192.0.2.1"}, {Value: "192.0.2.2"}},
			wantErr: "Gateway shop/gw spec.addresses[1]: 192.0.2.1 and 192.0.2.2 are both IPv4"},
		{name: "two pools", addrs: []GatewayAddress{{Type: GatewayNamedAddress, Value: "a"}, {Type: GatewayNamedAddress, Value: "b"}},
			wantErr: `spec.addresses[1]: NamedAddress "a" and "b" name two IPPools`},
		{name: "not an IP", addrs: []GatewayAddress{{Value: "gw.example.com"}}, wantErr: `spec.addresses[0]: "gw.example.com" is not an IP address`},
		{name: "not a pool name", addrs: []GatewayAddress{{Type: GatewayNamedAddress, Value: "Public Pool"}}, wantErr: `NamedAddress "Public Pool" is not a valid IPPool name`},
		{name: "another type", addrs: []GatewayAddress{{Type: "example.com/zone", Value: "z1"}}, wantErr: "type example.com/zone cannot be given"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g, err := ParseGatewayRequest("shop/gw", tc.addrs)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) || reasonOf(err) != ReasonInvalidRequest {
					t.Fatalf("err = %v, want an InvalidRequest saying %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(g.RequestedIPs, addrs(tc.wantIPs...)) || g.Pool != tc.wantPool {
				t.Errorf("got %v %q, want %v %q", g.RequestedIPs, g.Pool, tc.wantIPs, tc.wantPool)
			}
		})
	}
}

// A Service serving a Gateway of another namespace is served by the pools
// of the Gateway's namespace, and told so when they do not serve it.
func TestRequestNamespaceSelectsPools(t *testing.T) {
	shop := spec("10.0.0.0/30")
	shop.Namespaces = []string{"shop"}
	a := newAllocator(t, mustPool(t, "shop", shop))
	verdict := func(req Request) string { return a.Explain(req).Verdicts[0].Message }
	if _, err := a.Allocate(Request{Service: "envoy-gateway-system/gw-a"}); reasonOf(err) != ReasonNoMatchingPool {
		t.Fatalf("a Service of envoy-gateway-system: %v, want NoMatchingPool", err)
	}
	if v := verdict(Request{Service: "envoy-gateway-system/gw-a"}); !strings.Contains(v, "the Service is in namespace envoy-gateway-system") {
		t.Errorf("verdict %q", v)
	}
	res := mustAllocate(t, a, Request{Service: "envoy-gateway-system/gw-b", Namespace: "shop"})
	if len(res.IPs) != 1 {
		t.Fatalf("serving a Gateway of shop: got %v", res.IPs)
	}
	if v := verdict(Request{Service: "envoy-gateway-system/gw-c", Namespace: "other"}); !strings.Contains(v, "the Service serves a Gateway of namespace other") {
		t.Errorf("serving a Gateway of other: verdict %q", v)
	}
}

// A default pool (a GatewayClass's) serves a Service that holds nothing and
// names nothing; it never moves one that holds an address, whatever the
// default becomes.
func TestDefaultPoolNeverMovesAHolder(t *testing.T) {
	a := newAllocator(t, mustPool(t, "old", spec("10.0.0.0/30")), mustPool(t, "new", spec("10.0.1.0/30")))
	from := "GatewayClass gw's ipledger.io/address-pool"
	res := mustAllocate(t, a, Request{Service: "ns/held", DefaultPool: "old", DefaultPoolFrom: from})
	if res.Pool != "old" {
		t.Fatalf("fresh with default old: got pool %s", res.Pool)
	}
	res = mustAllocate(t, a, Request{Service: "ns/held", DefaultPool: "new", DefaultPoolFrom: from})
	if res.Pool != "old" || res.New {
		t.Errorf("after the default became new: %+v, want it kept in old", res)
	}
	res = mustAllocate(t, a, Request{Service: "ns/fresh", DefaultPool: "new", DefaultPoolFrom: from})
	if res.Pool != "new" {
		t.Errorf("a fresh Service with default new: pool %s", res.Pool)
	}
	res = mustAllocate(t, a, Request{Service: "ns/requests", RequestedIPs: addrs("10.0.0.2"), DefaultPool: "new", DefaultPoolFrom: from})
	if res.Pool != "old" {
		t.Errorf("a requested IP says its pool, over the default: pool %s", res.Pool)
	}
	_, err := a.Allocate(Request{Service: "ns/missing", DefaultPool: "nope", DefaultPoolFrom: from})
	if reasonOf(err) != ReasonNoMatchingPool || !strings.Contains(err.Error(), `no IPPool named "nope" (`+from+`)`) {
		t.Errorf("a default naming no pool: %v", err)
	}
}
