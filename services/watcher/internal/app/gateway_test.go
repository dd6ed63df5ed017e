package app

import (
	"context"
	"fmt"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/ipledger/ipledger/lab/testenv"
	"github.com/ipledger/ipledger/pkg/convert"
	watcherv1 "github.com/ipledger/ipledger/proto/ipledger/watcher/v1"
)

var gatewayKinds = []watcherv1.Kind{watcherv1.Kind_KIND_GATEWAY, watcherv1.Kind_KIND_GATEWAY_CLASS}

// TestGatewayAPIKindsFollowTheirCRDs starts the watcher without the Gateway
// API's CRDs (it must sync, and serve the kinds empty), installs them while it
// runs (Gateways and GatewayClasses are then streamed), and deletes them (the
// objects are deleted from the stream).
func TestGatewayAPIKindsFollowTheirCRDs(t *testing.T) {
	env := testenv.Get(t)
	ctx := context.Background()
	ns := env.Namespace(t, nil)
	w, reg := startWatcher(t, env, func(c *Config) { c.DiscoveryInterval = 100 * time.Millisecond })
	c := dial(t, w.Addr().String(), subscriberToken(t, env))

	before := watch(t, c, &watcherv1.WatchRequest{Kinds: gatewayKinds})
	if snap, _ := before.untilSynced(t); len(snap) != 0 {
		t.Fatalf("snapshot without the Gateway API CRDs holds %d objects, want none", len(snap))
	}
	if v := testenv.MetricValue(t, reg, "ipledger_watcher_optional_kind_served", map[string]string{"kind": "KIND_GATEWAY"}); v != 0 {
		t.Fatalf("ipledger_watcher_optional_kind_served{kind=KIND_GATEWAY} = %v without the CRD, want 0", v)
	}

	env.InstallGatewayAPI(t)
	class := &gatewayv1.GatewayClass{TypeMeta: metav1.TypeMeta{APIVersion: "gateway.networking.k8s.io/v1", Kind: "GatewayClass"},
		ObjectMeta: metav1.ObjectMeta{Name: "class-" + ns, Annotations: map[string]string{"ipledger.io/address-pool": "public", "other.io/x": "dropped"}},
		Spec:       gatewayv1.GatewayClassSpec{ControllerName: "example.com/gateway-controller"}}
	ipType, named := gatewayv1.IPAddressType, gatewayv1.NamedAddressType
	gw := &gatewayv1.Gateway{TypeMeta: metav1.TypeMeta{APIVersion: "gateway.networking.k8s.io/v1", Kind: "Gateway"},
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web"},
		Spec: gatewayv1.GatewaySpec{GatewayClassName: gatewayv1.ObjectName(class.Name),
			Listeners: []gatewayv1.Listener{{Name: "http", Port: 80, Protocol: gatewayv1.HTTPProtocolType}},
			Addresses: []gatewayv1.GatewaySpecAddress{
				{Type: &ipType, Value: "203.0.113.10"},
				{Value: "203.0.113.11"}, // the API server defaults the type to IPAddress
				{Type: &named, Value: "public"},
			}}}
	// The CRD may be established before discovery and the API server's
	// handlers serve it: retry the first create.
	testenv.Eventually(t, 30*time.Second, func() error { return createTyped(ctx, env, class, convert.GatewayClassResource.Resource, "") })
	if err := createTyped(ctx, env, gw, convert.GatewayResource.Resource, ns); err != nil {
		t.Fatal(err)
	}

	got := map[string]*watcherv1.Object{}
	for len(got) < 2 {
		ev := before.next(t)
		if ev.GetType() != watcherv1.EventType_EVENT_TYPE_UPSERT {
			t.Fatalf("after installing the CRDs got %v, want UPSERTs", ev.GetType())
		}
		got[ev.GetObject().GetKind().String()] = ev.GetObject()
	}
	wantGateway := func(o *watcherv1.Object) error {
		g := o.GetGateway()
		if o.GetMeta().GetNamespace() != ns || o.GetMeta().GetName() != "web" || g.GetGatewayClassName() != class.Name {
			return fmt.Errorf("gateway %v/%v of class %q, want %s/web of %s", o.GetMeta().GetNamespace(), o.GetMeta().GetName(), g.GetGatewayClassName(), ns, class.Name)
		}
		want := []string{"IPAddress=203.0.113.10", "IPAddress=203.0.113.11", "NamedAddress=public"}
		var have []string
		for _, a := range g.GetAddresses() {
			have = append(have, a.GetType()+"="+a.GetValue())
		}
		if fmt.Sprint(have) != fmt.Sprint(want) {
			return fmt.Errorf("gateway addresses %v, want %v", have, want)
		}
		return nil
	}
	if err := wantGateway(got["KIND_GATEWAY"]); err != nil {
		t.Fatal(err)
	}
	cls := got["KIND_GATEWAY_CLASS"]
	if cls.GetGatewayClass().GetControllerName() != "example.com/gateway-controller" ||
		cls.GetMeta().GetAnnotations()["ipledger.io/address-pool"] != "public" || len(cls.GetMeta().GetAnnotations()) != 1 {
		t.Fatalf("gateway class %v, want controller example.com/gateway-controller and only the ipledger.io/address-pool annotation", cls)
	}

	// A subscriber arriving now gets them in its snapshot.
	snap, _ := watch(t, c, &watcherv1.WatchRequest{Kinds: []watcherv1.Kind{watcherv1.Kind_KIND_GATEWAY}, Namespaces: []string{ns}}).untilSynced(t)
	if len(snap) != 1 {
		t.Fatalf("snapshot after install holds %d Gateways, want 1", len(snap))
	}
	if err := wantGateway(snap[0].GetObject()); err != nil {
		t.Fatal(err)
	}

	env.UninstallGatewayAPI(t)
	deleted := map[string]bool{}
	for len(deleted) < 2 {
		ev := before.next(t)
		if ev.GetType() != watcherv1.EventType_EVENT_TYPE_DELETE {
			t.Fatalf("after deleting the CRDs got %v of %v, want DELETEs", ev.GetType(), ev.GetObject().GetMeta().GetName())
		}
		deleted[ev.GetObject().GetKind().String()] = true
	}
	testenv.Eventually(t, 30*time.Second, func() error {
		if v := testenv.MetricValue(t, reg, "ipledger_watcher_optional_kind_served", map[string]string{"kind": "KIND_GATEWAY"}); v != 0 {
			return fmt.Errorf("ipledger_watcher_optional_kind_served{kind=KIND_GATEWAY} = %v after the CRD is gone, want 0", v)
		}
		return nil
	})
}

// createTyped creates a typed object through the dynamic client.
func createTyped(ctx context.Context, env *testenv.Env, obj runtime.Object, resource, ns string) error {
	content, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		return err
	}
	gvr := convert.GatewayGroupVersion.WithResource(resource)
	_, err = env.Dynamic.Resource(gvr).Namespace(ns).Create(ctx, &unstructured.Unstructured{Object: content}, metav1.CreateOptions{})
	return err
}
