package poolstate

import (
	"errors"
	"fmt"
	"math/big"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	watcherv1 "github.com/ipledger/ipledger/proto/ipledger/watcher/v1"
	"github.com/ipledger/ipledger/services/ipam/internal/ledger"
	"github.com/ipledger/ipledger/services/ipam/internal/objects"
	"github.com/ipledger/ipledger/services/ipam/internal/plan"
)

func pool(name string, created int64, addrs ...string) *watcherv1.Object {
	return &watcherv1.Object{Kind: watcherv1.Kind_KIND_IP_POOL,
		Meta: &watcherv1.ObjectMeta{Name: name, Uid: "uid-" + name, CreationTimestamp: created * int64(time.Second), Generation: 1,
			Finalizers: []string{objects.PoolFinalizer}},
		Body: &watcherv1.Object_IpPool{IpPool: &watcherv1.IPPool{Addresses: addrs, AutoAssign: true}}}
}

func deleting(o *watcherv1.Object) *watcherv1.Object {
	o.Meta.DeletionTimestamp = int64(time.Hour)
	return o
}

// held is an allocation of ip, from pool, to Service web/svc.
func held(ip, pool, svc string) ledger.Allocation {
	return ledger.Allocation{IP: netip.MustParseAddr(ip), Pool: pool, Service: ledger.ServiceRef{Namespace: "web", Name: svc, UID: "uid-" + svc}}
}

// render is a state on one line: name phase served v4 used/total v6
// used/total held=N holders=N conflicting=with.
func render(s State) string {
	return fmt.Sprintf("%s %s served=%t v4 %s/%s v6 %s/%s held=%d holders=%d conflicting=%q",
		s.Name, s.Phase, s.Served, s.IPv4.Used, s.IPv4.Total, s.IPv6.Used, s.IPv6.Total, s.HeldOutside, s.Holders, s.Conflict.With)
}

// conditions renders Conditions as "Type=Status/Reason: Message" lines.
func conditions(s State) string {
	var out []string
	for _, c := range s.Conditions() {
		out = append(out, c.Type+"="+c.Status+"/"+c.Reason+": "+c.Message)
	}
	return strings.Join(out, "\n")
}

const (
	valid     = "Conflicting=False/NoOverlap: The pool overlaps no older pool\nInvalid=False/Valid: The pool's spec is valid"
	badSpec   = `spec.addresses[0] "10.9.9.9/33": not a CIDR: netip.ParsePrefix("10.9.9.9/33"): prefix length out of range`
	notParsed = "Invalid=True/Invalid: "
)

