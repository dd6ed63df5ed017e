package expect

import (
	"testing"
	"time"

	"github.com/ipledger/ipledger/services/eipd/internal/decide"
)

type clock struct{ t time.Time }

func (c *clock) now() time.Time { return c.t }

func ids(view []decide.Address) map[string]string {
	m := map[string]string{}
	for _, a := range view {
		m[a.AllocationID] = a.Node
	}
	return m
}

func TestAllocatedInvisibleIsOverlaidUntilVisible(t *testing.T) {
	c := &clock{t: time.Unix(1000, 0)}
	e := New(time.Minute, c.now)
	e.Allocated("n1", "e-1", "1.1.1.1")

	view, waiting := e.Apply(nil)
	if got := ids(view); got["e-1"] != "n1" || len(waiting) != 0 {
		t.Fatalf("stale view: got %v waiting %v, want e-1 overlaid for n1 and nothing waiting", got, waiting)
	}
	// Choose on the overlaid view keeps the new address: no second allocation.
	if p := decide.Choose(decide.Input{Node: "n1", Addresses: view}); p.Action != decide.UseTagged {
		t.Fatalf("plan on overlaid view = %v, want UseTagged", p.Action)
	}
	view, _ = e.Apply([]decide.Address{{AllocationID: "e-1", PublicIP: "1.1.1.1", Node: "n1"}})
	if len(view) != 1 || ids(view)["e-1"] != "n1" {
		t.Fatalf("visible: view %v; want 1 address, tagged for n1", view)
	}
}

func TestUncertainWaitsUntilTaggedOrExpired(t *testing.T) {
	c := &clock{t: time.Unix(1000, 0)}
	e := New(time.Minute, c.now)
	e.Uncertain("n1")
	if _, waiting := e.Apply(nil); !waiting["n1"] {
		t.Fatal("uncertain allocation not visible yet: n1 must wait")
	}
	_, waiting := e.Apply([]decide.Address{{AllocationID: "e-7", Node: "n1"}})
	if waiting["n1"] || e.Len() != 0 {
		t.Fatalf("address tagged for n1 visible: waiting %v pending %d, want satisfied", waiting, e.Len())
	}

	e.Uncertain("n2")
	c.t = c.t.Add(time.Minute)
	if _, waiting := e.Apply(nil); waiting["n2"] || e.Len() != 0 {
		t.Fatalf("expired: waiting %v pending %d, want dropped", waiting, e.Len())
	}
}

func TestClaimOverlaysTagAndExcludesOthers(t *testing.T) {
	c := &clock{t: time.Unix(1000, 0)}
	e := New(time.Minute, c.now)
	if !e.Claim("n1", "e-1", "1.1.1.1") {
		t.Fatal("first claim refused")
	}
	if e.Claim("n2", "e-1", "1.1.1.1") {
		t.Fatal("second node claimed the same orphan")
	}
	// EC2 still shows e-1 as an orphan: the view must not offer it to n2.
	view, _ := e.Apply([]decide.Address{{AllocationID: "e-1", PublicIP: "1.1.1.1"}})
	if p := decide.Choose(decide.Input{Node: "n2", Addresses: view}); p.Action != decide.Allocate {
		t.Fatalf("n2 plan = %v on %v, want Allocate (e-1 is n1's)", p.Action, view)
	}
	e.Forget("n1")
	if !e.Claim("n2", "e-1", "1.1.1.1") {
		t.Fatal("claim after Forget refused")
	}
}

func TestReleasedHiddenUntilGone(t *testing.T) {
	c := &clock{t: time.Unix(1000, 0)}
	e := New(time.Minute, c.now)
	e.Allocated("n1", "e-1", "1.1.1.1")
	e.Released("e-1")
	stale := []decide.Address{{AllocationID: "e-1", PublicIP: "1.1.1.1"}}
	if view, _ := e.Apply(stale); len(view) != 0 {
		t.Fatalf("released address still offered: %v", view)
	}
	if view, _ := e.Apply(nil); len(view) != 0 || e.Len() != 0 {
		t.Fatalf("after EC2 dropped it: view %v pending %d, want empty", view, e.Len())
	}
}

func TestOrphanedShownUntaggedUntilEC2Agrees(t *testing.T) {
	c := &clock{t: time.Unix(1000, 0)}
	e := New(time.Minute, c.now)
	e.Orphaned("e-1")
	stale := []decide.Address{{AllocationID: "e-1", PublicIP: "1.1.1.1", Node: "old", AssociationID: "a-1", NetworkInterfaceID: "eni-1"}}
	view, _ := e.Apply(stale)
	if p := decide.Choose(decide.Input{Node: "n2", Addresses: view}); p.Action != decide.ClaimOrphan || p.Address.AllocationID != "e-1" {
		t.Fatalf("plan on stale view = %+v, want to reuse e-1", p)
	}
	e.Apply([]decide.Address{{AllocationID: "e-1", PublicIP: "1.1.1.1"}})
	if e.Len() != 0 {
		t.Fatalf("pending = %d after EC2 agreed, want 0", e.Len())
	}
}

