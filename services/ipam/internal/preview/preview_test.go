package preview

import (
	"errors"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	ipamv1 "github.com/ipledger/ipledger/proto/ipledger/ipam/v1"
	watcherv1 "github.com/ipledger/ipledger/proto/ipledger/watcher/v1"
	"github.com/ipledger/ipledger/services/ipam/internal/ledger"
	"github.com/ipledger/ipledger/services/ipam/internal/objects"
)

var now = time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)

func pool(name string, created int64, addrs ...string) *watcherv1.Object {
	return &watcherv1.Object{Kind: watcherv1.Kind_KIND_IP_POOL,
		Meta: &watcherv1.ObjectMeta{Name: name, Uid: "uid-" + name, CreationTimestamp: created * int64(time.Second), Generation: 1,
			Finalizers: []string{objects.PoolFinalizer}},
		Body: &watcherv1.Object_IpPool{IpPool: &watcherv1.IPPool{Addresses: addrs, AutoAssign: true}}}
}

// service is a LoadBalancer Service of ns "web"; with ips, its status
// shows them (reason Allocated from pool), else it is pending with reason.
func service(name string, created int64, pool, reason string, ips ...string) *watcherv1.Object {
	svc := &watcherv1.Service{Type: "LoadBalancer", IpFamilyPolicy: "SingleStack", IpFamilies: []string{"IPv4"},
		Ports: []*watcherv1.ServicePort{{Name: "http", Protocol: "TCP", Port: 80}}}
	for _, ip := range ips {
		svc.Ingress = append(svc.Ingress, &watcherv1.LoadBalancerIngress{Ip: ip, IpMode: "VIP"})
	}
	status := "False"
	if len(ips) > 0 {
		status = "True"
	}
	svc.Conditions = []*watcherv1.Condition{{Type: objects.ConditionType, Status: status, Reason: reason, LastTransitionTime: 1}}
	meta := &watcherv1.ObjectMeta{Namespace: "web", Name: name, Uid: "uid-" + name, CreationTimestamp: created}
	if pool != "" {
		meta.Annotations = map[string]string{"ipledger.io/allocated-from-pool": pool}
	}
	return &watcherv1.Object{Kind: watcherv1.Kind_KIND_SERVICE, Meta: meta, Body: &watcherv1.Object_Service{Service: svc}}
}

// world is pool "p" holding a, b, c with 10.0.0.0-2 and d pending.
func world(addrs ...string) Inputs {
	var allocs []ledger.Allocation
	var svcs []*watcherv1.Object
	for i, name := range []string{"a", "b", "c"} {
		ip := netip.AddrFrom4([4]byte{10, 0, 0, byte(i)})
		allocs = append(allocs, ledger.Allocation{IP: ip, Pool: "p", Service: ledger.ServiceRef{Namespace: "web", Name: name, UID: "uid-" + name}})
		svcs = append(svcs, service(name, int64(i+1), "p", "Allocated", ip.String()))
	}
	svcs = append(svcs, service("d", 4, "", "PoolExhausted"))
	return Inputs{
		Ledger: ledger.State{Allocations: allocs}, Pools: []*watcherv1.Object{pool("p", 1, addrs...)}, Services: svcs,
		PoolSet: &objects.PoolSet{}, Class: objects.Class{Name: objects.DefaultLBClass}, Now: now,
	}
}