func TestOf(t *testing.T) {
	tests := []struct {
		name string
		// earlier are pools parsed before (a last valid spec is remembered).
		earlier []*watcherv1.Object
		pools   []*watcherv1.Object
		allocs  []ledger.Allocation
		noAlloc bool  // no allocator (the ledger unread)
		corrupt error // Inputs.Corrupt
		// want is render of each state, in order; conds the conditions of
		// the first.
		want  []string
		conds string
	}{{
		name:   "a serving pool counts what it holds; an address outside it is held outside",
		pools:  []*watcherv1.Object{pool("p", 1, "10.0.0.0/30", "fd00::/126")},
		allocs: []ledger.Allocation{held("10.0.0.1", "p", "a"), held("fd00::2", "p", "a"), held("10.0.1.1", "p", "b")},
		want:   []string{`p Serving served=true v4 1/4 v6 1/3 held=1 holders=0 conflicting=""`},
		conds:  "Ready=True/Serving: The pool serves Services\n" + valid,
	}, {
		name:  "an IPv6 /64 counts beyond int64 (its subnet-router anycast address aside)",
		pools: []*watcherv1.Object{pool("v6", 1, "fd00::/64")},
		want:  []string{`v6 Serving served=true v4 0/0 v6 0/18446744073709551615 held=0 holders=0 conflicting=""`},
	}, {
		name:   "a younger overlapping pool is Conflicting and uses nothing",
		pools:  []*watcherv1.Object{pool("old", 1, "10.0.0.0/30"), pool("young", 2, "10.0.0.0/24")},
		allocs: []ledger.Allocation{held("10.0.0.1", "old", "a")},
		want: []string{`old Serving served=true v4 1/4 v6 0/0 held=0 holders=0 conflicting=""`,
			`young Conflicting served=true v4 0/256 v6 0/0 held=0 holders=0 conflicting="old"`},
	}, {
		name:  "a pool never valid serves nothing: Invalid",
		pools: []*watcherv1.Object{pool("bad", 1, "10.9.9.9/33")},
		want:  []string{`bad Invalid served=false v4 0/0 v6 0/0 held=0 holders=0 conflicting=""`},
		conds: "Ready=False/Invalid: The pool serves nothing: " + badSpec + ". Services holding its addresses keep them\n" +
			"Conflicting=False/NoOverlap: The pool overlaps no other pool\n" + notParsed + badSpec,
	}, {
		name:    "an invalid edit keeps the last valid spec serving",
		earlier: []*watcherv1.Object{pool("p", 1, "10.0.0.0/30")},
		pools:   []*watcherv1.Object{pool("p", 1, "10.9.9.9/33")},
		allocs:  []ledger.Allocation{held("10.0.0.1", "p", "a")},
		want:    []string{`p ServingLastValidSpec served=true v4 1/4 v6 0/0 held=0 holders=0 conflicting=""`},
		conds: "Ready=True/ServingLastValidSpec: The pool serves its last valid spec; the current one does not take effect: " + badSpec + "\n" +
			"Conflicting=False/NoOverlap: The pool overlaps no older pool\n" + notParsed + badSpec,
	}, {
		name:   "a pool being deleted is Terminating and counts its holders",
		pools:  []*watcherv1.Object{deleting(pool("p", 1, "10.0.0.0/30")), pool("q", 2, "10.0.1.0/30")},
		allocs: []ledger.Allocation{held("10.0.0.1", "p", "a"), held("10.0.0.2", "p", "b"), held("10.0.1.1", "q", "c")},
		want: []string{`p Terminating served=true v4 2/4 v6 0/0 held=0 holders=2 conflicting=""`,
			`q Serving served=true v4 1/4 v6 0/0 held=0 holders=1 conflicting=""`},
		conds: "Ready=False/Terminating: The pool is being deleted and hands out no new address; 2 Services hold its addresses and keep them. " +
			"It is removed when the last of them is released (finalizer " + objects.PoolFinalizer + ")\n" + valid,
	}, {
		name:  "Terminating comes before Conflicting, which its condition still says",
		pools: []*watcherv1.Object{pool("old", 1, "10.0.0.0/30"), deleting(pool("young", 2, "10.0.0.0/24"))},
		want: []string{`old Serving served=true v4 0/4 v6 0/0 held=0 holders=0 conflicting=""`,
			`young Terminating served=true v4 0/256 v6 0/0 held=0 holders=0 conflicting="old"`},
	}, {
		name:    "an unreadable ledger: no allocator, nothing served, LedgerUnreadable",
		pools:   []*watcherv1.Object{pool("p", 1, "10.0.0.0/30")},
		noAlloc: true, corrupt: errors.New("shard 0 is corrupt"),
		want:  []string{`p LedgerUnreadable served=false v4 0/0 v6 0/0 held=0 holders=0 conflicting=""`},
		conds: "Ready=False/LedgerUnreadable: shard 0 is corrupt\n" + valid,
	}, {
		name:    "an unreadable ledger does not hide an Invalid pool",
		pools:   []*watcherv1.Object{pool("bad", 1, "10.9.9.9/33")},
		noAlloc: true, corrupt: errors.New("shard 0 is corrupt"),
		want: []string{`bad Invalid served=false v4 0/0 v6 0/0 held=0 holders=0 conflicting=""`},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ps := &objects.PoolSet{}
			ps.Parse(tt.earlier)
			pools, invalid := ps.Parse(tt.pools)
			in := Inputs{Invalid: invalid, Corrupt: tt.corrupt}
			if !tt.noAlloc {
				in.Alloc = plan.Rebuild(plan.Inputs{Ledger: ledger.State{Allocations: tt.allocs}, Pools: pools, LBClass: objects.DefaultLBClass}).Alloc
			}
			in.Holders = Holders(in.Alloc, tt.pools)
			states := Of(in, tt.pools)
			var got []string
			for _, s := range states {
				got = append(got, render(s))
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("Of =\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(tt.want, "\n"))
			}
			if tt.conds != "" {
				if c := conditions(states[0]); c != tt.conds {
					t.Errorf("Conditions =\n%s\nwant\n%s", c, tt.conds)
				}
			}
		})
	}
}

