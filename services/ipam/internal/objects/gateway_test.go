package objects

import (
	"errors"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"testing"

	watcherv1 "github.com/ipledger/ipledger/proto/ipledger/watcher/v1"
	"github.com/ipledger/ipledger/services/ipam/internal/allocator"
)

// gatewayService is a LoadBalancer Service of namespace ns with labels,
// annotations and owner references.
func gatewayService(ns string, labels, annotations map[string]string, owners ...*watcherv1.OwnerReference) *watcherv1.Object {
	return &watcherv1.Object{Kind: watcherv1.Kind_KIND_SERVICE,
		Meta: &watcherv1.ObjectMeta{Namespace: ns, Name: "gw-svc", Labels: labels, Annotations: annotations, OwnerReferences: owners},
		Body: &watcherv1.Object_Service{Service: &watcherv1.Service{Type: "LoadBalancer"}}}
}

// envoyGatewayService is the Service Envoy Gateway makes in
// envoy-gateway-system for Gateway gwNS/gw: the owner labels, and a selector
// derived from them.
func envoyGatewayService(gwNS, gw string, annotations map[string]string) *watcherv1.Object {
	owner := map[string]string{LabelEnvoyGatewayName: gw, LabelEnvoyGatewayNamespace: gwNS}
	svc := gatewayService("envoy-gateway-system", maps.Clone(owner), annotations)
	svc.GetService().Selector, svc.GetService().HasSelector = owner, true
	return svc
}

func gatewayOwner(apiVersion, name string) *watcherv1.OwnerReference {
	return &watcherv1.OwnerReference{ApiVersion: apiVersion, Kind: "Gateway", Name: name, Controller: true}
}

func TestLinkedGateway(t *testing.T) {
	trusted := []string{"envoy-gateway-system"}
	envoy := func(name, ns string) map[string]string {
		return map[string]string{LabelEnvoyGatewayName: name, LabelEnvoyGatewayNamespace: ns}
	}
	for _, tc := range []struct {
		name     string
		svc      *watcherv1.Object
		want     string // Gateway key; "" for none
		wantErr  string
		wantVia  string
		wantMove bool // the Gateway is of another namespace
	}{
		{name: "no link", svc: gatewayService("shop", map[string]string{"app": "web"}, nil)},
		{name: "owner reference (Istio, Cilium, NGINX Gateway Fabric)", svc: gatewayService("shop", nil, nil, gatewayOwner("gateway.networking.k8s.io/v1", "gw")),
			want: "shop/gw", wantVia: "owner reference"},
		{name: "owner reference of Istio's own Gateway kind is not one", svc: gatewayService("shop", nil, nil, gatewayOwner("networking.istio.io/v1", "gw"))},
		{name: "GEP-1762 label", svc: gatewayService("shop", map[string]string{LabelGatewayName: "gw"}, nil), want: "shop/gw", wantVia: "label " + LabelGatewayName},
		{name: "Cilium label", svc: gatewayService("shop", map[string]string{LabelCiliumGateway: "gw"}, nil), want: "shop/gw"},
		{name: "Contour label", svc: gatewayService("shop", map[string]string{LabelContourGateway: "gw"}, nil), want: "shop/gw"},
		{name: "label and owner agree", svc: gatewayService("shop", map[string]string{LabelGatewayName: "gw"}, nil, gatewayOwner("gateway.networking.k8s.io/v1", "gw")),
			want: "shop/gw"},
		{name: "label and owner disagree", svc: gatewayService("shop", map[string]string{LabelGatewayName: "other"}, nil, gatewayOwner("gateway.networking.k8s.io/v1", "gw")),
			wantErr: "belongs to Gateway shop/gw by owner reference and to Gateway shop/other by label " + LabelGatewayName},
		{name: "Envoy Gateway in the Gateway's own namespace", svc: gatewayService("shop", envoy("gw", "shop"), nil), want: "shop/gw"},
		{name: "Envoy Gateway from a trusted namespace", svc: envoyGatewayService("shop", "gw", nil), want: "shop/gw", wantMove: true},
		{name: "Envoy Gateway labels from an untrusted namespace are refused", svc: gatewayService("evil", envoy("gw", "prod"), nil),
			wantErr: "Services of namespace evil may belong only to Gateways of their own namespace"},
		{name: "one Envoy Gateway label alone", svc: gatewayService("shop", map[string]string{LabelEnvoyGatewayName: "gw"}, nil),
			wantErr: "has only one of the labels"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			link, ok, err := LinkedGateway(tc.svc, trusted)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want it to say %q", err, tc.wantErr)
				}
				if !isInvalid(err) {
					t.Errorf("err = %v, want an InvalidRequest", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			got := ""
			if ok {
				got = link.Key()
			}
			if got != tc.want {
				t.Fatalf("linked to %q, want %q", got, tc.want)
			}
			if tc.wantVia != "" && link.Via != tc.wantVia {
				t.Errorf("via %q, want %q", link.Via, tc.wantVia)
			}
			if ok && link.CrossNamespace(tc.svc.GetMeta().GetNamespace()) != tc.wantMove {
				t.Errorf("CrossNamespace = %v", !tc.wantMove)
			}
		})
	}
}

