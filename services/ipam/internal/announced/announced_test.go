package announced

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	watcherv1 "github.com/ipledger/ipledger/proto/ipledger/watcher/v1"
	"github.com/ipledger/ipledger/services/ipam/internal/announce"
	"github.com/ipledger/ipledger/services/ipam/internal/objects"
)

// TestMarks: a Service or a MetalLB status marks that Service; a pool or an
// advertisement marks every Service; the ledger, which changes with every
// allocation, marks nothing.
func TestMarks(t *testing.T) {
	tm := (&Tracker{}).newTerm(nil)
	tm.all = false
	h := tm.handler()
	h.OnAdd(&watcherv1.Object{Kind: watcherv1.Kind_KIND_LEDGER_CONFIG_MAP, Meta: &watcherv1.ObjectMeta{Name: "ipledger-ledger-0"}})
	h.OnAdd(&watcherv1.Object{Kind: watcherv1.Kind_KIND_NAMESPACE, Meta: &watcherv1.ObjectMeta{Name: "shop"}})
	if tm.all || len(tm.keys) != 0 {
		t.Fatalf("the ledger or a Namespace marked all=%v keys=%v", tm.all, tm.keys)
	}
	h.OnUpdate(&watcherv1.Object{Kind: watcherv1.Kind_KIND_METALLB_SERVICE_L2_STATUS, Body: &watcherv1.Object_MetallbServiceStatus{MetallbServiceStatus: &watcherv1.MetalLBServiceStatus{ServiceNamespace: "shop", ServiceName: "old"}}},
		&watcherv1.Object{Kind: watcherv1.Kind_KIND_METALLB_SERVICE_L2_STATUS, Body: &watcherv1.Object_MetallbServiceStatus{MetallbServiceStatus: &watcherv1.MetalLBServiceStatus{ServiceNamespace: "shop", ServiceName: "web"}}})
	if _, old := tm.keys["shop/old"]; !old || tm.all {
		t.Fatalf("a status moved to another Service marked %v (all=%v), want both", tm.keys, tm.all)
	}
	h.OnDelete(&watcherv1.Object{Kind: watcherv1.Kind_KIND_METALLB_L2_ADVERTISEMENT, Meta: &watcherv1.ObjectMeta{Name: "lan"}})
	if !tm.all {
		t.Fatal("an advertisement deleted marked not every Service")
	}
}

// TestEventsOnAChangeOfAnnouncing: the first announcing seen is no Event;
// the same one again is none; another node is one; a gap (not announced)
// then the same node with a new status is one, naming the one before.
func TestEventsOnAChangeOfAnnouncing(t *testing.T) {
	var events []string
	tr := &Tracker{class: objects.Class{Name: objects.DefaultLBClass}}
	tm := tr.newTerm(func(ref *corev1.ObjectReference, typ, reason, msg string) {
		events = append(events, ref.Namespace+"/"+ref.Name+" "+reason+": "+msg)
	})
	svc := &watcherv1.Object{Kind: watcherv1.Kind_KIND_SERVICE, Meta: &watcherv1.ObjectMeta{Namespace: "shop", Name: "web"},
		Body: &watcherv1.Object_Service{Service: &watcherv1.Service{Type: "LoadBalancer", Ingress: []*watcherv1.LoadBalancerIngress{{Ip: "10.0.0.1"}}}}}
	pool := &watcherv1.Object{Kind: watcherv1.Kind_KIND_METALLB_IP_ADDRESS_POOL, Meta: &watcherv1.ObjectMeta{Namespace: "mlb", Name: "p"},
		Body: &watcherv1.Object_MetallbIpAddressPool{MetallbIpAddressPool: &watcherv1.MetalLBIPAddressPool{Addresses: []string{"10.0.0.0/28"}}}}
	adv := &watcherv1.Object{Kind: watcherv1.Kind_KIND_METALLB_L2_ADVERTISEMENT, Meta: &watcherv1.ObjectMeta{Namespace: "mlb", Name: "a"},
		Body: &watcherv1.Object_MetallbAdvertisement{MetallbAdvertisement: &watcherv1.MetalLBAdvertisement{}}}
	t0 := time.Date(2026, 12, 7, 4, 0, 0, 0, time.UTC)
	status := func(node string, at time.Time) *watcherv1.Object {
		return &watcherv1.Object{Kind: watcherv1.Kind_KIND_METALLB_SERVICE_L2_STATUS, Meta: &watcherv1.ObjectMeta{Namespace: "mlb", Name: "l2-" + node, CreationTimestamp: at.UnixNano()},
			Body: &watcherv1.Object_MetallbServiceStatus{MetallbServiceStatus: &watcherv1.MetalLBServiceStatus{Node: node, ServiceNamespace: "shop", ServiceName: "web"}}}
	}
	step := func(objs ...*watcherv1.Object) {
		tm.decide("shop/web", svc, announce.NewWorld(append([]*watcherv1.Object{pool, adv}, objs...), nil, nil), t0)
	}
	step(status("n1", t0))
	step(status("n1", t0))
	if len(events) != 0 {
		t.Fatalf("events %v for the first announcing", events)
	}
	step(status("n2", t0.Add(time.Minute)))
	step()                                    // withdrawn
	step(status("n2", t0.Add(2*time.Minute))) // announced again: a speaker restart
	if len(events) != 2 ||
		!strings.Contains(events[0], "shop/web AnnouncerChanged: 10.0.0.1 is now announced by MetalLB L2 from node n2 since 2026-12-07T04:01:00Z") ||
		!strings.HasSuffix(events[0], "(before: MetalLB L2 from node n1 since 2026-12-07T04:00:00Z)") ||
		!strings.Contains(events[1], "since 2026-12-07T04:02:00Z") || !strings.HasSuffix(events[1], "(before: MetalLB L2 from node n2 since 2026-12-07T04:01:00Z)") {
		t.Errorf("events %q", events)
	}
	tm.forget("shop/web")
	step(status("n3", t0))
	if len(events) != 2 {
		t.Errorf("a Service forgotten (deleted) and made again had an Event: %v", events[2:])
	}
}