func manifest(t *testing.T, yaml string, del bool) Change {
	t.Helper()
	c, err := Parse([]byte(yaml), del)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// services renders previews as "ns/name ips reason", sorted.
func services(ss []*ipamv1.ServicePreview) string {
	var out []string
	for _, s := range ss {
		out = append(out, s.GetService().GetName()+" "+strings.Join(s.GetIpsAfter(), ",")+" "+s.GetReasonAfter())
	}
	slices.Sort(out)
	return strings.Join(out, "; ")
}

// pools renders pool previews as "name state used/total -> state used/total held before->after".
func pools(ps []*ipamv1.PoolPreview) string {
	var out []string
	for _, p := range ps {
		out = append(out, p.GetName()+" "+p.GetStateBefore()+" "+p.GetIpv4Before().GetUsed()+"/"+p.GetIpv4Before().GetTotal()+
			" -> "+p.GetStateAfter()+" "+p.GetIpv4After().GetUsed()+"/"+p.GetIpv4After().GetTotal()+
			" held "+strconv.FormatInt(p.GetHeldOutsideBefore(), 10)+"->"+strconv.FormatInt(p.GetHeldOutsideAfter(), 10))
	}
	return strings.Join(out, "; ")
}

func TestRun(t *testing.T) {
	const p30 = "apiVersion: ipledger.io/v1alpha1\nkind: IPPool\nmetadata: {name: p}\nspec: {addresses: [10.0.0.0/30]}\n"
	cases := []struct {
		name   string
		in     Inputs
		yaml   string
		del    bool
		change string
		// allocated, heldOutside and other are services(); pools is pools().
		allocated, heldOutside, other, pools string
		summary                              string // a line of the summary contains it
	}{
		{
			name: "growing a full pool gives the pending Service an address", in: world("10.0.0.0-10.0.0.2"), yaml: p30, change: Update,
			allocated: "d 10.0.0.3 Allocated", pools: "p Serving 3/3 -> Serving 4/4 held 0->0",
			summary: "1 pending Service would get an address: web/d 10.0.0.3",
		},
		{
			name: "shrinking under allocated Services holds them outside the pool", in: world("10.0.0.0/30"),
			yaml:   "apiVersion: ipledger.io/v1alpha1\nkind: IPPool\nmetadata: {name: p}\nspec: {addresses: [10.0.0.0/31]}\n",
			change: Update, heldOutside: "c 10.0.0.2 HeldOutsidePool", pools: "p Serving 3/4 -> Serving 2/2 held 0->1",
			summary: "1 Service would keep its addresses outside its pool",
		},
		{
			name: "a new pool overlapping an older one is Conflicting and serves nothing", in: world("10.0.0.0-10.0.0.2"),
			yaml:   `{"apiVersion":"ipledger.io/v1alpha1","kind":"IPPool","metadata":{"name":"q"},"spec":{"addresses":["10.0.0.0/24"]}}`,
			change: Create, pools: "q Absent 0/0 -> Conflicting 0/256 held 0->0",
			summary: "Pool q would be Conflicting and serve nothing: addresses 10.0.0.0-10.0.0.255 overlap 10.0.0.0-10.0.0.2 of the older pool p",
		},
		{
			name: "a new pool beside the full one serves the pending Service", in: world("10.0.0.0-10.0.0.2"),
			yaml:   "apiVersion: ipledger.io/v1alpha1\nkind: IPPool\nmetadata: {name: q}\nspec: {addresses: [10.0.1.0/30]}\n",
			change: Create, allocated: "d 10.0.1.0 Allocated", pools: "q Absent 0/0 -> Serving 1/4 held 0->0",
		},
		{
			name: "deleting a pool Services hold keeps it Terminating; the pending Service finds no pool", in: world("10.0.0.0-10.0.0.2"),
			yaml: "apiVersion: ipledger.io/v1alpha1\nkind: IPPool\nmetadata: {name: p}\n", del: true, change: Delete,
			other: "d  NoMatchingPool", pools: "p Serving 3/3 -> Terminating 3/3 held 0->0",
			summary: "Pool p would stay Terminating, handing out nothing new, while 3 Services hold its addresses",
		},
		{
			name: "deleting a pool nobody holds removes it", in: func() Inputs {
				in := world("10.0.0.0-10.0.0.2")
				in.Pools = append(in.Pools, pool("q", 2, "10.0.9.0/30"))
				return in
			}(),
			yaml: "apiVersion: ipledger.io/v1alpha1\nkind: IPPool\nmetadata: {name: q}\n", del: true, change: Delete,
			pools: "q Serving 0/4 -> Absent 0/0 held 0->0", summary: "Pool q would be removed",
		},
		{
			name: "an exclusion over a held address leaves it with its Service", in: world("10.0.0.0/30"),
			yaml:   "apiVersion: ipledger.io/v1alpha1\nkind: IPPool\nmetadata: {name: p}\nspec: {addresses: [10.0.0.0/30], exclude: [10.0.0.2-10.0.0.3]}\n",
			change: Update, heldOutside: "c 10.0.0.2 HeldOutsidePool", pools: "p Serving 3/4 -> Serving 2/2 held 0->1",
			summary: "1 Service would keep its addresses outside its pool (HeldOutsidePool; nothing is moved): web/c 10.0.0.2",
		},
		{
			name: "skipFirstLastIPs over a held first address leaves it with its Service", in: world("10.0.0.0/30"),
			yaml:   "apiVersion: ipledger.io/v1alpha1\nkind: IPPool\nmetadata: {name: p}\nspec: {addresses: [10.0.0.0/30], skipFirstLastIPs: true}\n",
			change: Update, heldOutside: "a 10.0.0.0 HeldOutsidePool", pools: "p Serving 3/4 -> Serving 2/2 held 0->1",
			summary: "web/a 10.0.0.0",
		},
		{
			name: "the same spec changes nothing", in: world("10.0.0.0-10.0.0.2"), change: NoChange,
			yaml:  "apiVersion: ipledger.io/v1alpha1\nkind: IPPool\nmetadata: {name: p}\nspec: {addresses: [10.0.0.0-10.0.0.2]}\n",
			pools: "p Serving 3/3 -> Serving 3/3 held 0->0", summary: "Nothing would change",
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			resp, err := Run(tc.in, manifest(t, tc.yaml, tc.del))
			if err != nil {
				t.Fatal(err)
			}
			if resp.GetChange() != tc.change || len(resp.GetValidationErrors()) > 0 {
				t.Errorf("change = %s (errors %v), want %s", resp.GetChange(), resp.GetValidationErrors(), tc.change)
			}
			for _, f := range []struct{ what, got, want string }{
				{"allocated", services(resp.GetAllocated()), tc.allocated},
				{"held outside", services(resp.GetHeldOutside()), tc.heldOutside},
				{"other changes", services(resp.GetOtherChanges()), tc.other},
				{"pools", pools(resp.GetPools()), tc.pools},
			} {
				if f.got != f.want {
					t.Errorf("%s:\n got %q\nwant %q", f.what, f.got, f.want)
				}
			}
			if s := strings.Join(resp.GetSummary(), "\n"); !strings.Contains(s, tc.summary) {
				t.Errorf("summary does not say %q:\n%s", tc.summary, s)
			}
		})
	}
}

