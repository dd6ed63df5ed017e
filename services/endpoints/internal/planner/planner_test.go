package planner

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"

	watcherv1 "github.com/ipledger/ipledger/proto/ipledger/watcher/v1"
	"github.com/ipledger/ipledger/services/endpoints/internal/clusternet"
	"github.com/ipledger/ipledger/services/endpoints/internal/probepolicy"
)

const svcUID = "11111111-2222-3333-4444-555555555555"

type svcOpt func(*watcherv1.Object)

func service(ns, name string, opts ...svcOpt) *watcherv1.Object {
	o := &watcherv1.Object{
		Kind: watcherv1.Kind_KIND_SERVICE,
		Meta: &watcherv1.ObjectMeta{Namespace: ns, Name: name, Uid: svcUID, Labels: map[string]string{"team": "web"}},
		Body: &watcherv1.Object_Service{Service: &watcherv1.Service{
			Type:        "ClusterIP",
			ClusterIps:  []string{"10.0.0.10"},
			IpFamilies:  []string{"IPv4"},
			Selector:    map[string]string{"app": "vm"},
			HasSelector: true,
			Ports:       []*watcherv1.ServicePort{{Name: "http", Protocol: "TCP", Port: 80, TargetPortNumber: 8080}},
		}},
	}
	for _, f := range opts {
		f(o)
	}
	return o
}

func withPorts(ports ...*watcherv1.ServicePort) svcOpt {
	return func(o *watcherv1.Object) { o.GetService().Ports = ports }
}

func withFamilies(f ...string) svcOpt {
	return func(o *watcherv1.Object) { o.GetService().IpFamilies = f }
}

type wlOpt func(*watcherv1.Object)

func workload(ns, name string, ips []string, opts ...wlOpt) *watcherv1.Object {
	o := &watcherv1.Object{
		Kind: watcherv1.Kind_KIND_EXTERNAL_WORKLOAD,
		Meta: &watcherv1.ObjectMeta{Namespace: ns, Name: name, Uid: "uid-" + name, Labels: map[string]string{"app": "vm"}},
		Body: &watcherv1.Object_ExternalWorkload{ExternalWorkload: &watcherv1.ExternalWorkload{
			WorkloadIps: ips,
			Ports:       []*watcherv1.WorkloadPort{{Name: "web", Port: 9090, Protocol: "TCP"}},
			Conditions:  []*watcherv1.Condition{{Type: "Ready", Status: "True"}},
		}},
	}
	for _, f := range opts {
		f(o)
	}
	return o
}

func notReady(o *watcherv1.Object) {
	o.GetExternalWorkload().Conditions = []*watcherv1.Condition{{Type: "Ready", Status: "False"}}
}

func zone(z string) wlOpt {
	return func(o *watcherv1.Object) { o.Meta.Labels[corev1.LabelTopologyZone] = z }
}

func wlPorts(ports ...*watcherv1.WorkloadPort) wlOpt {
	return func(o *watcherv1.Object) { o.GetExternalWorkload().Ports = ports }
}

func workloads(ns string, n int) []*watcherv1.Object {
	out := make([]*watcherv1.Object, 0, n)
	for i := range n {
		out = append(out, workload(ns, fmt.Sprintf("vm-%03d", i), []string{fmt.Sprintf("192.0.%d.%d", i/250, i%250+1)}))
	}
	return out
}

// cluster applies plans like the API server would: creates get a
// resourceVersion and generation 1, updates bump both, deletes remove.
type cluster struct {
	rv     int
	slices map[string]*discoveryv1.EndpointSlice
}

func newCluster() *cluster { return &cluster{slices: map[string]*discoveryv1.EndpointSlice{}} }

func (c *cluster) apply(t *testing.T, p Plan) {
	t.Helper()
	for _, s := range p.Create {
		if _, ok := c.slices[s.Name]; ok {
			t.Fatalf("create of existing slice %s", s.Name)
		}
		c.rv++
		s = s.DeepCopy()
		s.ResourceVersion, s.Generation = fmt.Sprint(c.rv), 1
		c.slices[s.Name] = s
	}
	for _, s := range p.Update {
		old, ok := c.slices[s.Name]
		if !ok || old.ResourceVersion != s.ResourceVersion {
			t.Fatalf("update of %s with stale or missing resourceVersion", s.Name)
		}
		c.rv++
		s = s.DeepCopy()
		s.ResourceVersion, s.Generation = fmt.Sprint(c.rv), old.Generation+1
		c.slices[s.Name] = s
	}
	for _, s := range p.Delete {
		if _, ok := c.slices[s.Name]; !ok {
			t.Fatalf("delete of missing slice %s", s.Name)
		}
		delete(c.slices, s.Name)
	}
}

