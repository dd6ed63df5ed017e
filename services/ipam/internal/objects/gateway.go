package objects

import (
	"flag"
	"fmt"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/ipledger/ipledger/pkg/convert"
	"github.com/ipledger/ipledger/pkg/stream/objkey"
	watcherv1 "github.com/ipledger/ipledger/proto/ipledger/watcher/v1"
	"github.com/ipledger/ipledger/services/ipam/internal/allocator"
)

// GatewayGroup is the Gateway API's group.
const GatewayGroup = "gateway.networking.k8s.io"

// The labels by which Gateway implementations mark the LoadBalancer Service
// they make for a Gateway of the Service's own namespace.
const (
	// LabelGatewayName is the Gateway API's own (GEP-1762): Istio, NGINX
	// Gateway Fabric, kgateway and Cilium set it.
	LabelGatewayName = "gateway.networking.k8s.io/gateway-name"
	// LabelCiliumGateway is Cilium's.
	LabelCiliumGateway = "io.cilium.gateway/owning-gateway"
	// LabelContourGateway is Contour's Gateway provisioner's.
	LabelContourGateway = "projectcontour.io/owning-gateway-name"
)

// Envoy Gateway puts every Gateway's Service in its own namespace
// (envoy-gateway-system) and names the Gateway by these two labels.
const (
	LabelEnvoyGatewayName      = "gateway.envoyproxy.io/owning-gateway-name"
	LabelEnvoyGatewayNamespace = "gateway.envoyproxy.io/owning-gateway-namespace"
	// LabelEnvoyGatewayClass marks the one Service of every Gateway of a
	// class when Envoy Gateway merges them (mergeGateways).
	LabelEnvoyGatewayClass = "gateway.envoyproxy.io/owning-gatewayclass"
	// EnvoyGatewayControllerName is Envoy Gateway's GatewayClass
	// spec.controllerName.
	EnvoyGatewayControllerName = "gateway.envoyproxy.io/gatewayclass-controller"
)

// viaOwner is GatewayLink.Via for a link by owner reference.
const viaOwner = "owner reference"

// GatewayLink is the Gateway a Service belongs to, and how that was found.
type GatewayLink struct {
	Namespace, Name string
	Via             string // "owner reference", "label <key>"
}

// Key is the Gateway's "namespace/name".
func (l GatewayLink) Key() string { return objkey.Join(l.Namespace, l.Name) }

// CrossNamespace reports whether the Gateway is in another namespace than
// the Service of namespace ns.
func (l GatewayLink) CrossNamespace(ns string) bool { return l.Namespace != ns }

// LinkedGateway finds the Gateway the Service svc belongs to: by an owner
// reference to a gateway.networking.k8s.io Gateway, by LabelGatewayName,
// LabelCiliumGateway or LabelContourGateway (all in the Service's namespace:
// owner references cannot cross namespaces, and these labels never do), or
// by Envoy Gateway's two labels, which may name a Gateway of any namespace.
// Those are trusted only when the Service's namespace is one of trusted (the
// namespaces where an operator runs such an implementation): anyone who can
// make a Service elsewhere could otherwise claim another namespace's Gateway
// addresses. Every link present must name the same Gateway. ok is false
// when the Service belongs to no Gateway; the error is an *allocator.Error
// (InvalidRequest) naming the labels at fault.
func LinkedGateway(svc *watcherv1.Object, trusted []string) (link GatewayLink, ok bool, err error) {
	m := svc.GetMeta()
	ns := m.GetNamespace()
	var links []GatewayLink
	for _, o := range m.GetOwnerReferences() {
		if o.GetKind() == "Gateway" && strings.HasPrefix(o.GetApiVersion(), GatewayGroup+"/") {
			links = append(links, GatewayLink{Namespace: ns, Name: o.GetName(), Via: viaOwner})
		}
	}
	for _, key := range []string{LabelGatewayName, LabelCiliumGateway, LabelContourGateway} {
		if name := m.GetLabels()[key]; name != "" {
			links = append(links, GatewayLink{Namespace: ns, Name: name, Via: "label " + key})
		}
	}
	if l, found, err := envoyGatewayLink(svc, trusted); err != nil {
		return GatewayLink{}, false, err
	} else if found {
		links = append(links, l)
	}
	if len(links) == 0 {
		return GatewayLink{}, false, nil
	}
	for _, l := range links[1:] {
		if l.Key() != links[0].Key() {
			return GatewayLink{}, false, &allocator.Error{Reason: allocator.ReasonInvalidRequest, Message: fmt.Sprintf(
				"the Service belongs to Gateway %s by %s and to Gateway %s by %s; a Service serves one Gateway, so make them agree",
				links[0].Key(), links[0].Via, l.Key(), l.Via)}
		}
	}
	return links[0], true, nil
}

