package convert

import (
	"fmt"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"

	watcherv1 "github.com/ipledger/ipledger/proto/ipledger/watcher/v1"
)

// GatewayGroupVersion is the Gateway API version the watcher serves. ipledger
// does not import the Gateway API's Go types: it reads two fields of each
// object, and a module of its own would tie every binary to its release.
var GatewayGroupVersion = schema.GroupVersion{Group: "gateway.networking.k8s.io", Version: "v1"}

// Resources of the Gateway API kinds the watcher serves.
var (
	GatewayResource      = GatewayGroupVersion.WithResource("gateways")
	GatewayClassResource = GatewayGroupVersion.WithResource("gatewayclasses")
)

// GatewayAddressIP is the Gateway API's default address type.
const GatewayAddressIP = "IPAddress"

type gateway struct {
	Spec struct {
		GatewayClassName string `json:"gatewayClassName"`
		Addresses        []struct {
			Type  *string `json:"type"`
			Value string  `json:"value"`
		} `json:"addresses"`
	} `json:"spec"`
}

type gatewayClass struct {
	Spec struct {
		ControllerName string `json:"controllerName"`
	} `json:"spec"`
}

// isGatewayAPI tells the Gateway API's kinds apart from others of the same
// name (Istio's networking.istio.io Gateway is not one).
func isGatewayAPI(u *unstructured.Unstructured) bool {
	return u.GroupVersionKind().Group == GatewayGroupVersion.Group
}

// Gateway converts an unstructured gateway.networking.k8s.io Gateway.
func Gateway(u *unstructured.Unstructured) (*watcherv1.Object, error) {
	var g gateway
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.UnstructuredContent(), &g); err != nil {
		return nil, fmt.Errorf("convert Gateway %s/%s: %w", u.GetNamespace(), u.GetName(), err)
	}
	body := &watcherv1.Gateway{GatewayClassName: g.Spec.GatewayClassName}
	for _, a := range g.Spec.Addresses {
		typ := GatewayAddressIP // the CRD's default, also for objects stored before it
		if a.Type != nil && *a.Type != "" {
			typ = *a.Type
		}
		body.Addresses = append(body.Addresses, &watcherv1.GatewayAddress{Type: typ, Value: a.Value})
	}
	return &watcherv1.Object{Kind: watcherv1.Kind_KIND_GATEWAY, Meta: Meta(u), Body: &watcherv1.Object_Gateway{Gateway: body}}, nil
}

// GatewayClass converts an unstructured gateway.networking.k8s.io GatewayClass.
func GatewayClass(u *unstructured.Unstructured) (*watcherv1.Object, error) {
	var c gatewayClass
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.UnstructuredContent(), &c); err != nil {
		return nil, fmt.Errorf("convert GatewayClass %s: %w", u.GetName(), err)
	}
	return &watcherv1.Object{Kind: watcherv1.Kind_KIND_GATEWAY_CLASS, Meta: Meta(u),
		Body: &watcherv1.Object_GatewayClass{GatewayClass: &watcherv1.GatewayClass{ControllerName: c.Spec.ControllerName}}}, nil
}
