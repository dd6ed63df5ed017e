package announce

import (
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	watcherv1 "github.com/ipledger/ipledger/proto/ipledger/watcher/v1"
	"github.com/ipledger/ipledger/services/ipam/internal/allocator"
)

var t0 = time.Date(2026, 12, 7, 4, 0, 0, 0, time.UTC)

const ns = "metallb-system"

func pool(name string, labels map[string]string, addrs ...string) *watcherv1.Object {
	return &watcherv1.Object{Kind: watcherv1.Kind_KIND_METALLB_IP_ADDRESS_POOL, Meta: &watcherv1.ObjectMeta{Namespace: ns, Name: name, Labels: labels},
		Body: &watcherv1.Object_MetallbIpAddressPool{MetallbIpAddressPool: &watcherv1.MetalLBIPAddressPool{Addresses: addrs}}}
}

func adv(kind watcherv1.Kind, name string, a *watcherv1.MetalLBAdvertisement) *watcherv1.Object {
	return &watcherv1.Object{Kind: kind, Meta: &watcherv1.ObjectMeta{Namespace: ns, Name: name},
		Body: &watcherv1.Object_MetallbAdvertisement{MetallbAdvertisement: a}}
}

func l2(name string, pools ...string) *watcherv1.Object {
	return adv(watcherv1.Kind_KIND_METALLB_L2_ADVERTISEMENT, name, &watcherv1.MetalLBAdvertisement{IpAddressPools: pools})
}

func statusObj(kind watcherv1.Kind, name, node, svcNS, svcName string, created time.Time, peers ...string) *watcherv1.Object {
	return &watcherv1.Object{Kind: kind, Meta: &watcherv1.ObjectMeta{Namespace: ns, Name: name, CreationTimestamp: created.UnixNano()},
		Body: &watcherv1.Object_MetallbServiceStatus{MetallbServiceStatus: &watcherv1.MetalLBServiceStatus{
			Node: node, ServiceNamespace: svcNS, ServiceName: svcName, Peers: peers}}}
}

func l2Status(name, node string, created time.Time) *watcherv1.Object {
	return statusObj(watcherv1.Kind_KIND_METALLB_SERVICE_L2_STATUS, name, node, "shop", "web", created)
}

