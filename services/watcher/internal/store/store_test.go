package store

import (
	"slices"
	"strconv"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/labels"

	watcherv1 "github.com/ipledger/ipledger/proto/ipledger/watcher/v1"
)

func svc(name, rv string, lbls map[string]string) *Object {
	return Encode(&watcherv1.Object{Kind: watcherv1.Kind_KIND_SERVICE, Meta: &watcherv1.ObjectMeta{Namespace: "ns", Name: name, ResourceVersion: rv, Labels: lbls}})
}

var services = Filter{Kinds: map[watcherv1.Kind]bool{watcherv1.Kind_KIND_SERVICE: true}}

func drain(sub *Subscription) (out []string) {
	for {
		ev, ok := sub.Next()
		if !ok {
			return out
		}
		out = append(out, ev.Type.String()+" "+ev.Object.Name()+"@"+ev.Object.ResourceVersion())
	}
}

func TestSubscribeResume(t *testing.T) {
	st := New("e1", 3)
	st.Upsert(svc("a", "1", nil)) // rev 1
	st.Upsert(svc("b", "1", nil)) // rev 2
	st.Upsert(svc("a", "1", nil)) // equal: not a change
	st.Upsert(svc("a", "2", nil)) // rev 3
	st.Delete(svc("b", "1", nil)) // rev 4
	st.Upsert(svc("c", "1", nil)) // rev 5
	if st.Revision() != 5 {
		t.Fatalf("revision %d, want 5", st.Revision())
	}
	tests := []struct {
		name        string
		resume      *watcherv1.ResumePoint
		wantResumed bool
		wantSnap    int
		wantQueued  []string
	}{
		{"no resume point", nil, false, 2, nil},
		{"same epoch within history", &watcherv1.ResumePoint{Epoch: "e1", Revision: 3}, true, 0,
			[]string{"EVENT_TYPE_DELETE b@1", "EVENT_TYPE_UPSERT c@1"}},
		{"same epoch at the head", &watcherv1.ResumePoint{Epoch: "e1", Revision: 5}, true, 0, nil},
		{"history lost", &watcherv1.ResumePoint{Epoch: "e1", Revision: 1}, false, 2, nil},
		{"other epoch", &watcherv1.ResumePoint{Epoch: "e0", Revision: 4}, false, 2, nil},
		{"revision from the future", &watcherv1.ResumePoint{Epoch: "e1", Revision: 9}, false, 2, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := st.Subscribe(services, tt.resume, 10)
			defer st.Unsubscribe(got.Sub)
			snap := slices.Collect(got.Snapshot.All())
			if got.Resumed != tt.wantResumed || len(snap) != tt.wantSnap || got.Revision != 5 {
				t.Fatalf("resumed=%v snapshot=%d rev=%d, want %v %d 5", got.Resumed, len(snap), got.Revision, tt.wantResumed, tt.wantSnap)
			}
			q := drain(got.Sub)
			if len(q) != len(tt.wantQueued) {
				t.Fatalf("queued %q, want %q", q, tt.wantQueued)
			}
			for i := range q {
				if q[i] != tt.wantQueued[i] {
					t.Fatalf("queued %q, want %q", q, tt.wantQueued)
				}
			}
		})
	}
}

func TestSelectorMovesObjectsInAndOut(t *testing.T) {
	st := New("e1", 10)
	f := services
	f.Selector = labels.SelectorFromSet(labels.Set{"team": "x"})
	sub := st.Subscribe(f, nil, 10).Sub
	st.Upsert(svc("a", "1", nil))                            // not selected: nothing
	st.Upsert(svc("a", "2", map[string]string{"team": "x"})) // enters: UPSERT without old
	if got := drain(sub); len(got) != 1 || got[0] != "EVENT_TYPE_UPSERT a@2" {
		t.Fatalf("entering the selector: %q", got)
	}
	st.Upsert(svc("a", "3", map[string]string{"team": "y"})) // leaves: DELETE of the last selected state
	if got := drain(sub); len(got) != 1 || got[0] != "EVENT_TYPE_DELETE a@2" {
		t.Fatalf("leaving the selector: %q", got)
	}
	if rr := sub.ResumeRevision(); rr != 3 {
		t.Fatalf("resume revision %d, want 3", rr)
	}
}