func gatewayObj(ns, name, class string, addrs ...*watcherv1.GatewayAddress) *watcherv1.Object {
	return &watcherv1.Object{Kind: watcherv1.Kind_KIND_GATEWAY, Meta: &watcherv1.ObjectMeta{Namespace: ns, Name: name, Uid: "gw-uid"},
		Body: &watcherv1.Object_Gateway{Gateway: &watcherv1.Gateway{GatewayClassName: class, Addresses: addrs}}}
}

func gatewayClassObj(name, pool string) *watcherv1.Object {
	var ann map[string]string
	if pool != "" {
		ann = map[string]string{allocator.AnnotationAddressPool: pool}
	}
	return &watcherv1.Object{Kind: watcherv1.Kind_KIND_GATEWAY_CLASS, Meta: &watcherv1.ObjectMeta{Name: name, Annotations: ann},
		Body: &watcherv1.Object_GatewayClass{GatewayClass: &watcherv1.GatewayClass{ControllerName: "example.com/gateway"}}}
}

// envoyClassObj is a GatewayClass Envoy Gateway serves.
func envoyClassObj(name, pool string) *watcherv1.Object {
	c := gatewayClassObj(name, pool)
	c.GetGatewayClass().ControllerName = EnvoyGatewayControllerName
	return c
}

func namespaceObj(name string, labels map[string]string) *watcherv1.Object {
	return &watcherv1.Object{Kind: watcherv1.Kind_KIND_NAMESPACE, Meta: &watcherv1.ObjectMeta{Name: name, Labels: labels},
		Body: &watcherv1.Object_Namespace{Namespace: &watcherv1.Namespace{}}}
}

func ipAddr(v string) *watcherv1.GatewayAddress {
	return &watcherv1.GatewayAddress{Type: allocator.GatewayIPAddress, Value: v}
}

func named(v string) *watcherv1.GatewayAddress {
	return &watcherv1.GatewayAddress{Type: allocator.GatewayNamedAddress, Value: v}
}