// Holders scans the held addresses only when a pool is being deleted.
func TestHolders(t *testing.T) {
	pools, _ := (&objects.PoolSet{}).Parse([]*watcherv1.Object{pool("p", 1, "10.0.0.0/30")})
	a := plan.Rebuild(plan.Inputs{Ledger: ledger.State{Allocations: []ledger.Allocation{held("10.0.0.1", "p", "a")}}, Pools: pools}).Alloc
	if h := Holders(a, []*watcherv1.Object{pool("p", 1, "10.0.0.0/30")}); h != nil {
		t.Errorf("Holders with no pool being deleted = %v, want nil", h)
	}
	if h := Holders(nil, []*watcherv1.Object{deleting(pool("p", 1))}); h != nil {
		t.Errorf("Holders without an allocator = %v, want nil", h)
	}
	if h := Holders(a, []*watcherv1.Object{deleting(pool("p", 1, "10.0.0.0/30"))}); h["p"] != 1 {
		t.Errorf("Holders = %v, want p: 1", h)
	}
}

// Kept counts, by serving pool, the addresses kept for Services that
// released them; they are used, and an address outside every pool is
// nobody's.
func TestOfCountsKept(t *testing.T) {
	ps := &objects.PoolSet{KeepReleased: time.Hour}
	objs := []*watcherv1.Object{pool("p", 1, "10.0.0.0/30"), pool("q", 2, "10.0.1.0/30")}
	pools, _ := ps.Parse(objs)
	kept := func(ip, svc, key string) ledger.Reservation {
		return ledger.Reservation{IP: netip.MustParseAddr(ip), Note: ledger.KeptNote(key), CreatedAt: time.Unix(1_700_000_000, 0),
			ForService: &ledger.ServiceRef{Namespace: "web", Name: svc, UID: "uid-" + svc}}
	}
	st := ledger.State{
		Allocations: []ledger.Allocation{held("10.0.0.1", "p", "a")},
		Reservations: []ledger.Reservation{kept("10.0.0.2", "b", ""), kept("10.0.0.3", "c", "k"), kept("10.0.9.9", "d", ""),
			{IP: netip.MustParseAddr("10.0.1.1"), Note: "DNS", CreatedAt: time.Unix(1_700_000_000, 0)}},
	}
	a := plan.Rebuild(plan.Inputs{Ledger: st, Pools: pools, LBClass: objects.DefaultLBClass}).Alloc
	var got []string
	for _, s := range Of(Inputs{Alloc: a}, objs) {
		got = append(got, fmt.Sprintf("%s kept=%d used=%s", s.Name, s.Kept, s.IPv4.Used))
	}
	if want := []string{"p kept=2 used=3", "q kept=0 used=1"}; !slices.Equal(got, want) {
		t.Errorf("Of = %v, want %v", got, want)
	}
}

// BenchmarkOf10000 is the pool part of each pass of the leader (and of each
// ListPools rebuild): the states of 10 pools whose addresses 10,000
// Services hold and 1,000 are kept for deleted ones, and each family's
// available (total - used), as the status writer computes it.
func BenchmarkOf10000(b *testing.B) {
	ps := &objects.PoolSet{KeepReleased: time.Hour}
	var objs []*watcherv1.Object
	for i := range 10 {
		objs = append(objs, pool(fmt.Sprintf("p%d", i), int64(i+1), fmt.Sprintf("10.%d.0.0/20", i)))
	}
	pools, _ := ps.Parse(objs)
	var st ledger.State
	for i := range 11000 {
		ip := netip.AddrFrom4([4]byte{10, byte(i % 10), byte(i / 10 / 256), byte(i / 10 % 256)})
		if i < 10000 {
			st.Allocations = append(st.Allocations, held(ip.String(), fmt.Sprintf("p%d", i%10), fmt.Sprintf("s%d", i)))
			continue
		}
		st.Reservations = append(st.Reservations, ledger.Reservation{IP: ip, Note: ledger.KeptNote(""), CreatedAt: time.Unix(1_700_000_000, 0),
			ForService: &ledger.ServiceRef{Namespace: "web", Name: fmt.Sprintf("s%d", i), UID: fmt.Sprintf("uid-s%d", i)}})
	}
	a := plan.Rebuild(plan.Inputs{Ledger: st, Pools: pools, LBClass: objects.DefaultLBClass}).Alloc
	in := Inputs{Alloc: a}
	var available big.Int
	for b.Loop() {
		for _, s := range Of(in, objs) {
			available.Sub(s.IPv4.Total, s.IPv4.Used)
			available.Sub(s.IPv6.Total, s.IPv6.Used)
		}
	}
	if s := Of(in, objs)[0]; s.IPv4.Used.Int64() != 1100 {
		b.Fatalf("p0 uses %s, want 1100", s.IPv4.Used)
	}
}