// The pending Service's reason is what the leader would write, message
// and all, and the Service that keeps its address is told why.
func TestRunSaysWhatTheLeaderWrites(t *testing.T) {
	resp, err := Run(world("10.0.0.0/30"), manifest(t, "apiVersion: ipledger.io/v1alpha1\nkind: IPPool\nmetadata: {name: p}\nspec: {addresses: [10.0.0.0/31]}\n", false))
	if err != nil {
		t.Fatal(err)
	}
	c := resp.GetHeldOutside()[0]
	if c.GetPoolAfter() != "p" || !strings.Contains(c.GetMessageAfter(), "Keeps 10.0.0.2, held outside its pool: 10.0.0.2 is no longer in any serving IPPool") {
		t.Errorf("held outside: pool %q message %q", c.GetPoolAfter(), c.GetMessageAfter())
	}
	d := resp.GetOtherChanges()
	if len(d) != 0 {
		t.Errorf("other changes: %v (d stays PoolExhausted)", services(d))
	}
}

// A Service whose address an exclusion would cover is told which entry.
func TestRunSaysWhichExclusionHoldsAnAddress(t *testing.T) {
	resp, err := Run(world("10.0.0.0/30"), manifest(t, "apiVersion: ipledger.io/v1alpha1\nkind: IPPool\nmetadata: {name: p}\nspec: {addresses: [10.0.0.0/30], exclude: [10.0.0.3, 10.0.0.1]}\n", false))
	if err != nil {
		t.Fatal(err)
	}
	held := resp.GetHeldOutside()
	if len(held) != 1 || !strings.Contains(held[0].GetMessageAfter(), `10.0.0.1 is in pool p, which no longer hands it out (it is excluded by spec.exclude[1] "10.0.0.1")`) {
		t.Errorf("held outside: %v", held)
	}
}