func (c *cluster) list() []*discoveryv1.EndpointSlice {
	var out []*discoveryv1.EndpointSlice
	for _, s := range c.slices {
		out = append(out, s.DeepCopy())
	}
	return out
}

func (c *cluster) byType(at discoveryv1.AddressType) []*discoveryv1.EndpointSlice {
	var out []*discoveryv1.EndpointSlice
	for _, s := range c.slices {
		if s.AddressType == at {
			out = append(out, s)
		}
	}
	return out
}

func names(ss []*discoveryv1.EndpointSlice) []string {
	var out []string
	for _, s := range ss {
		for _, e := range s.Endpoints {
			out = append(out, e.TargetRef.Name)
		}
	}
	slices.Sort(out)
	return out
}

// converge plans and applies until nothing is left to do, returning the
// writes of the first round, and fails if a second round still writes.
func converge(t *testing.T, c *cluster, in Input) Plan {
	t.Helper()
	in.Existing = c.list()
	first := Compute(in)
	c.apply(t, first)
	in.Existing = c.list()
	if again := Compute(in); again.Writes() != 0 {
		t.Fatalf("plan is not stable: second round wants %d creates, %d updates, %d deletes",
			len(again.Create), len(again.Update), len(again.Delete))
	}
	return first
}

func TestComputeSelection(t *testing.T) {
	tests := []struct {
		name      string
		svc       *watcherv1.Object
		workloads []*watcherv1.Object
		want      []string // workloads in slices, sorted
		slices    int
	}{
		{
			name: "same namespace only",
			svc:  service("a", "web"),
			workloads: []*watcherv1.Object{
				workload("a", "vm-1", []string{"192.0.2.1"}),
				workload("a", "vm-2", []string{"192.0.2.2"}),
				workload("a", "vm-3", []string{"192.0.2.3"}),
				workload("b", "vm-4", []string{"192.0.2.4"}),
			},
			want: []string{"vm-1", "vm-2", "vm-3"}, slices: 1,
		},
		{
			name: "selector must match labels",
			svc:  service("a", "web"),
			workloads: []*watcherv1.Object{
				workload("a", "vm-1", []string{"192.0.2.1"}),
				workload("a", "other", []string{"192.0.2.2"}, func(o *watcherv1.Object) { o.Meta.Labels = map[string]string{"app": "db"} }),
			},
			want: []string{"vm-1"}, slices: 1,
		},
		{
			name: "ExternalName gets nothing",
			svc: service("a", "web", func(o *watcherv1.Object) {
				o.GetService().Type = "ExternalName"
			}),
			workloads: []*watcherv1.Object{workload("a", "vm-1", []string{"192.0.2.1"})},
		},
		{
			name: "no selector gets nothing",
			svc: service("a", "web", func(o *watcherv1.Object) {
				o.GetService().Selector, o.GetService().HasSelector = nil, false
			}),
			workloads: []*watcherv1.Object{workload("a", "vm-1", []string{"192.0.2.1"})},
		},
		{
			name: "empty selector gets nothing",
			svc: service("a", "web", func(o *watcherv1.Object) {
				o.GetService().Selector = map[string]string{}
			}),
			workloads: []*watcherv1.Object{workload("a", "vm-1", []string{"192.0.2.1"})},
		},
		{
			name:      "no matching workload means no slice, not a placeholder",
			svc:       service("a", "web"),
			workloads: nil,
		},
		{
			name:      "workload without an address of the family is left out",
			svc:       service("a", "web"),
			workloads: []*watcherv1.Object{workload("a", "v6", []string{"2001:db8::1"}), workload("a", "v4", []string{"192.0.2.1"})},
			want:      []string{"v4"}, slices: 1,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := newCluster()
			p := converge(t, c, Input{Service: tt.svc, Workloads: tt.workloads})
			if len(p.Create) != tt.slices || len(c.slices) != tt.slices {
				t.Fatalf("got %d creates, %d slices; want %d", len(p.Create), len(c.slices), tt.slices)
			}
			if got := names(c.list()); !slices.Equal(got, tt.want) {
				t.Fatalf("endpoints %v, want %v", got, tt.want)
			}
		})
	}
}

