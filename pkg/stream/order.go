package stream

import (
	"k8s.io/apimachinery/pkg/util/resourceversion"

	watcherv1 "github.com/ipledger/ipledger/proto/ipledger/watcher/v1"
)

// The decisions that keep a consumer from going back in time when it fails
// over to a replica that is behind (docs/stream.md, "A replica that is
// behind"). They compare resourceVersions of objects of one kind: the API
// server hands out etcd revisions, and since Kubernetes 1.34 (KEP-5504)
// resourceVersions of one resource are documented to be comparable as
// integers. Versions that are not well-formed integers are never ordered:
// the client then does what it did before it compared anything.

// verdict is what the client does with what a replica says.
type verdict int

const (
	// apply the event.
	apply verdict = iota + 1
	// drop it: the client has already seen something newer.
	drop
	// hold it back: a replica says a held object is gone, but has not shown
	// that it is past the version the client holds.
	holdBack
)

func (v verdict) String() string {
	switch v {
	case apply:
		return "apply"
	case drop:
		return "drop"
	case holdBack:
		return "holdBack"
	}
	return "verdict(?)"
}

// compareVersions orders two resourceVersions of one kind: -1, 0 or +1, and
// ok=false when either is not a well-formed integer.
func compareVersions(a, b string) (cmp int, ok bool) {
	c, err := resourceversion.CompareResourceVersion(a, b)
	return c, err == nil
}

// wellFormed reports whether v is a version that can be ordered.
func wellFormed(v string) bool {
	_, ok := compareVersions(v, v)
	return ok
}

// newerVersion returns the greater of a and b; a version that is not
// well-formed never wins over one that is.
func newerVersion(a, b string) string {
	if !wellFormed(b) {
		return a
	}
	if c, ok := compareVersions(b, a); !ok || c > 0 {
		return b
	}
	return a
}

// judgeUpsert decides about an UPSERT of o. held is the object the store
// holds under its key (nil if none); tomb is the version the key had when
// the client last deleted it ("" if it has no tombstone). An older version
// than held, or a version no newer than the deleted one, is dropped. A
// different UID is no exception: an object recreated under the same name
// has a greater version than every state of the one deleted before it.
func judgeUpsert(held *watcherv1.Object, tomb string, o *watcherv1.Object) verdict {
	rv := o.GetMeta().GetResourceVersion()
	if held != nil {
		if c, ok := compareVersions(rv, held.GetMeta().GetResourceVersion()); ok && c < 0 {
			return drop
		}
		return apply
	}
	if c, ok := compareVersions(rv, tomb); ok && c <= 0 {
		return drop
	}
	return apply
}

// judgeDelete decides about a DELETE whose object is last, the state the
// replica last knew. Nothing held: nothing to do. A last state older than
// the held one comes from a replica that never saw what the client holds:
// the object may have moved on (a new incarnation, a Pod that left the
// label selector and came back) rather than gone, so it is held back until
// the replica shows it is past the held version.
func judgeDelete(held, last *watcherv1.Object) verdict {
	if held == nil {
		return drop
	}
	if c, ok := compareVersions(last.GetMeta().GetResourceVersion(), held.GetMeta().GetResourceVersion()); ok && c < 0 {
		return holdBack
	}
	return apply
}

// judgeAbsence decides about a held object (at version heldRV) that a fresh
// snapshot did not contain; progress is the newest version of the object's
// kind the replica has shown since that snapshot began. A replica that has
// shown a version at least as new as the held one had heard of the held
// state, so its absence is a deletion; otherwise the replica may simply not
// have heard of the object yet.
func judgeAbsence(heldRV, progress string) verdict {
	if !wellFormed(heldRV) {
		return apply // nothing to compare: trust the replica, as before
	}
	if c, ok := compareVersions(progress, heldRV); ok && c >= 0 {
		return apply
	}
	return holdBack
}