// envoyGatewayLink reads Envoy Gateway's owning-gateway labels.
func envoyGatewayLink(svc *watcherv1.Object, trusted []string) (GatewayLink, bool, error) {
	labels, ns := svc.GetMeta().GetLabels(), svc.GetMeta().GetNamespace()
	name, gwNS := labels[LabelEnvoyGatewayName], labels[LabelEnvoyGatewayNamespace]
	switch {
	case name == "" && gwNS == "":
		return GatewayLink{}, false, nil
	case name == "" || gwNS == "":
		return GatewayLink{}, false, &allocator.Error{Reason: allocator.ReasonInvalidRequest, Message: fmt.Sprintf(
			"the Service has only one of the labels %s and %s; set both, or neither", LabelEnvoyGatewayName, LabelEnvoyGatewayNamespace)}
	case gwNS != ns && !slices.Contains(trusted, ns):
		return GatewayLink{}, false, &allocator.Error{Reason: allocator.ReasonInvalidRequest, Message: fmt.Sprintf(
			"label %s names a Gateway of namespace %s, and Services of namespace %s may belong only to Gateways of their own namespace; "+
				"remove the label, or, if a Gateway controller runs in %s, ask an operator to list it in ipam's --gateway-service-namespaces",
			LabelEnvoyGatewayNamespace, gwNS, ns, ns)}
	case gwNS != ns:
		if err := envoyGatewayForged(svc, name, gwNS); err != nil {
			return GatewayLink{}, false, err
		}
	}
	return GatewayLink{Namespace: gwNS, Name: name, Via: "labels " + LabelEnvoyGatewayName + " and " + LabelEnvoyGatewayNamespace}, true, nil
}

// envoyGatewayForged refuses the owning-gateway labels of a Service of a
// trusted namespace when Envoy Gateway did not set them itself: they move
// the Service (its pools, its Gateway's addresses, its quota) to another
// namespace. In Envoy Gateway v1.9.0 (internal/gatewayapi/translator.go
// buildIR, internal/infrastructure/kubernetes/proxy/resource_provider.go
// Service) a Gateway's spec.infrastructure.labels are copied before the
// owner labels, which win; but an EnvoyProxy's envoyService.labels — one a
// tenant may attach to its own Gateway by spec.infrastructure.parametersRef
// — are copied after them, and with merged Gateways Envoy Gateway sets no
// owning-gateway label, so a Gateway's infrastructure labels pass. Neither
// reaches the selector, which Envoy Gateway derives from its own labels:
// the Service must select the Pods of the Gateway its labels name, and
// must not be a merged Gateways' Service. (An EnvoyProxy's envoyService.patch
// can rewrite any field; docs/security.md says how to keep it from tenants.)
func envoyGatewayForged(svc *watcherv1.Object, name, gwNS string) error {
	labels, sel := svc.GetMeta().GetLabels(), svc.GetService().GetSelector()
	switch {
	case labels[LabelEnvoyGatewayClass] != "":
		return &allocator.Error{Reason: allocator.ReasonInvalidRequest, Message: fmt.Sprintf(
			"the Service serves every Gateway of class %s (label %s: Envoy Gateway merges them), so its labels %s and %s name no one Gateway; "+
				"it is served as a Service of namespace %s, which a merged Gateway's labels cannot change",
			labels[LabelEnvoyGatewayClass], LabelEnvoyGatewayClass, LabelEnvoyGatewayName, LabelEnvoyGatewayNamespace, svc.GetMeta().GetNamespace())}
	case sel[LabelEnvoyGatewayName] != name || sel[LabelEnvoyGatewayNamespace] != gwNS:
		return &allocator.Error{Reason: allocator.ReasonInvalidRequest, Message: fmt.Sprintf(
			"the Service's labels name Gateway %s, and its spec.selector (which Envoy Gateway derives from the Gateway that owns it) selects %s=%q, %s=%q: "+
				"the labels were set by someone else (an EnvoyProxy's envoyService.labels?), so ipam does not count the Service against namespace %s; "+
				"remove them",
			objkey.Join(gwNS, name), LabelEnvoyGatewayNamespace, sel[LabelEnvoyGatewayNamespace], LabelEnvoyGatewayName, sel[LabelEnvoyGatewayName], gwNS)}
	}
	return nil
}