func TestComputeSliceContents(t *testing.T) {
	svc := service("a", "web")
	p := Compute(Input{
		Service: svc,
		Workloads: []*watcherv1.Object{
			workload("a", "vm-1", []string{"192.0.2.1"}, zone("zone-a")),
			workload("a", "vm-2", []string{"192.0.2.2"}, notReady),
			workload("a", "vm-3", []string{"192.0.2.3"}, func(o *watcherv1.Object) { o.Meta.DeletionTimestamp = 1 }),
		},
		TriggerTime: time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC),
	})
	if len(p.Create) != 1 || len(p.Update)+len(p.Delete) != 0 {
		t.Fatalf("plan %+v, want one create", p)
	}
	s := p.Create[0]
	if s.AddressType != discoveryv1.AddressTypeIPv4 || s.Namespace != "a" || !strings.HasPrefix(s.Name, "web-") {
		t.Errorf("slice %s/%s type %s", s.Namespace, s.Name, s.AddressType)
	}
	wantLabels := map[string]string{"team": "web", discoveryv1.LabelManagedBy: ManagedBy, discoveryv1.LabelServiceName: "web"}
	if !mapsEqual(s.Labels, wantLabels) {
		t.Errorf("labels %v, want %v", s.Labels, wantLabels)
	}
	if got := s.Annotations[corev1.EndpointsLastChangeTriggerTime]; got != "2026-01-02T03:04:05.000000006Z" {
		t.Errorf("trigger time annotation %q", got)
	}
	if len(s.OwnerReferences) != 1 || s.OwnerReferences[0].UID != svcUID || !boolOf(s.OwnerReferences[0].Controller) ||
		s.OwnerReferences[0].Kind != "Service" || s.OwnerReferences[0].Name != "web" {
		t.Errorf("ownerReferences %+v", s.OwnerReferences)
	}
	if len(s.Ports) != 1 || strOf(s.Ports[0].Name) != "http" || int32Of(s.Ports[0].Port) != 8080 || *s.Ports[0].Protocol != corev1.ProtocolTCP {
		t.Errorf("ports %+v", s.Ports)
	}
	type cond struct {
		ready, serving, terminating bool
		zone                        string
	}
	want := map[string]cond{
		"vm-1": {true, true, false, "zone-a"},
		"vm-2": {false, false, false, ""},
		"vm-3": {false, true, true, ""},
	}
	if len(s.Endpoints) != 3 {
		t.Fatalf("%d endpoints, want 3", len(s.Endpoints))
	}
	for _, e := range s.Endpoints {
		got := cond{boolOf(e.Conditions.Ready), boolOf(e.Conditions.Serving), boolOf(e.Conditions.Terminating), strOf(e.Zone)}
		if got != want[e.TargetRef.Name] {
			t.Errorf("%s: %+v, want %+v", e.TargetRef.Name, got, want[e.TargetRef.Name])
		}
		if e.TargetRef.Kind != WorkloadKind || e.TargetRef.APIVersion != WorkloadAPIVersion || e.TargetRef.Namespace != "a" {
			t.Errorf("targetRef %+v", e.TargetRef)
		}
	}
}

func TestComputePacking(t *testing.T) {
	svc := service("a", "web")
	c := newCluster()
	all := workloads("a", 250)
	in := Input{Service: svc, Workloads: all, MaxEndpointsPerSlice: 100}

	p := converge(t, c, in)
	if len(p.Create) != 3 || len(p.Update)+len(p.Delete) != 0 {
		t.Fatalf("cold start: %d/%d/%d writes, want 3 creates", len(p.Create), len(p.Update), len(p.Delete))
	}
	sizes := func() []int {
		var out []int
		for _, s := range c.slices {
			out = append(out, len(s.Endpoints))
		}
		slices.Sort(out)
		return out
	}
	if got := sizes(); !slices.Equal(got, []int{50, 100, 100}) {
		t.Fatalf("sizes %v, want [50 100 100]", got)
	}

	// Deleting one workload rewrites exactly the slice it was in.
	in.Workloads = slices.Delete(slices.Clone(all), 120, 121)
	p = converge(t, c, in)
	if len(p.Update) != 1 || len(p.Create)+len(p.Delete) != 0 {
		t.Fatalf("delete one: %d/%d/%d writes, want exactly one update", len(p.Create), len(p.Update), len(p.Delete))
	}
	if got := sizes(); !slices.Equal(got, []int{50, 99, 100}) {
		t.Fatalf("sizes %v, want [50 99 100]", got)
	}

	// Adding one fills a slice that has room; nothing is created.
	in.Workloads = append(in.Workloads, workload("a", "vm-new", []string{"198.51.100.1"}))
	p = converge(t, c, in)
	if len(p.Update) != 1 || len(p.Create)+len(p.Delete) != 0 {
		t.Fatalf("add one: %d/%d/%d writes, want exactly one update", len(p.Create), len(p.Update), len(p.Delete))
	}
	if n := len(p.Update[0].Endpoints); n > 100 {
		t.Fatalf("filled slice has %d endpoints", n)
	}
	if got := names(c.list()); len(got) != 250 {
		t.Fatalf("%d endpoints in slices, want 250", len(got))
	}

	// A Ready flip rewrites one slice in place.
	in.Workloads = slices.Clone(in.Workloads)
	in.Workloads[0] = workload("a", "vm-000", []string{"192.0.0.1"}, notReady)
	p = converge(t, c, in)
	if len(p.Update) != 1 || len(p.Create)+len(p.Delete) != 0 {
		t.Fatalf("ready flip: %d/%d/%d writes, want exactly one update", len(p.Create), len(p.Update), len(p.Delete))
	}

	// All gone: every slice deleted.
	in.Workloads = nil
	p = converge(t, c, in)
	if len(p.Delete) != 3 || len(c.slices) != 0 {
		t.Fatalf("all gone: %d deletes, %d slices left", len(p.Delete), len(c.slices))
	}
}