// The request of a Service serving a Gateway: the Gateway's addresses and
// its class's pool join the Service's own annotations, and the pools of the
// Gateway's namespace serve it.
func TestRequestOfAGatewayService(t *testing.T) {
	index := NewIndex(
		namespaceObj("shop", map[string]string{"tier": "gold"}),
		namespaceObj("envoy-gateway-system", nil),
		gatewayClassObj("with-pool", "public"),
		gatewayClassObj("plain", ""),
		gatewayObj("shop", "ips", "with-pool", ipAddr("192.0.2.10"), &watcherv1.GatewayAddress{Type: "IPAddress", Value: "2001:db8::10"}),
		envoyClassObj("envoy", "public"),
		gatewayObj("shop", "envoy-ips", "envoy", ipAddr("192.0.2.10"), &watcherv1.GatewayAddress{Type: "IPAddress", Value: "2001:db8::10"}),
		gatewayObj("shop", "named", "with-pool", named("private")),
		gatewayObj("shop", "bare", "with-pool"),
		gatewayObj("shop", "hostname", "plain", &watcherv1.GatewayAddress{Type: "Hostname", Value: "gw.example.com"}),
	)
	env := Env{Objects: index, GatewayServiceNamespaces: []string{"envoy-gateway-system"}}
	label := func(gw string) map[string]string { return map[string]string{LabelGatewayName: gw} }
	for _, tc := range []struct {
		name          string
		svc           *watcherv1.Object
		wantIPs       []string
		wantPool      string
		wantDefault   string // the default pool (the GatewayClass's)
		wantNamespace string
		wantLabels    map[string]string
		wantErr       string
	}{
		{name: "IPAddress entries are requested IPs (the class's pool only a default)", svc: gatewayService("shop", label("ips"), nil),
			wantIPs: []string{"192.0.2.10", "2001:db8::10"}, wantDefault: "public", wantNamespace: "shop", wantLabels: map[string]string{"tier": "gold"}},
		{name: "a NamedAddress names the pool", svc: gatewayService("shop", label("named"), nil), wantPool: "private", wantDefault: "public", wantNamespace: "shop"},
		{name: "the class's pool is the default", svc: gatewayService("shop", label("bare"), nil), wantDefault: "public", wantNamespace: "shop"},
		{name: "the Service's annotation names the pool", svc: gatewayService("shop", label("bare"), map[string]string{allocator.AnnotationAddressPool: "mine"}),
			wantPool: "mine", wantDefault: "public", wantNamespace: "shop"},
		{name: "an annotation agreeing with the Gateway", svc: gatewayService("shop", label("ips"), map[string]string{allocator.AnnotationLoadBalancerIPs: "2001:db8::10,192.0.2.10"}),
			wantIPs: []string{"192.0.2.10", "2001:db8::10"}, wantDefault: "public", wantNamespace: "shop"},
		{name: "an annotation disagreeing with the Gateway's addresses", svc: gatewayService("shop", label("ips"), map[string]string{allocator.AnnotationLoadBalancerIPs: "192.0.2.99"}),
			wantErr: "Gateway shop/ips spec.addresses asks for 192.0.2.10, 2001:db8::10, and the Service requests 192.0.2.99"},
		{name: "an annotation disagreeing with the Gateway's pool", svc: gatewayService("shop", label("named"), map[string]string{allocator.AnnotationAddressPool: "mine"}),
			wantErr: "Gateway shop/named spec.addresses names IPPool private (NamedAddress), and the Service's ipledger.io/address-pool names mine"},
		{name: "a Hostname cannot be given", svc: gatewayService("shop", label("hostname"), nil), wantErr: "spec.addresses[0]: type Hostname cannot be given"},
		{name: "a Gateway not streamed (yet, or any more): the Service as any other", svc: gatewayService("shop", label("gone"), nil), wantNamespace: "shop"},
		{name: "Envoy Gateway's Service is served by the Gateway's namespace's pools",
			svc:     envoyGatewayService("shop", "envoy-ips", nil),
			wantIPs: []string{"192.0.2.10", "2001:db8::10"}, wantDefault: "public", wantNamespace: "shop", wantLabels: map[string]string{"tier": "gold"}},
		{name: "and shares no address",
			svc:     envoyGatewayService("shop", "envoy-ips", map[string]string{allocator.AnnotationAllowSharedIP: "k"}),
			wantErr: "cannot share its address"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, err := Request(tc.svc, env)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) || !isInvalid(err) {
					t.Fatalf("err = %v, want an InvalidRequest saying %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var want []netip.Addr
			for _, s := range tc.wantIPs {
				want = append(want, netip.MustParseAddr(s))
			}
			if !slices.Equal(req.RequestedIPs, want) || req.Pool != tc.wantPool || req.DefaultPool != tc.wantDefault || req.Namespace != tc.wantNamespace {
				t.Errorf("request IPs %v pool %q default %q namespace %q, want %v %q %q %q", req.RequestedIPs, req.Pool, req.DefaultPool, req.Namespace,
					want, tc.wantPool, tc.wantDefault, tc.wantNamespace)
			}
			if tc.wantLabels != nil && req.NamespaceLabels["tier"] != tc.wantLabels["tier"] {
				t.Errorf("namespace labels %v, want %v", req.NamespaceLabels, tc.wantLabels)
			}
		})
	}
}

func isInvalid(err error) bool {
	var ae *allocator.Error
	return errors.As(err, &ae) && ae.Reason == allocator.ReasonInvalidRequest
}

