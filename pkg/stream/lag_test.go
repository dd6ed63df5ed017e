package stream

import (
	"slices"
	"testing"
	"time"

	watcherv1 "github.com/ipledger/ipledger/proto/ipledger/watcher/v1"
)

func svcRef(key string) objectRef { return objectRef{watcherv1.Kind_KIND_SERVICE, key} }

func refKeys(refs []objectRef) []string {
	var out []string
	for _, r := range refs {
		out = append(out, r.key)
	}
	return out
}

func TestLagGuardConfirmsHeldBackInVersionOrder(t *testing.T) {
	g := newLagGuard(time.Minute)
	t0 := time.Unix(0, 0)
	g.holdBack(svcRef("c"), "30", t0)
	g.holdBack(svcRef("a"), "10", t0)
	g.holdBack(svcRef("b"), "20", t0)
	g.holdBack(objectRef{watcherv1.Kind_KIND_NODE, "n"}, "5", t0)
	g.release(svcRef("b")) // the replica showed b after all

	g.observe(watcherv1.Kind_KIND_SERVICE, "9")
	if got := g.confirmed(watcherv1.Kind_KIND_SERVICE); len(got) != 0 {
		t.Fatalf("confirmed at 9: %v, want none", refKeys(got))
	}
	g.observe(watcherv1.Kind_KIND_SERVICE, "25")
	if got := refKeys(g.confirmed(watcherv1.Kind_KIND_SERVICE)); !slices.Equal(got, []string{"a"}) {
		t.Fatalf("confirmed at 25: %v, want [a] (b was released)", got)
	}
	g.observe(watcherv1.Kind_KIND_SERVICE, "7") // progress never goes back
	g.observe(watcherv1.Kind_KIND_SERVICE, "100")
	if got := refKeys(g.confirmed(watcherv1.Kind_KIND_SERVICE)); !slices.Equal(got, []string{"c"}) {
		t.Fatalf("confirmed at 100: %v, want [c]", got)
	}
	if n := g.heldBackCount(); n != 1 {
		t.Fatalf("%d held back, want 1 (the Node: progress is per kind)", n)
	}
}

func TestLagGuardExpiresHeldBackAfterGraceFromFirstHold(t *testing.T) {
	g := newLagGuard(time.Minute)
	t0 := time.Unix(0, 0)
	g.holdBack(svcRef("a"), "10", t0)
	g.holdBack(svcRef("b"), "11", t0.Add(30*time.Second))
	g.holdBack(svcRef("a"), "10", t0.Add(50*time.Second)) // a second replica lacks it too: no new grace
	if got := g.expired(t0.Add(59 * time.Second)); len(got) != 0 {
		t.Fatalf("expired before the grace: %v", refKeys(got))
	}
	if got := refKeys(g.expired(t0.Add(time.Minute))); !slices.Equal(got, []string{"a"}) {
		t.Fatalf("expired at 1m: %v, want [a]", got)
	}
	g.newReplica()
	g.observe(watcherv1.Kind_KIND_SERVICE, "11")
	if got := refKeys(g.confirmed(watcherv1.Kind_KIND_SERVICE)); !slices.Equal(got, []string{"b"}) {
		t.Fatalf("confirmed: %v, want [b]", got)
	}
	if got := g.expired(t0.Add(time.Hour)); len(got) != 0 {
		t.Fatalf("expired after confirmation: %v", refKeys(got))
	}
}

func TestLagGuardTombstonesLastTheGrace(t *testing.T) {
	g := newLagGuard(time.Minute)
	t0 := time.Unix(0, 0)
	g.tombstone(svcRef("a"), "10", t0)
	g.tombstone(svcRef("b"), "", t0) // not a version: nothing to remember
	g.tombstone(svcRef("a"), "12", t0.Add(40*time.Second))
	if got := g.tomb(svcRef("b")); got != "" {
		t.Errorf("tomb(b) = %q, want none", got)
	}
	g.expireTombs(t0.Add(time.Minute))
	if got := g.tomb(svcRef("a")); got != "12" {
		t.Errorf("tomb(a) after the first one's grace = %q, want 12 (renewed)", got)
	}
	g.expireTombs(t0.Add(100 * time.Second))
	if got := g.tomb(svcRef("a")); got != "" {
		t.Errorf("tomb(a) after its grace = %q, want none", got)
	}
	g.tombstone(svcRef("c"), "3", t0)
	g.forgetTomb(svcRef("c"))
	if got := g.tomb(svcRef("c")); got != "" {
		t.Errorf("tomb(c) after forgetTomb = %q", got)
	}
}