func TestComputeMaxEndpointsDefault(t *testing.T) {
	p := Compute(Input{Service: service("a", "web"), Workloads: workloads("a", 101)})
	if len(p.Create) != 2 || len(p.Create[0].Endpoints) != 100 || len(p.Create[1].Endpoints) != 1 {
		t.Fatalf("default max: %d creates", len(p.Create))
	}
}

func TestComputeNamedTargetPort(t *testing.T) {
	svc := service("a", "web", withPorts(
		&watcherv1.ServicePort{Name: "http", Protocol: "TCP", Port: 80, TargetPortName: "web"},
	))
	ws := []*watcherv1.Object{
		workload("a", "vm-1", []string{"192.0.2.1"}),
		workload("a", "vm-2", []string{"192.0.2.2"}),
		workload("a", "udp-only", []string{"192.0.2.3"}, wlPorts(&watcherv1.WorkloadPort{Name: "web", Port: 9090, Protocol: "UDP"})),
		workload("a", "no-port", []string{"192.0.2.4"}, wlPorts()),
		workload("a", "other-number", []string{"192.0.2.5"}, wlPorts(&watcherv1.WorkloadPort{Name: "web", Port: 7070, Protocol: "TCP"})),
	}
	c := newCluster()
	p := converge(t, c, Input{Service: svc, Workloads: ws})
	if len(c.slices) != 2 {
		t.Fatalf("%d slices, want 2 (one per resolved port number)", len(c.slices))
	}
	if got := names(c.list()); !slices.Equal(got, []string{"other-number", "vm-1", "vm-2"}) {
		t.Fatalf("endpoints %v", got)
	}
	for _, s := range c.slices {
		want := int32(9090)
		if s.Endpoints[0].TargetRef.Name == "other-number" {
			want = 7070
		}
		if int32Of(s.Ports[0].Port) != want {
			t.Errorf("slice with %s has port %d, want %d", s.Endpoints[0].TargetRef.Name, int32Of(s.Ports[0].Port), want)
		}
	}
	var skipped []string
	for _, s := range p.Skipped {
		skipped = append(skipped, s.Workload)
	}
	slices.Sort(skipped)
	if !slices.Equal(skipped, []string{"no-port", "udp-only"}) {
		t.Fatalf("skipped %v", skipped)
	}

	// With two Service ports, a workload lacking the named one lands in the
	// port set of the ports it has.
	svc2 := service("a", "web", withPorts(
		&watcherv1.ServicePort{Name: "http", Protocol: "TCP", Port: 80, TargetPortName: "web"},
		&watcherv1.ServicePort{Name: "metrics", Protocol: "TCP", Port: 9100, TargetPortNumber: 9100},
	))
	p = Compute(Input{Service: svc2, Workloads: ws})
	portSets := map[string][]string{}
	for _, s := range p.Create {
		portSets[portKey(s.Ports)] = append(portSets[portKey(s.Ports)], names([]*discoveryv1.EndpointSlice{s})...)
	}
	if len(portSets) != 3 {
		t.Fatalf("port sets %v, want 3 (web=9090+metrics, web=7070+metrics, metrics only)", portSets)
	}
	if got := portSets["metrics/TCP/9100/"]; !slices.Equal(got, []string{"no-port", "udp-only"}) {
		t.Fatalf("metrics-only set %v", got)
	}
}