// A Service owned by a Gateway the stream does not show waits for it
// (GatewayNotSeen) instead of taking an address the Gateway may not want;
// one linked by a label only is served as any other.
func TestServiceOwnedByAnUnseenGatewayWaits(t *testing.T) {
	env := Env{Objects: NewIndex(namespaceObj("shop", nil))}
	_, err := Request(gatewayService("shop", nil, nil, gatewayOwner("gateway.networking.k8s.io/v1", "soon")), env)
	var ae *allocator.Error
	if !errors.As(err, &ae) || ae.Reason != allocator.ReasonGatewayNotSeen || !strings.Contains(ae.Message, "Gateway shop/soon") {
		t.Fatalf("owned by an unseen Gateway: %v, want GatewayNotSeen naming it", err)
	}
	if _, err := Request(gatewayService("shop", map[string]string{LabelGatewayName: "soon"}, nil), env); err != nil {
		t.Fatalf("labelled for an unseen Gateway: %v, want the request of any Service", err)
	}
}

// TestEnvoyGatewayLinkVerified: a Service of the Gateway controller's
// namespace counts against (and is served from) another namespace only when
// Envoy Gateway made it for a Gateway there: labels an EnvoyProxy's
// envoyService.labels forged (the selector still names the real owner), a
// merged Gateways' Service, a Gateway not seen, or one of a class another
// controller serves leave the Service its own namespace's.
func TestEnvoyGatewayLinkVerified(t *testing.T) {
	env := Env{Objects: NewIndex(
		namespaceObj("a", nil), namespaceObj("b", nil), namespaceObj("envoy-gateway-system", nil),
		envoyClassObj("eg", ""), gatewayClassObj("other", ""),
		gatewayObj("a", "gw", "eg"), gatewayObj("b", "gw", "eg"), gatewayObj("b", "istio", "other"),
	), GatewayServiceNamespaces: []string{"envoy-gateway-system"}}
	relabel := func(svc *watcherv1.Object, ns, name string) *watcherv1.Object {
		svc.Meta.Labels[LabelEnvoyGatewayNamespace], svc.Meta.Labels[LabelEnvoyGatewayName] = ns, name
		return svc
	}
	merged := envoyGatewayService("b", "gw", nil)
	merged.Meta.Labels[LabelEnvoyGatewayClass] = "eg"
	for _, tc := range []struct {
		name       string
		svc        *watcherv1.Object
		wantTenant string
		wantReason allocator.Reason // "" for none
		wantErr    string
	}{
		{name: "Envoy Gateway's own Service of a's Gateway", svc: envoyGatewayService("a", "gw", nil), wantTenant: "a"},
		{name: "and of b's", svc: envoyGatewayService("b", "gw", nil), wantTenant: "b"},
		{name: "a's Service relabelled as b's (envoyService.labels)", svc: relabel(envoyGatewayService("a", "gw", nil), "b", "gw"),
			wantTenant: "envoy-gateway-system", wantReason: allocator.ReasonInvalidRequest, wantErr: "the labels were set by someone else"},
		{name: "a merged Gateways' Service whose infrastructure labels name b's Gateway", svc: merged,
			wantTenant: "envoy-gateway-system", wantReason: allocator.ReasonInvalidRequest, wantErr: "Envoy Gateway merges them"},
		{name: "a Gateway not seen", svc: envoyGatewayService("b", "soon", nil),
			wantTenant: "envoy-gateway-system", wantReason: allocator.ReasonGatewayNotSeen, wantErr: "Gateway b/soon"},
		{name: "a Gateway of another controller's class", svc: envoyGatewayService("b", "istio", nil),
			wantTenant: "envoy-gateway-system", wantReason: allocator.ReasonInvalidRequest, wantErr: "class other is not served by Envoy Gateway"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, err := Request(tc.svc, env)
			var ae *allocator.Error
			switch {
			case tc.wantReason == "" && err != nil:
				t.Fatal(err)
			case tc.wantReason != "" && (!errors.As(err, &ae) || ae.Reason != tc.wantReason || !strings.Contains(ae.Message, tc.wantErr)):
				t.Fatalf("err = %v, want %s saying %q", err, tc.wantReason, tc.wantErr)
			}
			if req.Namespace != tc.wantTenant {
				t.Errorf("tenant %q, want %q", req.Namespace, tc.wantTenant)
			}
		})
	}
}
