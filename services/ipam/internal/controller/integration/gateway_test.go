package integration

import (
	"context"
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/ipledger/ipledger/lab/testenv"
	"github.com/ipledger/ipledger/services/ipam/internal/controller"
)

var (
	gatewayGVR      = schema.GroupVersionResource{Group: "gateway.networking.k8s.io", Version: "v1", Resource: "gateways"}
	gatewayClassGVR = schema.GroupVersionResource{Group: "gateway.networking.k8s.io", Version: "v1", Resource: "gatewayclasses"}
)

// gatewayAddr is one spec.addresses entry; typ "" leaves the type out (the
// CRD defaults it to IPAddress).
type gatewayAddr struct{ typ, value string }

// gateway creates a Gateway of class in namespace with addrs, and returns
// its UID.
func (h *harness) gateway(namespace, name, class string, addrs ...gatewayAddr) *unstructured.Unstructured {
	h.t.Helper()
	var list []any
	for _, a := range addrs {
		e := map[string]any{"value": a.value}
		if a.typ != "" {
			e["type"] = a.typ
		}
		list = append(list, e)
	}
	spec := map[string]any{"gatewayClassName": class,
		"listeners": []any{map[string]any{"name": "http", "port": int64(80), "protocol": "HTTP"}}}
	if list != nil {
		spec["addresses"] = list
	}
	u := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "gateway.networking.k8s.io/v1", "kind": "Gateway",
		"metadata": map[string]any{"namespace": namespace, "name": name}, "spec": spec}}
	out, err := h.env.Dynamic.Resource(gatewayGVR).Namespace(namespace).Create(context.Background(), u, metav1.CreateOptions{})
	if err != nil {
		h.t.Fatal(err)
	}
	return out
}

// poolFor creates an IPPool with autoAssign off that serves only namespaces.
func (h *harness) poolFor(name, cidr string, namespaces ...string) {
	h.t.Helper()
	h.pool(name, cidr)
	patch := fmt.Sprintf(`{"spec":{"autoAssign":false,"allocation":{"namespaces":[%q]}}}`, strings.Join(namespaces, `","`))
	if _, err := h.env.Dynamic.Resource(controller.PoolGVR).Patch(context.Background(), name, "application/merge-patch+json", []byte(patch), metav1.PatchOptions{}); err != nil {
		h.t.Fatal(err)
	}
}

// gatewayOwned sets the owner reference a Gateway controller (Istio, Cilium)
// sets on the Service it makes for gw.
func gatewayOwned(gw *unstructured.Unstructured) func(*corev1.Service) {
	return func(s *corev1.Service) {
		s.OwnerReferences = []metav1.OwnerReference{{APIVersion: "gateway.networking.k8s.io/v1", Kind: "Gateway", Name: gw.GetName(), UID: gw.GetUID()}}
	}
}

func labelled(labels map[string]string) func(*corev1.Service) {
	return func(s *corev1.Service) { s.Labels = labels }
}

