package plan

import (
	"net/netip"
	"strings"
	"testing"
	"time"

	watcherv1 "github.com/ipledger/ipledger/proto/ipledger/watcher/v1"
	"github.com/ipledger/ipledger/services/ipam/internal/allocator"
	"github.com/ipledger/ipledger/services/ipam/internal/ledger"
	"github.com/ipledger/ipledger/services/ipam/internal/objects"
)

// A gone Service's address is kept for it in the same commit as its
// release; the Service created again takes it back (the reservation ends,
// the allocation is recorded, its condition says so); a kept address
// nobody takes back is freed when its pool's grace period ends.
func TestDecideKeepsWhatAGoneServiceHeld(t *testing.T) {
	hour := time.Hour
	spec := allocator.PoolSpec{Addresses: []string{"10.0.0.0/29"}, AutoAssign: true, KeepReleased: &hour}
	pool, err := allocator.ParsePool("one", spec)
	if err != nil {
		t.Fatal(err)
	}
	a := allocator.New()
	a.SetPools([]*allocator.Pool{pool})
	for _, s := range []string{"a", "b"} {
		if _, err := a.Allocate(allocator.Request{Service: "ns/" + s}); err != nil {
			t.Fatal(err)
		}
	}
	class := objects.Class{Name: objects.DefaultLBClass}
	now := time.Date(2026, 12, 5, 12, 0, 0, 0, time.UTC)
	book := ledger.IndexByService([]ledger.Allocation{entry("a", "10.0.0.0", "one"), entry("b", "10.0.0.1", "one")})

	p := Decide(a, Batch{Gone: []string{"ns/a", "ns/b"}, Ledger: book, Class: class, Now: now})
	if len(p.Change.Release) != 2 || len(p.Change.Reserve) != 2 || len(p.Keep) != 2 {
		t.Fatalf("release of two gone Services: change %+v, keep %+v", p.Change, p.Keep)
	}
	r := p.Change.Reserve[0]
	if key, ok := r.Kept(); !ok || key != "" || r.ForService.Key() != "ns/a" || r.ForService.UID != "uid-a" || !r.CreatedAt.Equal(now) {
		t.Fatalf("kept record %+v, want kept for ns/a (uid-a) since %v", r, now)
	}
	AfterCommit(a, p, map[string]int{})
	if got, ok := a.Reservation(netip.MustParseAddr("10.0.0.0")); !ok || !got.Kept {
		t.Fatalf("after the commit, 10.0.0.0 is %+v, %v; want kept", got, ok)
	}

	// a is created again: it takes its address back.
	p = Decide(a, Batch{Services: []*watcherv1.Object{svc("a", 5)}, Class: class, Now: now.Add(time.Minute)})
	if len(p.Change.Unreserve) != 1 || p.Change.Unreserve[0].String() != "10.0.0.0" || len(p.Change.Allocate) != 1 || p.KeptReturned != 1 {
		t.Fatalf("a created again: change %+v, returned %d", p.Change, p.KeptReturned)
	}
	if w := p.Writes[0].Want; w.Ingress[0] != "10.0.0.0" || !strings.Contains(w.Cond.Message, "kept for it since its release, given back") {
		t.Fatalf("a's status %+v", w)
	}
	AfterCommit(a, p, map[string]int{})
	// Decided again, its condition still says how it got the address.
	again := Decide(a, Batch{Services: []*watcherv1.Object{svc("a", 5)}, Current: map[string]Status{"ns/a": p.Writes[0].Want},
		Ledger: ledger.IndexByService(p.Change.Allocate), Class: class, Now: now.Add(2 * time.Minute)})
	if len(again.Writes) != 0 {
		t.Fatalf("a decided again rewrites its status: %+v", again.Writes[0].Want)
	}

	// b's grace period ends: its address is free, and waiters are asked again.
	if p = Decide(a, Batch{Class: class, Now: now.Add(hour - time.Second)}); len(p.Expired) != 0 {
		t.Fatalf("expired early: %+v", p.Expired)
	}
	p = Decide(a, Batch{Class: class, Now: now.Add(hour)})
	if len(p.Expired) != 1 || len(p.Change.Unreserve) != 1 || p.Change.Unreserve[0].String() != "10.0.0.1" {
		t.Fatalf("at the end of the grace period: expired %+v, change %+v", p.Expired, p.Change)
	}
	if reask := AfterCommit(a, p, map[string]int{"ns/waiting": 1}); len(reask) != 1 {
		t.Fatalf("reask after expiry = %v, want the pending Service", reask)
	}
	if _, ok := a.Reservation(netip.MustParseAddr("10.0.0.1")); ok {
		t.Fatalf("10.0.0.1 is still reserved after its grace period")
	}
}

// A Service of the namespace that requests the address kept for a gone
// Service (a rename) takes it: the keep ends in the same commit, its
// condition and a TookKeptAddress Event name the Service it was kept for.
func TestDecideRenameTakesTheKeptAddress(t *testing.T) {
	hour := time.Hour
	pool, err := allocator.ParsePool("one", allocator.PoolSpec{Addresses: []string{"10.0.0.0/29"}, AutoAssign: true, KeepReleased: &hour})
	if err != nil {
		t.Fatal(err)
	}
	a := allocator.New()
	a.SetPools([]*allocator.Pool{pool})
	if _, err := a.Allocate(allocator.Request{Service: "ns/web-v1"}); err != nil {
		t.Fatal(err)
	}
	class := objects.Class{Name: objects.DefaultLBClass}
	now := time.Date(2026, 12, 5, 12, 0, 0, 0, time.UTC)
	p := Decide(a, Batch{Gone: []string{"ns/web-v1"}, Ledger: ledger.IndexByService([]ledger.Allocation{entry("web-v1", "10.0.0.0", "one")}), Class: class, Now: now})
	AfterCommit(a, p, map[string]int{})

	v2 := svc("web-v2", 5, func(o *watcherv1.Object) { o.Meta.Annotations[allocator.AnnotationLoadBalancerIPs] = "10.0.0.0" })
	p = Decide(a, Batch{Services: []*watcherv1.Object{v2}, Class: class, Now: now.Add(time.Minute)})
	if len(p.Change.Unreserve) != 1 || p.Change.Unreserve[0].String() != "10.0.0.0" || len(p.Change.Allocate) != 1 || p.KeptRequested != 1 || p.KeptTaken != 0 {
		t.Fatalf("web-v2 requesting web-v1's kept address: change %+v, requested %d, taken %d", p.Change, p.KeptRequested, p.KeptTaken)
	}
	w := p.Writes[0]
	if w.Want.Ingress[0] != "10.0.0.0" || !strings.Contains(w.Want.Cond.Message, "took the address kept for Service ns/web-v1 (10.0.0.0") {
		t.Fatalf("web-v2's status %+v", w.Want)
	}
	if w.Event == nil || w.Event.Reason != EventTookKeptAddress || w.Event.Type != "Normal" || !strings.Contains(w.Event.Message, "took the address kept for Service ns/web-v1") {
		t.Fatalf("web-v2's Event %+v, want %s naming ns/web-v1", w.Event, EventTookKeptAddress)
	}
}