func TestComputeDualStack(t *testing.T) {
	svc := service("a", "web", withFamilies("IPv4", "IPv6"))
	ws := []*watcherv1.Object{
		workload("a", "vm-1", []string{"192.0.2.1", "2001:db8::1"}),
		workload("a", "vm-2", []string{"2001:DB8:0::2", "192.0.2.2"}),
	}
	c := newCluster()
	converge(t, c, Input{Service: svc, Workloads: ws})
	v4, v6 := c.byType(discoveryv1.AddressTypeIPv4), c.byType(discoveryv1.AddressTypeIPv6)
	if len(v4) != 1 || len(v6) != 1 || len(v4[0].Endpoints) != 2 || len(v6[0].Endpoints) != 2 {
		t.Fatalf("slices: %d IPv4, %d IPv6", len(v4), len(v6))
	}
	if got := v6[0].Endpoints; got[0].Addresses[0] != "2001:db8::1" || got[1].Addresses[0] != "2001:db8::2" {
		t.Fatalf("IPv6 addresses not canonical: %v %v", got[0].Addresses, got[1].Addresses)
	}
	v6name := v6[0].Name

	svc = service("a", "web", withFamilies("IPv4"))
	p := converge(t, c, Input{Service: svc, Workloads: ws})
	if len(p.Delete) != 1 || p.Delete[0].Name != v6name || len(p.Create)+len(p.Update) != 0 {
		t.Fatalf("IPv4 only: %d/%d/%d writes, want the IPv6 slice deleted", len(p.Create), len(p.Update), len(p.Delete))
	}
}

func TestComputeAddressTypes(t *testing.T) {
	tests := []struct {
		svc  *watcherv1.Service
		want []discoveryv1.AddressType
	}{
		{&watcherv1.Service{IpFamilies: []string{"IPv6", "IPv4"}}, []discoveryv1.AddressType{"IPv6", "IPv4"}},
		{&watcherv1.Service{ClusterIps: []string{"fd00::1"}}, []discoveryv1.AddressType{"IPv6"}},
		{&watcherv1.Service{ClusterIps: []string{"None"}}, []discoveryv1.AddressType{"IPv4"}},
		{&watcherv1.Service{}, []discoveryv1.AddressType{"IPv4"}},
	}
	for _, tt := range tests {
		if got := AddressTypes(tt.svc); !slices.Equal(got, tt.want) {
			t.Errorf("AddressTypes(%v) = %v, want %v", tt.svc, got, tt.want)
		}
	}
}

func TestComputeNeverTouchesForeignSlices(t *testing.T) {
	foreign := &discoveryv1.EndpointSlice{}
	foreign.Name, foreign.Namespace = "web-abc", "a"
	foreign.AddressType = discoveryv1.AddressTypeIPv4
	foreign.Labels = map[string]string{discoveryv1.LabelServiceName: "web", discoveryv1.LabelManagedBy: "endpointslice-controller.k8s.io"}
	for _, tt := range []struct {
		name string
		svc  *watcherv1.Object
	}{
		{"service selects", service("a", "web")},
		{"service without selector", service("a", "web", func(o *watcherv1.Object) { o.GetService().Selector = nil })},
	} {
		t.Run(tt.name, func(t *testing.T) {
			p := Compute(Input{Service: tt.svc, Workloads: workloads("a", 3), Existing: []*discoveryv1.EndpointSlice{foreign}})
			for _, s := range append(append(slices.Clone(p.Create), p.Update...), p.Delete...) {
				if s.Name == foreign.Name {
					t.Fatalf("plan writes foreign slice %s", s.Name)
				}
			}
		})
	}
}

func TestComputeSelectorRemovedDeletesOurSlices(t *testing.T) {
	c := newCluster()
	converge(t, c, Input{Service: service("a", "web"), Workloads: workloads("a", 3)})
	p := converge(t, c, Input{Service: service("a", "web", func(o *watcherv1.Object) { o.GetService().Selector = nil }), Workloads: workloads("a", 3)})
	if len(p.Delete) != 1 || len(c.slices) != 0 {
		t.Fatalf("%d deletes, %d slices left", len(p.Delete), len(c.slices))
	}
}