func ipledgerPool(t *testing.T, name string, addrs ...string) *allocator.Pool {
	t.Helper()
	p, err := allocator.ParsePool(name, allocator.PoolSpec{Addresses: addrs})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestDecide(t *testing.T) {
	ip := netip.MustParseAddr("10.190.77.66")
	web := Service{Namespace: "shop", Name: "web", Labels: map[string]string{"tier": "front"}, IPs: []netip.Addr{ip}}
	lan := ipledgerPool(t, "ipledger-lan", "10.190.77.64/28")
	cases := []struct {
		name     string
		metalLB  []*watcherv1.Object
		leases   []Lease
		svc      Service
		now      time.Time
		state    State
		served   bool
		node     string
		since    time.Time
		announce string
		message  string // a part of the message
	}{
		{name: "nothing installed", svc: web, state: NoAnnouncer, message: "no announcer found: neither MetalLB"},
		{name: "MetalLB L2 with its status", metalLB: []*watcherv1.Object{pool("lan", nil, "10.190.77.64/28"), l2("lan-l2", "lan"), l2Status("l2-x", "n1", t0)},
			svc: web, state: Announced, served: true, node: "n1", since: t0, announce: MetalLBL2,
			message: "announced by MetalLB L2 from node n1 since 2026-12-07T04:00:00Z (ServiceL2Status metallb-system/l2-x; L2Advertisement lan-l2)"},
		{name: "the newest status wins during a failover", metalLB: []*watcherv1.Object{pool("lan", nil, "10.190.77.64/28"), l2("lan-l2", "lan"),
			l2Status("l2-old", "n1", t0), l2Status("l2-new", "n2", t0.Add(time.Minute))},
			svc: web, state: Announced, served: true, node: "n2", since: t0.Add(time.Minute), announce: MetalLBL2, message: "from node n2"},
		{name: "no advertisement covers the pool", metalLB: []*watcherv1.Object{pool("lan", nil, "10.190.77.64/28"), l2("other-l2", "other")},
			svc: web, state: NotAnnounced, served: true, announce: MetalLBL2,
			message: "not announced: no L2Advertisement or BGPAdvertisement in metallb-system covers MetalLB IPAddressPool lan"},
		{name: "a status without an advertisement is stale", metalLB: []*watcherv1.Object{pool("lan", nil, "10.190.77.64/28"), l2Status("l2-x", "n1", t0)},
			svc: web, state: NotAnnounced, served: true, announce: MetalLBL2, message: "no L2Advertisement or BGPAdvertisement"},
		{name: "an advertisement in another namespace does not count", metalLB: []*watcherv1.Object{pool("lan", nil, "10.190.77.64/28"),
			{Kind: watcherv1.Kind_KIND_METALLB_L2_ADVERTISEMENT, Meta: &watcherv1.ObjectMeta{Namespace: "elsewhere", Name: "l2"},
				Body: &watcherv1.Object_MetallbAdvertisement{MetallbAdvertisement: &watcherv1.MetalLBAdvertisement{}}}},
			svc: web, state: NotAnnounced, served: true, announce: MetalLBL2, message: "covers MetalLB IPAddressPool lan"},
		{name: "an advertisement with no pools named covers every pool", metalLB: []*watcherv1.Object{pool("lan", nil, "10.190.77.64/28"), l2("all"), l2Status("l2-x", "n1", t0)},
			svc: web, state: Announced, served: true, node: "n1", since: t0, announce: MetalLBL2, message: "L2Advertisement all"},
		{name: "pool selectors", metalLB: []*watcherv1.Object{pool("lan", map[string]string{"net": "lan"}, "10.190.77.64/28"),
			adv(watcherv1.Kind_KIND_METALLB_L2_ADVERTISEMENT, "by-label", &watcherv1.MetalLBAdvertisement{IpAddressPoolSelectors: []*watcherv1.LabelSelector{{MatchLabels: map[string]string{"net": "lan"}}}}),
			l2Status("l2-x", "n1", t0)},
			svc: web, state: Announced, served: true, node: "n1", since: t0, announce: MetalLBL2, message: "L2Advertisement by-label"},
		{name: "service selectors exclude the Service", metalLB: []*watcherv1.Object{pool("lan", nil, "10.190.77.64/28"),
			adv(watcherv1.Kind_KIND_METALLB_L2_ADVERTISEMENT, "back-only", &watcherv1.MetalLBAdvertisement{ServiceSelectors: []*watcherv1.LabelSelector{{MatchLabels: map[string]string{"tier": "back"}}}})},
			svc: web, state: NotAnnounced, served: true, announce: MetalLBL2, message: "spec.serviceSelectors"},
		{name: "covered but no speaker reports it", metalLB: []*watcherv1.Object{pool("lan", nil, "10.190.77.64/28"), l2("lan-l2", "lan")},
			svc: web, state: NotAnnounced, served: true, announce: MetalLBL2,
			message: "not announced: L2Advertisement lan-l2 covers MetalLB IPAddressPool lan, but no speaker reports announcing it (no ServiceL2Status for shop/web)"},
		{name: "BGP with its status", metalLB: []*watcherv1.Object{pool("lan", nil, "10.190.77.64/28"),
			adv(watcherv1.Kind_KIND_METALLB_BGP_ADVERTISEMENT, "bgp", &watcherv1.MetalLBAdvertisement{}),
			statusObj(watcherv1.Kind_KIND_METALLB_SERVICE_BGP_STATUS, "bgp-x", "n3", "shop", "web", t0, "tor1", "tor2")},
			svc: web, state: Announced, served: true, node: "n3", since: t0, announce: MetalLBBGP, message: "to peers tor1, tor2"},
		{name: "BGP without a status", metalLB: []*watcherv1.Object{pool("lan", nil, "10.190.77.64/28"), adv(watcherv1.Kind_KIND_METALLB_BGP_ADVERTISEMENT, "bgp", &watcherv1.MetalLBAdvertisement{})},
			svc: web, state: NotAnnounced, served: true, announce: MetalLBBGP, message: "no ServiceBGPStatus"},
		{name: "no MetalLB pool, but MetalLB serves the IPPool elsewhere", metalLB: []*watcherv1.Object{pool("half", nil, "10.190.77.64-10.190.77.65"), l2("l2")},
			svc: web, state: NotAnnounced, served: true, announce: MetalLBL2,
			message: "not announced: MetalLB IPAddressPool missing for 10.190.77.66 (MetalLB announces only addresses of its pools: create one covering ipledger's IPPool with autoAssign: false, as `kubectl ipledger announce metallb` prints); MetalLB IPAddressPool metallb-system/half holds other addresses of IPPool ipledger-lan"},
		{name: "no MetalLB pool near the IPPool: nobody known", metalLB: []*watcherv1.Object{pool("far", nil, "192.0.2.0/28"), l2("l2")},
			svc: web, state: NoAnnouncer, message: "no announcer found: MetalLB IPAddressPool missing for 10.190.77.66"},
		{name: "a pool that does not parse is named", metalLB: []*watcherv1.Object{pool("typo", nil, "10.190.77.0/33")},
			svc: web, state: NoAnnouncer, message: "IPAddressPool metallb-system/typo does not parse"},
		{name: "Cilium's Lease", leases: []Lease{{Namespace: "kube-system", Name: "cilium-l2announce-shop-web", Holder: "n4", Acquired: t0, Renewed: t0.Add(time.Minute), Duration: 15 * time.Second}},
			svc: web, now: t0.Add(time.Minute + time.Second), state: Announced, served: true, node: "n4", since: t0, announce: CiliumL2,
			message: "announced by Cilium L2 from node n4 since 2026-12-07T04:00:00Z (Lease kube-system/cilium-l2announce-shop-web)"},
		{name: "Cilium's Lease expired", leases: []Lease{{Namespace: "kube-system", Name: "cilium-l2announce-shop-web", Holder: "n4", Acquired: t0, Renewed: t0, Duration: 15 * time.Second}},
			svc: web, now: t0.Add(time.Minute), state: NotAnnounced, served: true, announce: CiliumL2, message: "has no live holder"},
		{name: "Cilium's Lease released", leases: []Lease{{Namespace: "kube-system", Name: "cilium-l2announce-shop-web", Renewed: t0}},
			svc: web, now: t0, state: NotAnnounced, served: true, announce: CiliumL2, message: "CiliumL2AnnouncementPolicy"},
		{name: "another Service's Lease", leases: []Lease{{Namespace: "kube-system", Name: "cilium-l2announce-shop-api", Holder: "n4"}},
			svc: web, state: NoAnnouncer, message: "no announcer found"},
		{name: "kube-vip's annotation", svc: Service{Namespace: "shop", Name: "web", IPs: []netip.Addr{ip}, KubeVIPHost: "n5"},
			state: Announced, node: "n5", announce: KubeVIP, message: "announced by kube-vip from node n5 (the Service's kube-vip.io/vipHost annotation)"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := NewWorld(c.metalLB, c.leases, []*allocator.Pool{lan}).Decide(c.svc, c.now)
			if len(got) != 1 {
				t.Fatalf("%d verdicts, want 1", len(got))
			}
			v := got[0]
			if v.IP != ip || v.State != c.state || v.Served != c.served || v.Node != c.node || !v.Since.Equal(c.since) || v.Announcer != c.announce {
				t.Errorf("verdict %+v, want state %v served %v node %q since %v announcer %q", v, c.state, c.served, c.node, c.since, c.announce)
			}
			if !strings.Contains(v.Message, c.message) {
				t.Errorf("message %q lacks %q", v.Message, c.message)
			}
		})
	}
}