// TestGatewayAddresses: once the Gateway API's CRDs are installed in the
// real API server (the watcher, a real binary, finds them while it runs), a LoadBalancer
// Service shaped as each implementation makes it gets what its Gateway's
// spec.addresses ask for — an IPAddress, a NamedAddress (the IPPool), or
// its GatewayClass's pool — from pools serving the Gateway's namespace.
// A Gateway's address that the Service's own annotation contradicts is
// refused on the Service and in an Event on the Gateway; Envoy Gateway's
// labels link a Service of another namespace to a Gateway only from the
// namespace an operator named, never from a tenant's.
func TestGatewayAddresses(t *testing.T) {
	env := testenv.Get(t)
	h := newHarness(t)
	id := h.lease[len("ipam-"):]
	egs := env.Namespace(t, nil)  // where Envoy Gateway makes every Gateway's Service
	evil := env.Namespace(t, nil) // a tenant copying those labels
	h.gatewayServiceNamespaces = []string{egs}

	h.poolFor("tgw-ips-"+id, "10.78.40.0/28", h.ns)
	h.poolFor("tgw-named-"+id, "10.78.41.0/28", h.ns)
	h.poolFor("tgw-class-"+id, "10.78.42.0/28", h.ns)
	// Before the Gateway API is installed, a Service labelled for a Gateway
	// is any Service: every pool has autoAssign off, so it waits.
	h.service("istio-ip", nil, labelled(map[string]string{"gateway.networking.k8s.io/gateway-name": "ip"}))
	h.start("ipam-0")
	h.waitAllocation(h.ns, "istio-ip", "NoMatchingPool")

	env.InstallGatewayAPI(t) // while the watcher and ipam run
	class := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "gateway.networking.k8s.io/v1", "kind": "GatewayClass",
		"metadata": map[string]any{"name": "tgw-" + id, "annotations": map[string]any{"ipledger.io/address-pool": "tgw-class-" + id}},
		"spec":     map[string]any{"controllerName": "example.com/gateway-controller"}}}
	if _, err := env.Dynamic.Resource(gatewayClassGVR).Create(context.Background(), class, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = env.Dynamic.Resource(gatewayClassGVR).Delete(context.Background(), class.GetName(), metav1.DeleteOptions{})
	})
	// Envoy Gateway's class: only its Gateways' Services link across namespaces.
	egClass := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "gateway.networking.k8s.io/v1", "kind": "GatewayClass",
		"metadata": map[string]any{"name": "tgw-eg-" + id},
		"spec":     map[string]any{"controllerName": "gateway.envoyproxy.io/gatewayclass-controller"}}}
	if _, err := env.Dynamic.Resource(gatewayClassGVR).Create(context.Background(), egClass, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = env.Dynamic.Resource(gatewayClassGVR).Delete(context.Background(), egClass.GetName(), metav1.DeleteOptions{})
	})

	h.gateway(h.ns, "ip", class.GetName(), gatewayAddr{value: "10.78.40.9"})
	namedGW := h.gateway(h.ns, "named", class.GetName(), gatewayAddr{typ: "NamedAddress", value: "tgw-named-" + id})
	h.gateway(h.ns, "bare", class.GetName())
	conflictGW := h.gateway(h.ns, "conflict", class.GetName(), gatewayAddr{typ: "IPAddress", value: "10.78.40.10"})
	h.gateway(h.ns, "envoy", egClass.GetName(), gatewayAddr{value: "10.78.40.12"})

	// As Istio and NGINX Gateway Fabric make them: the GEP-1762 label
	// (istio-ip, above) or an owner reference; as Cilium: its own label.
	h.service("owned-named", nil, gatewayOwned(namedGW))
	h.service("cilium-bare", nil, labelled(map[string]string{"io.cilium.gateway/owning-gateway": "bare"}))
	h.service("conflict", map[string]string{"ipledger.io/loadBalancerIPs": "10.78.40.11"}, gatewayOwned(conflictGW))
	// Envoy Gateway's: in its own namespace, linked by two labels.
	// Envoy Gateway derives the Service's selector from the same labels.
	envoyOwner := map[string]string{"gateway.envoyproxy.io/owning-gateway-name": "envoy", "gateway.envoyproxy.io/owning-gateway-namespace": h.ns}
	envoyLabels := func(s *corev1.Service) { s.Labels, s.Spec.Selector = envoyOwner, envoyOwner }
	h.serviceIn(egs, "envoy-"+h.ns+"-envoy", nil, envoyLabels)
	h.serviceIn(evil, "claims-envoy", nil, envoyLabels)

	if got := h.waitAllocation(h.ns, "istio-ip", "Allocated"); got.ips != "10.78.40.9" {
		t.Errorf("istio-ip: %s, want its Gateway's IPAddress 10.78.40.9", got.ips)
	}
	if got := h.waitAllocation(h.ns, "owned-named", "Allocated"); !strings.HasPrefix(got.ips, "10.78.41.") {
		t.Errorf("owned-named: %s, want an address of the NamedAddress pool tgw-named (10.78.41.0/28)", got.ips)
	}
	if got := h.waitAllocation(h.ns, "cilium-bare", "Allocated"); !strings.HasPrefix(got.ips, "10.78.42.") {
		t.Errorf("cilium-bare: %s, want an address of its GatewayClass's pool tgw-class (10.78.42.0/28)", got.ips)
	}
	if got := h.waitAllocation(egs, "envoy-"+h.ns+"-envoy", "Allocated"); got.ips != "10.78.40.12" {
		t.Errorf("Envoy Gateway's Service: %s, want 10.78.40.12 from a pool serving only the Gateway's namespace %s", got.ips, h.ns)
	}
	c := h.waitAllocation(h.ns, "conflict", "InvalidRequest")
	if c.ips != "" || !strings.Contains(c.detail, "Gateway "+h.ns+"/conflict spec.addresses asks for 10.78.40.10") {
		t.Errorf("conflict: %+v, want InvalidRequest naming the Gateway's address and no IP", c)
	}
	e := h.waitAllocation(evil, "claims-envoy", "InvalidRequest")
	if e.ips != "" || !strings.Contains(e.detail, "--gateway-service-namespaces") || strings.Contains(e.detail, "10.78.40.12") {
		t.Errorf("a tenant's Service with Envoy Gateway's labels: %+v, want InvalidRequest, no address, nothing of the Gateway's", e)
	}
	testenv.Eventually(t, wait, func() error {
		evs, err := env.Client.CoreV1().Events(h.ns).List(context.Background(), metav1.ListOptions{FieldSelector: "involvedObject.kind=Gateway,involvedObject.name=conflict"})
		if err != nil {
			return err
		}
		for _, ev := range evs.Items {
			if ev.Reason == "InvalidRequest" && strings.Contains(ev.Message, "Service "+h.ns+"/conflict: ") && ev.InvolvedObject.UID == conflictGW.GetUID() {
				return nil
			}
		}
		return fmt.Errorf("no InvalidRequest Event on Gateway %s/conflict naming its Service: %d Events", h.ns, len(evs.Items))
	})

	// Removing the contradicting annotation: the Gateway's address is given.
	svc, err := env.Client.CoreV1().Services(h.ns).Get(context.Background(), "conflict", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	delete(svc.Annotations, "ipledger.io/loadBalancerIPs")
	if _, err := env.Client.CoreV1().Services(h.ns).Update(context.Background(), svc, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if got := h.waitAllocation(h.ns, "conflict", "Allocated"); got.ips != "10.78.40.10" {
		t.Errorf("conflict without its annotation: %s, want the Gateway's 10.78.40.10", got.ips)
	}

	// A Gateway's Service that reaches ipam before its Gateway (an owner
	// reference names it) waits for it, and never holds another address.
	h.service("owned-first", nil, func(s *corev1.Service) {
		s.OwnerReferences = []metav1.OwnerReference{{APIVersion: "gateway.networking.k8s.io/v1", Kind: "Gateway", Name: "first", UID: "not-yet"}}
	})
	if got := h.waitAllocation(h.ns, "owned-first", "GatewayNotSeen"); got.ips != "" {
		t.Errorf("owned-first before its Gateway: %+v, want no address", got)
	}
	h.gateway(h.ns, "first", class.GetName(), gatewayAddr{value: "10.78.40.13"})
	if got := h.waitAllocation(h.ns, "owned-first", "Allocated"); got.ips != "10.78.40.13" {
		t.Errorf("owned-first once its Gateway is streamed: %s, want the Gateway's 10.78.40.13", got.ips)
	}

	// An operator changes the GatewayClass's default pool: a new Gateway
	// Service takes the new default, and the one that holds an address of
	// the old default keeps it (a default is not the Service asking).
	bare := h.waitAllocation(h.ns, "cilium-bare", "Allocated")
	patch := fmt.Sprintf(`{"metadata":{"annotations":{"ipledger.io/address-pool":"tgw-named-%s"}}}`, id)
	if _, err := env.Dynamic.Resource(gatewayClassGVR).Patch(context.Background(), class.GetName(), "application/merge-patch+json", []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	h.gateway(h.ns, "late", class.GetName())
	h.service("late", nil, labelled(map[string]string{"gateway.networking.k8s.io/gateway-name": "late"}))
	if got := h.waitAllocation(h.ns, "late", "Allocated"); !strings.HasPrefix(got.ips, "10.78.41.") {
		t.Errorf("a Gateway Service after the class's edit: %s, want the new default pool tgw-named (10.78.41.0/28)", got.ips)
	}
	if got := h.waitAllocation(h.ns, "cilium-bare", "Allocated"); got.ips != bare.ips {
		t.Errorf("cilium-bare after its GatewayClass's default pool changed: %s, want what it held, %s", got.ips, bare.ips)
	}
}