// A preview never becomes a pool's last valid spec: the server's PoolSet
// is cloned, never written.
func TestRunLeavesThePoolSetAlone(t *testing.T) {
	in := world("10.0.0.0/30")
	in.PoolSet.Parse(in.Pools)
	if _, err := Run(in, manifest(t, "apiVersion: ipledger.io/v1alpha1\nkind: IPPool\nmetadata: {name: p}\nspec: {addresses: [10.9.0.0/24]}\n", false)); err != nil {
		t.Fatal(err)
	}
	broken := pool("p", 1, "10.0.0.9-10.0.0.1")
	got, invalid := in.PoolSet.Parse([]*watcherv1.Object{broken})
	if len(got) != 1 || invalid["p"] == nil || !got[0].Contains(netip.MustParseAddr("10.0.0.3")) || got[0].Contains(netip.MustParseAddr("10.9.0.1")) {
		t.Errorf("the last valid spec of p is not its stored one: pools %v, invalid %v", got, invalid)
	}
}

func TestRunRefusesWhatTheAPIServerRefuses(t *testing.T) {
	for _, tc := range []struct{ yaml, want string }{
		{"apiVersion: ipledger.io/v1alpha1\nkind: IPPool\nmetadata: {name: p}\nspec: {addresses: [10.0.1.20-10.0.1.10]}\n",
			`spec.addresses[0] "10.0.1.20-10.0.1.10": range starts after it ends; write it as 10.0.1.10-10.0.1.20`},
		{"apiVersion: ipledger.io/v1alpha1\nkind: IPPool\nmetadata: {name: p}\nspec: {addresses: [10.0.0.0/24], allocation: {priority: -1}}\n",
			"spec.allocation.priority"},
		{"apiVersion: ipledger.io/v1alpha1\nkind: IPPool\nmetadata: {name: p}\nspec: {addresses: [10.0.0.0/24], allocation: {priority: high}}\n",
			"does not match the IPPool schema"},
		{"apiVersion: ipledger.io/v1alpha1\nkind: IPPool\nmetadata: {name: Pool_1}\nspec: {addresses: [10.0.0.0/24]}\n",
			`metadata.name: Invalid value: "Pool_1"`},
		{"apiVersion: ipledger.io/v1alpha1\nkind: IPPool\nmetadata: {name: p}\nspec: {}\n", "spec.addresses"},
		{"apiVersion: ipledger.io/v1alpha1\nkind: IPPool\nmetadata: {name: p}\nspec: {addresses: [10.0.0.0/24], exclude: [10.0.0.1, 10.0.1.1]}\n",
			`spec.exclude[1] "10.0.1.1": outside every entry of spec.addresses (10.0.0.0/24); exclude addresses of this pool, or remove the entry`},
	} {
		resp, err := Run(world("10.0.0.0/30"), manifest(t, tc.yaml, false))
		if err != nil {
			t.Fatal(err)
		}
		if errs := strings.Join(resp.GetValidationErrors(), "\n"); !strings.Contains(errs, tc.want) {
			t.Errorf("%s: validation errors %q, want one naming %q", tc.yaml, errs, tc.want)
		}
		if len(resp.GetAllocated())+len(resp.GetHeldOutside())+len(resp.GetOtherChanges())+len(resp.GetPools()) > 0 {
			t.Errorf("%s: a refused manifest previews changes: %v", tc.yaml, resp)
		}
	}
}

