package controller

import (
	"testing"
	"time"

	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// An expectation the view has met no longer holds syncs back, but it stays,
// past its deadline, to recognise the echoes of the write and of the delete.
func TestTrackerKeepsMetExpectationsForEchoes(t *testing.T) {
	now := time.Unix(0, 0)
	tr := newTracker(time.Minute, func() time.Time { return now })
	slice := func(uid string, gen int64) *discoveryv1.EndpointSlice {
		return &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Name: "s", UID: types.UID(uid), Generation: gen}}
	}
	tr.Wrote("a/web", slice("u", 2))
	if r := tr.Stale("a/web", []*discoveryv1.EndpointSlice{slice("u", 2)}); r != "" {
		t.Fatalf("view showing the write is stale: %s", r)
	}
	now = now.Add(time.Hour)
	if tr.ShouldSync("a/web", slice("u", 2)) {
		t.Fatal("the echo of our write, after the deadline, asked for a sync")
	}
	if !tr.ShouldSync("a/web", slice("u", 3)) {
		t.Fatal("a newer generation than ours did not ask for a sync")
	}

	tr.Deleted("a/web", "s", "u")
	if r := tr.Stale("a/web", []*discoveryv1.EndpointSlice{slice("u", 2)}); r == "" {
		t.Fatal("the view still showing the slice we deleted is not stale")
	}
	if r := tr.Stale("a/web", nil); r != "" {
		t.Fatalf("the view without the slice we deleted is stale: %s", r)
	}
	now = now.Add(time.Hour)
	if !tr.HandleDeletion("a/web", slice("u", 2)) {
		t.Fatal("our own delete's event, after the deadline, was not recognised")
	}
	if tr.HandleDeletion("a/web", slice("u", 2)) {
		t.Fatal("a second delete event was taken for ours")
	}
}

// With no timeout an expectation holds syncs back until the view shows it.
func TestTrackerWithoutTimeoutWaits(t *testing.T) {
	now := time.Unix(0, 0)
	tr := newTracker(0, func() time.Time { return now })
	tr.Wrote("a/web", &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Name: "s", UID: "u", Generation: 1}})
	now = now.Add(1000 * time.Hour)
	if tr.Stale("a/web", nil) == "" {
		t.Fatal("expired without a timeout")
	}
	tr.Forget("a/web")
	if r := tr.Stale("a/web", nil); r != "" {
		t.Fatalf("stale after Forget: %s", r)
	}
}
