package coalesce

import (
	"testing"

	watcherv1 "github.com/ipledger/ipledger/proto/ipledger/watcher/v1"
)

const (
	upsert = watcherv1.EventType_EVENT_TYPE_UPSERT
	del    = watcherv1.EventType_EVENT_TYPE_DELETE
)

type change = Change[watcherv1.Object]

func obj(name, rv string) *watcherv1.Object {
	return &watcherv1.Object{Kind: watcherv1.Kind_KIND_SERVICE, Meta: &watcherv1.ObjectMeta{Namespace: "ns", Name: name, ResourceVersion: rv}}
}

func rv(o *watcherv1.Object) string {
	if o == nil {
		return "-"
	}
	return o.GetMeta().GetName() + "@" + o.GetMeta().GetResourceVersion()
}

type want struct {
	typ       watcherv1.EventType
	rev       uint64
	obj, old  string
	resumeRev uint64
}

func TestQueue(t *testing.T) {
	a1, a2, a3 := obj("a", "1"), obj("a", "2"), obj("a", "3")
	b1, b2 := obj("b", "1"), obj("b", "2")
	tests := []struct {
		name    string
		start   uint64
		changes []change
		advance uint64
		want    []want
	}{
		{
			name:    "distinct keys keep order",
			changes: []change{{Type: upsert, Key: "a", Revision: 1, Object: a1}, {Type: upsert, Key: "b", Revision: 2, Object: b1}},
			want:    []want{{upsert, 1, "a@1", "-", 1}, {upsert, 2, "b@1", "-", 2}},
		},
		{
			name: "updates coalesce: latest wins, old is what was last sent",
			changes: []change{
				{Type: upsert, Key: "a", Revision: 5, Object: a2, Old: a1},
				{Type: upsert, Key: "b", Revision: 6, Object: b2, Old: b1},
				{Type: upsert, Key: "a", Revision: 7, Object: a3, Old: a2},
			},
			want: []want{{upsert, 7, "a@3", "a@1", 5}, {upsert, 6, "b@2", "b@1", 7}},
		},
		{
			name:    "created then deleted before sending cancels out",
			changes: []change{{Type: upsert, Key: "a", Revision: 1, Object: a1}, {Type: del, Key: "a", Revision: 2, Object: a1}, {Type: upsert, Key: "b", Revision: 3, Object: b1}},
			want:    []want{{upsert, 3, "b@1", "-", 3}},
		},
		{
			name:    "update then delete becomes delete of the latest state",
			changes: []change{{Type: upsert, Key: "a", Revision: 4, Object: a2, Old: a1}, {Type: del, Key: "a", Revision: 5, Object: a2}},
			want:    []want{{del, 5, "a@2", "-", 5}},
		},
		{
			name:    "delete then re-create becomes an update from what the subscriber held",
			changes: []change{{Type: del, Key: "a", Revision: 4, Object: a1}, {Type: upsert, Key: "a", Revision: 5, Object: a3}},
			want:    []want{{upsert, 5, "a@3", "a@1", 5}},
		},
		{
			name:    "new object updated stays new to the subscriber",
			changes: []change{{Type: upsert, Key: "a", Revision: 2, Object: a1}, {Type: upsert, Key: "a", Revision: 3, Object: a2, Old: a1}},
			want:    []want{{upsert, 3, "a@2", "-", 3}},
		},
		{
			name:    "filtered changes advance the resume revision",
			start:   10,
			changes: []change{{Type: upsert, Key: "a", Revision: 11, Object: a2, Old: a1}},
			advance: 20,
			want:    []want{{upsert, 11, "a@2", "a@1", 20}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			q := New[watcherv1.Object](10, tt.start)
			for _, c := range tt.changes {
				if !q.Push(c) {
					t.Fatalf("push %s rejected", c.Key)
				}
			}
			q.Advance(tt.advance)
			for i, w := range tt.want {
				ev, ok := q.Pop()
				if !ok {
					t.Fatalf("event %d: queue empty", i)
				}
				got := want{ev.Type, ev.Revision, rv(ev.Object), rv(ev.Old), ev.ResumeRevision}
				if got != w {
					t.Errorf("event %d = %+v, want %+v", i, got, w)
				}
			}
			if ev, ok := q.Pop(); ok {
				t.Errorf("extra event %+v", ev)
			}
			if q.Len() != 0 {
				t.Errorf("Len = %d after draining", q.Len())
			}
		})
	}
}

func TestQueueOverflow(t *testing.T) {
	q := New[watcherv1.Object](2, 0)
	if !q.Push(change{Type: upsert, Key: "a", Revision: 1, Object: obj("a", "1")}) ||
		!q.Push(change{Type: upsert, Key: "b", Revision: 2, Object: obj("b", "1")}) {
		t.Fatal("pushes within capacity rejected")
	}
	// Merging into a pending key never overflows.
	for i := range 500 {
		if !q.Push(change{Type: upsert, Key: "a", Revision: uint64(3 + i), Object: obj("a", "x")}) {
			t.Fatalf("merge %d rejected", i)
		}
	}
	if q.Push(change{Type: upsert, Key: "c", Revision: 1000, Object: obj("c", "1")}) {
		t.Fatal("third key accepted beyond capacity 2")
	}
	if q.Len() != 2 || q.Merged() != 500 {
		t.Fatalf("Len=%d Merged=%d, want 2 and 500", q.Len(), q.Merged())
	}
}

// TestQueueResumeRevisionNeverSkipsUnsent pops a long interleaved sequence and
// checks that a subscriber resuming from ResumeRevision would miss nothing.
func TestQueueResumeRevisionNeverSkipsUnsent(t *testing.T) {
	q := New[watcherv1.Object](100, 0)
	sentUpTo := map[string]uint64{} // key -> newest revision delivered
	offered := map[string][]uint64{}
	keys := []string{"a", "b", "c", "d"}
	rev := uint64(0)
	for round := range 50 {
		for i, k := range keys {
			if (round+i)%3 == 0 {
				continue
			}
			rev++
			q.Push(change{Type: upsert, Key: k, Revision: rev, Object: obj(k, "x"), Old: obj(k, "y")})
			offered[k] = append(offered[k], rev)
		}
		if round%2 == 0 {
			ev, ok := q.Pop()
			if !ok {
				continue
			}
			sentUpTo[ev.Object.GetMeta().GetName()] = ev.Revision
			for k, revs := range offered {
				for _, r := range revs {
					if r <= ev.ResumeRevision && r > sentUpTo[k] {
						t.Fatalf("resume revision %d covers unsent change %s@%d", ev.ResumeRevision, k, r)
					}
				}
			}
		}
	}
}