func TestIdentityChangesWithNodeOrStart(t *testing.T) {
	a := Verdict{State: Announced, Announcer: MetalLBL2, Node: "n1", Since: t0}
	moved, restarted := a, a
	moved.Node = "n2"
	restarted.Since = t0.Add(time.Minute)
	if a.Identity() == moved.Identity() || a.Identity() == restarted.Identity() {
		t.Errorf("identities %q %q %q, want all different", a.Identity(), moved.Identity(), restarted.Identity())
	}
	if (Verdict{State: NotAnnounced, Node: "n1"}).Identity() != "" {
		t.Error("a verdict not announced has an identity")
	}
}

// TestCiliumLeaseFromTheStream: a streamed Lease reads as Cilium wrote it;
// its Services are every split of its name; the next expiry is the first
// held Lease's to lapse after now.
func TestCiliumLeaseFromTheStream(t *testing.T) {
	obj := &watcherv1.Object{Kind: watcherv1.Kind_KIND_CILIUM_L2_ANNOUNCEMENT_LEASE,
		Meta: &watcherv1.ObjectMeta{Namespace: "kube-system", Name: "cilium-l2announce-shop-web"},
		Body: &watcherv1.Object_Lease{Lease: &watcherv1.Lease{HolderIdentity: "n1", AcquireTime: t0.UnixNano(), RenewTime: t0.Add(time.Minute).UnixNano(), LeaseDurationSeconds: 15}}}
	want := Lease{Namespace: "kube-system", Name: "cilium-l2announce-shop-web", Holder: "n1", Acquired: t0, Renewed: t0.Add(time.Minute), Duration: 15 * time.Second}
	if got := LeaseOf(obj); got != want {
		t.Errorf("LeaseOf = %+v, want %+v", got, want)
	}

	for name, want := range map[string][]string{
		"cilium-l2announce-shop-web":  {"shop/web"},
		"cilium-l2announce-a-b-c":     {"a/b-c", "a-b/c"},
		"cilium-l2announce-shop":      nil,
		"cilium-l2announce--x":        nil,
		"kube-controller-manager":     nil,
		"cilium-l2announce-team-a-db": {"team/a-db", "team-a/db"},
	} {
		if got := CiliumLeaseServices(name); !slices.Equal(got, want) {
			t.Errorf("CiliumLeaseServices(%q) = %q, want %q", name, got, want)
		}
	}

	held := func(name string, renewed time.Time) Lease {
		return Lease{Namespace: "kube-system", Name: name, Holder: "n1", Renewed: renewed, Duration: 15 * time.Second}
	}
	w := NewWorld(nil, []Lease{held("cilium-l2announce-a-x", t0), held("cilium-l2announce-a-y", t0.Add(5*time.Second)),
		{Name: "cilium-l2announce-a-released", Renewed: t0}}, nil)
	for _, c := range []struct {
		now  time.Time
		want time.Time
		ok   bool
	}{
		{t0, t0.Add(15 * time.Second), true},
		{t0.Add(15 * time.Second), t0.Add(20 * time.Second), true},
		{t0.Add(20 * time.Second), time.Time{}, false},
	} {
		if at, ok := w.NextExpiry(c.now); ok != c.ok || !at.Equal(c.want) {
			t.Errorf("NextExpiry(%v) = %v, %v; want %v, %v", c.now, at, ok, c.want, c.ok)
		}
	}
}

// BenchmarkDecide10000: a full pass of the tracker's decisions over 10,000
// Services, each announced by MetalLB L2 (parsing the World included).
func BenchmarkDecide10000(b *testing.B) {
	objs := []*watcherv1.Object{pool("lan", nil, "10.64.0.0/16"), l2("lan-l2", "lan")}
	var svcs []Service
	for i := range 10000 {
		name := "s" + strconv.Itoa(i)
		objs = append(objs, statusObj(watcherv1.Kind_KIND_METALLB_SERVICE_L2_STATUS, "l2-"+name, "n1", "shop", name, t0))
		svcs = append(svcs, Service{Namespace: "shop", Name: name, IPs: []netip.Addr{netip.AddrFrom4([4]byte{10, 64, byte(i >> 8), byte(i)})}})
	}
	b.ResetTimer()
	for b.Loop() {
		w := NewWorld(objs, nil, nil)
		for _, s := range svcs {
			if v := w.Decide(s, t0); v[0].State != Announced {
				b.Fatal(v)
			}
		}
	}
}