func TestComputeLabelsFollowService(t *testing.T) {
	c := newCluster()
	converge(t, c, Input{Service: service("a", "web"), Workloads: workloads("a", 3)})
	svc := service("a", "web", func(o *watcherv1.Object) {
		o.Meta.Labels = map[string]string{"team": "api", discoveryv1.LabelManagedBy: "someone-else"}
	})
	p := converge(t, c, Input{Service: svc, Workloads: workloads("a", 3)})
	if len(p.Update) != 1 {
		t.Fatalf("%d updates, want 1", len(p.Update))
	}
	got := p.Update[0].Labels
	if got["team"] != "api" || got[discoveryv1.LabelManagedBy] != ManagedBy {
		t.Fatalf("labels %v", got)
	}
}

func TestComputeOldServiceSlicesReplaced(t *testing.T) {
	c := newCluster()
	converge(t, c, Input{Service: service("a", "web"), Workloads: workloads("a", 3)})
	recreated := service("a", "web", func(o *watcherv1.Object) { o.Meta.Uid = "new-uid" })
	p := converge(t, c, Input{Service: recreated, Workloads: workloads("a", 3)})
	if len(p.Create) != 1 || len(p.Delete) != 1 || len(p.Update) != 0 {
		t.Fatalf("%d/%d/%d writes, want the old Service's slice replaced", len(p.Create), len(p.Update), len(p.Delete))
	}
	if string(p.Create[0].OwnerReferences[0].UID) != "new-uid" {
		t.Fatalf("owner %v", p.Create[0].OwnerReferences)
	}
}

func TestComputePortChangeRecyclesSlice(t *testing.T) {
	c := newCluster()
	converge(t, c, Input{Service: service("a", "web"), Workloads: workloads("a", 3)})
	svc := service("a", "web", withPorts(&watcherv1.ServicePort{Name: "http", Protocol: "TCP", Port: 80, TargetPortNumber: 8081}))
	p := converge(t, c, Input{Service: svc, Workloads: workloads("a", 3)})
	if len(p.Update) != 1 || len(p.Create)+len(p.Delete) != 0 {
		t.Fatalf("%d/%d/%d writes, want the slice updated in place", len(p.Create), len(p.Update), len(p.Delete))
	}
}

func TestComputeDeterministicNames(t *testing.T) {
	in := Input{Service: service("a", "web"), Workloads: workloads("a", 150)}
	a, b := Compute(in), Compute(in)
	if len(a.Create) != 2 || a.Create[0].Name != b.Create[0].Name || a.Create[1].Name != b.Create[1].Name {
		t.Fatalf("names differ between identical plans")
	}
	if a.Create[0].Name == a.Create[1].Name {
		t.Fatalf("two creates share name %s", a.Create[0].Name)
	}
	in.TakenNames = []string{a.Create[0].Name}
	c := Compute(in)
	for _, s := range c.Create {
		if s.Name == a.Create[0].Name {
			t.Fatalf("create reuses taken name %s", s.Name)
		}
	}
}

func TestComputeDuplicateEndpointsAreRemoved(t *testing.T) {
	// Two slices holding the same endpoint (e.g. from an earlier stale view):
	// it stays in one; the other slice goes.
	c := newCluster()
	converge(t, c, Input{Service: service("a", "web"), Workloads: workloads("a", 2)})
	var only *discoveryv1.EndpointSlice
	for _, s := range c.slices {
		only = s
	}
	dup := only.DeepCopy()
	dup.Name = only.Name + "-dup"
	c.slices[dup.Name] = dup
	p := converge(t, c, Input{Service: service("a", "web"), Workloads: workloads("a", 2)})
	if len(p.Delete) != 1 || len(c.slices) != 1 {
		t.Fatalf("%d deletes, %d slices left", len(p.Delete), len(c.slices))
	}
}

func TestComputeDeletingServiceCreatesNothing(t *testing.T) {
	svc := service("a", "web", func(o *watcherv1.Object) { o.Meta.DeletionTimestamp = 1 })
	if p := Compute(Input{Service: svc, Workloads: workloads("a", 3)}); len(p.Create) != 0 {
		t.Fatalf("%d creates for a Service being deleted", len(p.Create))
	}
}

func TestSliceFromObjectRoundTrip(t *testing.T) {
	p := Compute(Input{Service: service("a", "web", withFamilies("IPv4")), Workloads: []*watcherv1.Object{
		workload("a", "vm-1", []string{"192.0.2.1"}, zone("z1")),
		workload("a", "vm-2", []string{"192.0.2.2"}, notReady),
	}, TriggerTime: time.Unix(1, 0)})
	s := p.Create[0]
	o := objectFromSlice(s)
	back := SliceFromObject(o)
	back.ResourceVersion = "1"
	in := Input{Service: service("a", "web"), Workloads: []*watcherv1.Object{
		workload("a", "vm-1", []string{"192.0.2.1"}, zone("z1")),
		workload("a", "vm-2", []string{"192.0.2.2"}, notReady),
	}, Existing: []*discoveryv1.EndpointSlice{back}}
	if again := Compute(in); again.Writes() != 0 {
		t.Fatalf("a slice read back from the stream is not seen as up to date: %+v", again)
	}
	if ServiceKeyOfSlice(o) != "a/web" {
		t.Fatalf("ServiceKeyOfSlice = %q", ServiceKeyOfSlice(o))
	}
}