// verifyCrossNamespace checks, for a Service linked to a Gateway of another
// namespace, that the Gateway exists (gw, found) and is of a class Envoy
// Gateway — the only implementation that links across namespaces — serves.
// Until then the Service is no tenant's: it waits (GatewayNotSeen) or is
// refused, and keeps what it holds.
func verifyCrossNamespace(link GatewayLink, env Env) error {
	gw, ok := env.get(watcherv1.Kind_KIND_GATEWAY, link.Namespace, link.Name)
	if !ok {
		return &allocator.Error{Reason: allocator.ReasonGatewayNotSeen, Message: fmt.Sprintf(
			"the Service names Gateway %s of another namespace by %s, and ipam does not see that Gateway (yet): it waits for it before it serves the Service from that namespace's pools",
			link.Key(), link.Via)}
	}
	className := gw.GetGateway().GetGatewayClassName()
	class, ok := env.get(watcherv1.Kind_KIND_GATEWAY_CLASS, "", className)
	if ctrl := class.GetGatewayClass().GetControllerName(); !ok || ctrl != EnvoyGatewayControllerName {
		return &allocator.Error{Reason: allocator.ReasonInvalidRequest, Message: fmt.Sprintf(
			"the Service names Gateway %s of another namespace by %s, and that Gateway's class %s is not served by Envoy Gateway (controllerName %q, want %q): "+
				"only Envoy Gateway makes a Gateway's Service in another namespace",
			link.Key(), link.Via, className, ctrl, EnvoyGatewayControllerName)}
	}
	return nil
}

// gatewayRequest reads what the linked Gateway (and its GatewayClass) ask
// for; ok is false while the Gateway is not streamed (its CRD absent, or it
// was deleted before its Service): the Service is then served as any other.
func gatewayRequest(link GatewayLink, env Env) (allocator.GatewayRequest, bool, error) {
	gw, ok := env.get(watcherv1.Kind_KIND_GATEWAY, link.Namespace, link.Name)
	if !ok {
		return allocator.GatewayRequest{}, false, nil
	}
	body := gw.GetGateway()
	addrs := make([]allocator.GatewayAddress, 0, len(body.GetAddresses()))
	for _, a := range body.GetAddresses() {
		addrs = append(addrs, allocator.GatewayAddress{Type: a.GetType(), Value: a.GetValue()})
	}
	gr, err := allocator.ParseGatewayRequest(link.Key(), addrs)
	if err != nil {
		return allocator.GatewayRequest{}, true, err
	}
	if class, ok := env.get(watcherv1.Kind_KIND_GATEWAY_CLASS, "", body.GetGatewayClassName()); ok {
		gr.Class, gr.ClassPool = class.GetMeta().GetName(), class.GetMeta().GetAnnotations()[allocator.AnnotationAddressPool]
		if n, ok := convert.ParseTruncated(gr.ClassPool); ok {
			return allocator.GatewayRequest{}, true, &allocator.Error{Reason: allocator.ReasonInvalidRequest, Message: fmt.Sprintf(
				"GatewayClass %s annotation %s is %d bytes, longer than the %d bytes ipledger reads of an annotation: shorten it",
				gr.Class, allocator.AnnotationAddressPool, n, convert.MaxAnnotationBytes)}
		}
	}
	return gr, true, nil
}

// GatewayServiceNamespacesFlag registers --gateway-service-namespaces on fs
// (ipam's and its preflight's alike), parsed into into.
func GatewayServiceNamespacesFlag(fs *flag.FlagSet, into *[]string) {
	fs.Func("gateway-service-namespaces",
		"comma-separated namespaces where a Gateway controller makes the Services of Gateways of other namespaces (Envoy Gateway's envoy-gateway-system): "+
			"only there do its owning-gateway labels link a Service to another namespace's Gateway, whose addresses and pools it then takes (docs/gateway-api.md). Default none",
		func(s string) error {
			list, err := parseNamespaceList(s)
			*into = list
			return err
		})
}

// parseNamespaceList parses a comma-separated list of namespace names.
func parseNamespaceList(s string) ([]string, error) {
	var out []string
	for part := range strings.SplitSeq(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		if errs := validation.IsDNS1123Label(part); len(errs) > 0 {
			return nil, fmt.Errorf("%q is not a namespace name: %s", part, strings.Join(errs, "; "))
		}
		out = append(out, part)
	}
	return out, nil
}