// TestSnapshotsShareListsUntilTheKindChanges: subscribers starting at the same
// revision share one list of objects, and a change of the kind gives the next
// subscriber a list with that change (never the shared, stale one).
func TestSnapshotsShareListsUntilTheKindChanges(t *testing.T) {
	st := New("e1", 10)
	st.Upsert(svc("a", "1", nil))
	names := func(sn Snapshot) (out []string) {
		for o := range sn.All() {
			out = append(out, o.Name()+"@"+o.ResourceVersion())
		}
		slices.Sort(out)
		return out
	}
	first := st.Subscribe(services, nil, 10)
	second := st.Subscribe(services, nil, 10)
	if &first.Snapshot.lists[0][0] != &second.Snapshot.lists[0][0] {
		t.Error("two snapshots at one revision hold a list each, want one shared list")
	}
	st.Upsert(svc("a", "2", nil))
	st.Upsert(svc("b", "1", nil))
	if got, want := names(st.Subscribe(services, nil, 10).Snapshot), []string{"a@2", "b@1"}; !slices.Equal(got, want) {
		t.Errorf("snapshot after updates %q, want %q", got, want)
	}
	st.Delete(svc("a", "2", nil))
	if got, want := names(st.Subscribe(services, nil, 10).Snapshot), []string{"b@1"}; !slices.Equal(got, want) {
		t.Errorf("snapshot after a delete %q, want %q", got, want)
	}
	if got, want := names(first.Snapshot), []string{"a@1"}; !slices.Equal(got, want) {
		t.Errorf("the first snapshot changed under its subscriber: %q, want %q", got, want)
	}
}

// The history is bounded by what its changes weigh, not only by their
// number: big objects churning must not fill 50,000 slots. A subscriber
// resuming from a forgotten change gets a snapshot; one resuming within
// what is kept resumes.
func TestHistoryBytesForgetTheOldestChanges(t *testing.T) {
	big := func(rev string) *Object {
		return Encode(&watcherv1.Object{Kind: watcherv1.Kind_KIND_SERVICE, Meta: &watcherv1.ObjectMeta{
			Namespace: "ns", Name: "big", ResourceVersion: rev, Annotations: map[string]string{"pad": strings.Repeat("x", 1000)}}})
	}
	st := New("e1", 1000)
	st.LimitHistoryBytes(5 * changeBytes(Change{Object: big("100"), Key: big("100").Key()}))
	for i := range 100 {
		st.Upsert(big(strconv.Itoa(10 + i)))
	}
	if st.histLen != 5 {
		t.Fatalf("history keeps %d changes, want the 5 that fit the byte limit", st.histLen)
	}
	if st.histBytes > st.histByteLimit {
		t.Fatalf("history weighs %d bytes, over its limit %d", st.histBytes, st.histByteLimit)
	}
	old := st.Subscribe(services, &watcherv1.ResumePoint{Epoch: "e1", Revision: 90}, 10)
	defer st.Unsubscribe(old.Sub)
	if old.Resumed {
		t.Fatal("resumed from a change the byte limit forgot; want a snapshot")
	}
	recent := st.Subscribe(services, &watcherv1.ResumePoint{Epoch: "e1", Revision: 97}, 10)
	defer st.Unsubscribe(recent.Sub)
	if !recent.Resumed {
		t.Fatal("a resume within the kept changes got a snapshot")
	}
	if q := drain(recent.Sub); len(q) != 1 || q[0] != "EVENT_TYPE_UPSERT big@109" {
		t.Fatalf("resumed with %q, want the last change", q)
	}
}