// objectFromSlice is what the watcher streams for a slice.
func objectFromSlice(s *discoveryv1.EndpointSlice) *watcherv1.Object {
	es := &watcherv1.EndpointSlice{AddressType: string(s.AddressType)}
	for _, p := range s.Ports {
		es.Ports = append(es.Ports, &watcherv1.EndpointPort{Name: strOf(p.Name), Protocol: string(protocolOf(p.Protocol)), Port: int32Of(p.Port), AppProtocol: strOf(p.AppProtocol)})
	}
	for _, e := range s.Endpoints {
		es.Endpoints = append(es.Endpoints, &watcherv1.Endpoint{
			Addresses: e.Addresses, Ready: boolOf(e.Conditions.Ready), Serving: boolOf(e.Conditions.Serving),
			Terminating: boolOf(e.Conditions.Terminating), Zone: strOf(e.Zone),
			TargetRefKind: e.TargetRef.Kind, TargetRefName: e.TargetRef.Name, TargetRefNamespace: e.TargetRef.Namespace, TargetRefUid: string(e.TargetRef.UID),
		})
	}
	m := &watcherv1.ObjectMeta{Namespace: s.Namespace, Name: s.Name, Labels: s.Labels, Annotations: s.Annotations}
	for _, r := range s.OwnerReferences {
		m.OwnerReferences = append(m.OwnerReferences, &watcherv1.OwnerReference{ApiVersion: r.APIVersion, Kind: r.Kind, Name: r.Name, Uid: string(r.UID), Controller: boolOf(r.Controller)})
	}
	return &watcherv1.Object{Kind: watcherv1.Kind_KIND_ENDPOINT_SLICE, Meta: m, Body: &watcherv1.Object_EndpointSlice{EndpointSlice: es}}
}

func BenchmarkComputeUnchanged(b *testing.B) { benchComputeUnchanged(b, nil, 1000) }

// benchComputeUnchanged times the plan of a Service of 1,000 workloads whose
// slices are already what it wants, with refuse as Input.Refuse; want is the
// endpoints the plan must count.
func benchComputeUnchanged(b *testing.B, refuse func(netip.Addr) string, want int) {
	c := newCluster()
	in := Input{Service: service("a", "web"), Workloads: workloads("a", 1000), Refuse: refuse}
	p := Compute(in)
	if p.Endpoints != want {
		b.Fatalf("%d endpoints, want %d", p.Endpoints, want)
	}
	for _, s := range p.Create {
		c.slices[s.Name] = s
	}
	in.Existing = c.list()
	b.ReportAllocs()
	for b.Loop() {
		if Compute(in).Writes() != 0 {
			b.Fatal("writes")
		}
	}
}

func TestWorkloadReady(t *testing.T) {
	probe := &watcherv1.ReadinessProbe{Action: &watcherv1.ReadinessProbe_TcpSocket{TcpSocket: &watcherv1.TCPSocketAction{Port: 22}},
		PeriodSeconds: 10, TimeoutSeconds: 1, SuccessThreshold: 1, FailureThreshold: 3}
	cond := func(status string) []*watcherv1.Condition {
		return []*watcherv1.Condition{{Type: "Other", Status: "False"}, {Type: "Ready", Status: status}}
	}
	cases := []struct {
		name  string
		ew    *watcherv1.ExternalWorkload
		ready bool
	}{
		{"no probe, no condition: ready, as a Pod without a readiness probe", &watcherv1.ExternalWorkload{}, true},
		{"no probe, other conditions only: ready", &watcherv1.ExternalWorkload{Conditions: []*watcherv1.Condition{{Type: "Other", Status: "False"}}}, true},
		{"no probe, Ready=True", &watcherv1.ExternalWorkload{Conditions: cond("True")}, true},
		{"no probe, Ready=False", &watcherv1.ExternalWorkload{Conditions: cond("False")}, false},
		{"no probe, Ready=Unknown", &watcherv1.ExternalWorkload{Conditions: cond("Unknown")}, false},
		{"probe, no condition yet: not ready until it passes", &watcherv1.ExternalWorkload{ReadinessProbe: probe}, false},
		{"probe, Ready=True", &watcherv1.ExternalWorkload{ReadinessProbe: probe, Conditions: cond("True")}, true},
		{"probe, Ready=False", &watcherv1.ExternalWorkload{ReadinessProbe: probe, Conditions: cond("False")}, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := WorkloadReady(tc.ew); got != tc.ready {
				t.Fatalf("WorkloadReady = %v, want %v", got, tc.ready)
			}
		})
	}
}