func TestRunDeleteOfAnUnknownPool(t *testing.T) {
	_, err := Run(world("10.0.0.0/30"), manifest(t, "apiVersion: ipledger.io/v1alpha1\nkind: IPPool\nmetadata: {name: nope}\n", true))
	if !errors.Is(err, ErrNoSuchPool) || !strings.Contains(err.Error(), `"nope"`) {
		t.Errorf("err = %v, want ErrNoSuchPool naming nope", err)
	}
}

func TestParseRefusesWhatIsNotOneIPPool(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"", "empty"},
		{"---\n---\n", "no object"},
		{"apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n", `kind "ConfigMap"`},
		{"apiVersion: ipledger.io/v1alpha1\nkind: IPPool\nmetadata: {name: a}\n---\napiVersion: ipledger.io/v1alpha1\nkind: IPPool\nmetadata: {name: b}\n", "document 2 is a second object"},
		{"apiVersion: ipledger.io/v1alpha1\nkind: IPPool\nspec: {addresses: [10.0.0.0/24]}\n", "metadata.name: required"},
		{"{not json", "not YAML or JSON"},
	} {
		if _, err := Parse([]byte(tc.in), false); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Parse(%q) = %v, want an error saying %q", tc.in, err, tc.want)
		}
	}
	c, err := Parse([]byte("---\n# a comment\n---\napiVersion: ipledger.io/v1alpha1\nkind: IPPool\nmetadata: {name: a}\nspec: {addresses: [10.0.0.0/24]}\n"), false)
	if err != nil || c.Name != "a" || len(c.Problems) > 0 || c.Pool.GetIpPool().GetAddresses()[0] != "10.0.0.0/24" {
		t.Errorf("Parse of one pool among empty documents = %+v, %v", c, err)
	}
}

// A pool's kept addresses (kept for Services that released them) are
// counted before and after: shrinking the pool away from one takes it
// along.
func TestRunCountsKeptAddresses(t *testing.T) {
	in := world("10.0.0.0/30")
	in.PoolSet = &objects.PoolSet{KeepReleased: time.Hour}
	in.Ledger.Reservations = []ledger.Reservation{{IP: netip.MustParseAddr("10.0.0.3"), Note: ledger.KeptNote(""), CreatedAt: now.Add(-time.Minute),
		ForService: &ledger.ServiceRef{Namespace: "web", Name: "gone", UID: "uid-gone"}}}
	for _, tc := range []struct {
		yaml          string
		before, after int64
		summary       string
	}{
		{"apiVersion: ipledger.io/v1alpha1\nkind: IPPool\nmetadata: {name: p}\nspec: {addresses: [10.0.0.0/24]}\n", 1, 1, ""},
		{"apiVersion: ipledger.io/v1alpha1\nkind: IPPool\nmetadata: {name: p}\nspec: {addresses: [10.0.0.0-10.0.0.2]}\n", 1, 0,
			"Pool p: 1 address kept for Services that released them, after 0."},
	} {
		resp, err := Run(in, manifest(t, tc.yaml, false))
		if err != nil {
			t.Fatal(err)
		}
		p := resp.GetPools()[0]
		if p.GetKeptBefore() != tc.before || p.GetKeptAfter() != tc.after {
			t.Errorf("%s: kept %d -> %d, want %d -> %d", tc.yaml, p.GetKeptBefore(), p.GetKeptAfter(), tc.before, tc.after)
		}
		if s := strings.Join(resp.GetSummary(), "\n"); !strings.Contains(s, tc.summary) {
			t.Errorf("%s: summary does not say %q:\n%s", tc.yaml, tc.summary, s)
		}
	}
}