// Past --ec2-consistency-timeout nothing is overlaid any more: EC2's view
// is trusted as it is, and an expired claim no longer excludes others.
func TestExpiredExpectationsAreDropped(t *testing.T) {
	c := &clock{t: time.Unix(1000, 0)}
	e := New(time.Minute, c.now)
	e.Released("e-1")
	e.Orphaned("e-2")
	if !e.Claim("n1", "e-3", "3.3.3.3") {
		t.Fatal("claim refused")
	}
	stale := []decide.Address{{AllocationID: "e-1"}, {AllocationID: "e-2", Node: "old", AssociationID: "a-2"}}
	if view, _ := e.Apply(stale); len(view) != 2 || ids(view)["e-2"] != "" || ids(view)["e-3"] != "n1" {
		t.Fatalf("in time: view %v, want e-1 hidden, e-2 untagged and e-3 overlaid for n1", view)
	}
	c.t = c.t.Add(59 * time.Second)
	if e.Claim("n2", "e-3", "3.3.3.3") {
		t.Fatal("n2 claimed e-3 while n1's claim was pending")
	}
	c.t = c.t.Add(time.Second)
	if !e.Claim("n2", "e-3", "3.3.3.3") {
		t.Fatal("n1's expired claim still excludes n2")
	}
	view, _ := e.Apply(stale)
	if got := ids(view); len(view) != 3 || got["e-2"] != "old" || got["e-3"] != "n2" {
		t.Fatalf("expired: view %v, want EC2's view as it is plus n2's fresh claim", view)
	}
	if e.Len() != 1 {
		t.Fatalf("pending = %d, want only n2's claim", e.Len())
	}
}

// A view whose DescribeAddresses was served before a claim's tag, applied
// after a newer view showed the tag (two Nodes' syncs interleaving, or a
// describe retried through a throttling storm), still shows the address as
// an orphan: until --ec2-consistency-timeout the claim must keep it the
// claimer's, or a second Node claims it and two Nodes share one address
// (TestReservedSetUnderAThrottlingStorm saw exactly that).
func TestClaimSeenStillOverlaysAnOlderView(t *testing.T) {
	c := &clock{t: time.Unix(1000, 0)}
	e := New(time.Minute, c.now)
	if !e.Claim("n1", "e-1", "1.1.1.1") {
		t.Fatal("first claim refused")
	}
	older := []decide.Address{{AllocationID: "e-1", PublicIP: "1.1.1.1"}}
	newer := []decide.Address{{AllocationID: "e-1", PublicIP: "1.1.1.1", Node: "n1"}}
	if view, _ := e.Apply(newer); ids(view)["e-1"] != "n1" {
		t.Fatalf("newer view %v, want e-1 tagged for n1", view)
	}
	view, _ := e.Apply(older)
	if p := decide.Choose(decide.Input{Node: "n2", Addresses: view}); p.Action != decide.Allocate {
		t.Fatalf("n2 plan = %v on the older view %v, want Allocate (e-1 is n1's)", p.Action, view)
	}
	if e.Claim("n2", "e-1", "1.1.1.1") {
		t.Fatal("n2 claimed e-1 that n1 claimed and EC2 showed tagged for n1")
	}
	// Past the timeout EC2's view is trusted again.
	c.t = c.t.Add(time.Minute)
	if view, _ := e.Apply(older); ids(view)["e-1"] != "" {
		t.Fatalf("expired: view %v, want EC2's view as it is", view)
	}
}

// The same for an allocation: a view served before AllocateAddress
// answered does not list the address; applied after a newer view listed
// it, the Node must still have it.
func TestAllocatedSeenStillOverlaysAnOlderView(t *testing.T) {
	c := &clock{t: time.Unix(1000, 0)}
	e := New(time.Minute, c.now)
	e.Allocated("n1", "e-1", "1.1.1.1")
	e.Apply([]decide.Address{{AllocationID: "e-1", PublicIP: "1.1.1.1", Node: "n1"}})
	view, _ := e.Apply(nil)
	if p := decide.Choose(decide.Input{Node: "n1", Addresses: view}); p.Action != decide.UseTagged {
		t.Fatalf("n1 plan = %v on the older view %v, want UseTagged (no second allocation)", p.Action, view)
	}
}