func TestAddressRefused(t *testing.T) {
	cases := []struct {
		addr    string
		refused bool
	}{
		{"192.0.2.1", false},
		{"10.1.2.3", false},
		{"2001:db8::1", false},
		{"127.0.0.1", true},
		{"127.1.2.3", true},
		{"::1", true},
		{"0.0.0.0", true},
		{"::", true},
		{"169.254.169.254", true},
		{"fe80::1", true},
		{"224.0.0.1", true},
		{"ff02::1", true},
		{"::ffff:127.0.0.1", true},
	}
	for _, tc := range cases {
		t.Run(tc.addr, func(t *testing.T) {
			reason := AddressRefused(netip.MustParseAddr(tc.addr))
			if (reason != "") != tc.refused {
				t.Fatalf("AddressRefused(%s) = %q, want refused %v", tc.addr, reason, tc.refused)
			}
		})
	}
}

// A workload with an address no EndpointSlice may hold (the API server
// refuses the whole slice) is left out with a reason; the Service's other
// workloads still get their endpoints.
func TestComputeSkipsAddressesSlicesRefuse(t *testing.T) {
	p := Compute(Input{
		Service: service("a", "web", withFamilies("IPv4", "IPv6")),
		Workloads: []*watcherv1.Object{
			workload("a", "vm-ok", []string{"192.0.2.1"}),
			workload("a", "vm-loop", []string{"127.0.0.1"}),
			workload("a", "vm-meta", []string{"169.254.169.254", "2001:db8::9"}),
		},
	})
	var eps []string
	for _, s := range p.Create {
		for _, e := range s.Endpoints {
			eps = append(eps, e.TargetRef.Name+" "+e.Addresses[0])
		}
	}
	slices.Sort(eps)
	if want := []string{"vm-meta 2001:db8::9", "vm-ok 192.0.2.1"}; !slices.Equal(eps, want) {
		t.Fatalf("endpoints %v, want %v", eps, want)
	}
	if len(p.Skipped) != 1 || p.Skipped[0].Workload != "vm-loop" || !strings.Contains(p.Skipped[0].Reason, "127.0.0.1") ||
		!strings.Contains(p.Skipped[0].Reason, "loopback") {
		t.Fatalf("skipped %+v, want vm-loop with its loopback address named", p.Skipped)
	}
}

// BenchmarkComputeUnchangedClusterChecked is BenchmarkComputeUnchanged with
// every address checked against the cluster's own networks of a 1,000-Node
// cluster (a Pod range and an address each, a Service range): the cost of
// the range checks, as a ratio to BenchmarkComputeUnchanged in the same run.
func BenchmarkComputeUnchangedClusterChecked(b *testing.B) {
	var nodes []*watcherv1.Object
	for i := range 1000 {
		nodes = append(nodes, &watcherv1.Object{Kind: watcherv1.Kind_KIND_NODE, Meta: &watcherv1.ObjectMeta{Name: fmt.Sprintf("n%d", i)},
			Body: &watcherv1.Object_Node{Node: &watcherv1.Node{PodCidrs: []string{fmt.Sprintf("10.%d.%d.0/24", 128+i/256, i%256)},
				Addresses: []*watcherv1.NodeAddress{{Type: "InternalIP", Address: fmt.Sprintf("172.16.%d.%d", i/256, i%256)}}}}})
	}
	nets := clusternet.Learn(nodes, []*watcherv1.Object{{Kind: watcherv1.Kind_KIND_SERVICE_CIDR, Meta: &watcherv1.ObjectMeta{Name: "kubernetes"},
		Body: &watcherv1.Object_ServiceCidr{ServiceCidr: &watcherv1.ServiceCIDR{Cidrs: []string{"10.96.0.0/12"}}}}}, nil)
	// One of the workloads is at 192.0.0.192, Oracle Cloud's legacy
	// metadata address: refused by the built-in rule.
	benchComputeUnchanged(b, func(a netip.Addr) string { return nets.Slice(a, probepolicy.Policy{}).Message }, 999)
}
