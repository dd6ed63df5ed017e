package server

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	watcherv1 "github.com/ipledger/ipledger/proto/ipledger/watcher/v1"
	"github.com/ipledger/ipledger/services/watcher/internal/store"
)

// fakeStream is a server stream whose Send can be held, as a subscriber that
// stopped reading holds it through flow control.
type fakeStream struct {
	grpc.ServerStream
	ctx  context.Context
	gate chan struct{} // Send waits while this is open and not released

	mu   sync.Mutex
	got  []*watcherv1.WatchResponse
	sent chan struct{}
}

func newFakeStream(ctx context.Context, held bool) *fakeStream {
	f := &fakeStream{ctx: ctx, gate: make(chan struct{}), sent: make(chan struct{}, 1)}
	if !held {
		close(f.gate)
	}
	return f
}

func (f *fakeStream) Context() context.Context { return f.ctx }

func (f *fakeStream) Send(r *watcherv1.WatchResponse) error {
	f.mu.Lock()
	gate := f.gate
	f.mu.Unlock()
	select {
	case <-gate:
	case <-f.ctx.Done():
		return f.ctx.Err()
	}
	// Round-trip through the wire format, as gRPC does: objects travel as
	// pre-encoded fields.
	b, err := proto.Marshal(r)
	if err != nil {
		return err
	}
	var got watcherv1.WatchResponse
	if err := proto.Unmarshal(b, &got); err != nil {
		return err
	}
	f.mu.Lock()
	f.got = append(f.got, &got)
	f.mu.Unlock()
	select {
	case f.sent <- struct{}{}:
	default:
	}
	return nil
}

func (f *fakeStream) events() []*watcherv1.WatchResponse {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]*watcherv1.WatchResponse(nil), f.got...)
}

func pod(name, rv string) *watcherv1.Object {
	return &watcherv1.Object{Kind: watcherv1.Kind_KIND_POD, Meta: &watcherv1.ObjectMeta{Namespace: "ns", Name: name, ResourceVersion: rv}}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func synced(f *fakeStream) bool {
	for _, e := range f.events() {
		if e.GetType() == watcherv1.EventType_EVENT_TYPE_SYNCED {
			return true
		}
	}
	return false
}

func TestBurstToOneObjectCoalescesAndOverflowClosesOnlyTheSlowStream(t *testing.T) {
	st := store.New("e", 1000)
	st.Upsert(store.Encode(pod("hot", "0")))
	srv := New(Config{HeartbeatInterval: time.Hour, QueueSize: 50}, st, nil, slog.New(slog.DiscardHandler), nil)
	req := &watcherv1.WatchRequest{Kinds: []watcherv1.Kind{watcherv1.Kind_KIND_POD}}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	slow, fast := newFakeStream(ctx, true), newFakeStream(ctx, false)
	slowDone, fastDone := make(chan error, 1), make(chan error, 1)
	go func() { slowDone <- srv.Watch(req, slow) }()
	go func() { fastDone <- srv.Watch(req, fast) }()
	waitFor(t, "two subscribers", func() bool { return st.Subscribers() == 2 })
	waitFor(t, "fast stream synced", func() bool { return synced(fast) })

	// 500 updates of one object while the slow subscriber reads nothing: they
	// occupy one queue slot.
	for i := 1; i <= 500; i++ {
		st.Upsert(store.Encode(pod("hot", strconv.Itoa(i))))
	}
	close(slow.gate)
	waitFor(t, "slow stream to receive the final state", func() bool {
		evs := slow.events()
		return len(evs) > 0 && evs[len(evs)-1].GetObject().GetMeta().GetResourceVersion() == "500"
	})
	var hot int
	for _, e := range slow.events() {
		if e.GetType() == watcherv1.EventType_EVENT_TYPE_UPSERT && e.GetOldObject() != nil {
			hot++
			if got := e.GetOldObject().GetMeta().GetResourceVersion(); got != "0" && hot == 1 {
				t.Errorf("first delta's old object at %s, want the snapshot state 0", got)
			}
		}
	}
	if hot > 2 {
		t.Errorf("500 updates reached the held subscriber as %d deltas, want at most 2", hot)
	}
	waitFor(t, "fast stream to receive the final state", func() bool {
		evs := fast.events()
		return evs[len(evs)-1].GetObject().GetMeta().GetResourceVersion() == "500"
	})

	// Now hold the slow stream again and change more distinct objects than
	// its queue holds: only it is closed.
	slow2 := newFakeStream(ctx, true)
	slow2Done := make(chan error, 1)
	go func() { slow2Done <- srv.Watch(req, slow2) }()
	waitFor(t, "third subscriber", func() bool { return st.Subscribers() == 3 })
	// The fast subscriber is paced (it has received each change before the
	// next one is made), as a healthy subscriber keeps up.
	fastNew := func() int {
		n := 0
		for _, e := range fast.events() {
			if e.GetObject().GetMeta().GetName() != "hot" && e.GetType() == watcherv1.EventType_EVENT_TYPE_UPSERT {
				n++
			}
		}
		return n
	}
	for i := range 60 {
		st.Upsert(store.Encode(pod(fmt.Sprintf("p%d", i), "1")))
		waitFor(t, "fast subscriber to keep up", func() bool { return fastNew() == i+1 })
	}
	select {
	case err := <-slow2Done:
		if status.Code(err) != codes.ResourceExhausted {
			t.Fatalf("held stream ended with %v, want RESOURCE_EXHAUSTED", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("held stream not closed on overflow")
	}
	select {
	case err := <-fastDone:
		t.Fatalf("fast stream ended: %v", err)
	case err := <-slowDone:
		t.Fatalf("first slow stream (reading again) ended: %v", err)
	default:
	}
}

func TestParseRequest(t *testing.T) {
	for _, tc := range []struct {
		name string
		req  *watcherv1.WatchRequest
		ok   bool
	}{
		{"no kinds", &watcherv1.WatchRequest{}, false},
		{"unspecified kind", &watcherv1.WatchRequest{Kinds: []watcherv1.Kind{0}}, false},
		{"unknown kind", &watcherv1.WatchRequest{Kinds: []watcherv1.Kind{99}}, false},
		{"bad selector", &watcherv1.WatchRequest{Kinds: []watcherv1.Kind{1}, LabelSelector: "a in ("}, false},
		{"empty namespace", &watcherv1.WatchRequest{Kinds: []watcherv1.Kind{1}, Namespaces: []string{""}}, false},
		{"good", &watcherv1.WatchRequest{Kinds: []watcherv1.Kind{1, 8}, Namespaces: []string{"a"}, LabelSelector: "x=y,!z"}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseRequest(tc.req)
			if (err == nil) != tc.ok {
				t.Fatalf("err = %v, want ok=%v", err, tc.ok)
			}
			if err != nil && status.Code(err) != codes.InvalidArgument {
				t.Fatalf("code %v, want InvalidArgument", status.Code(err))
			}
		})
	}
}

func TestPreEncodedObjectsDecodeAsFields(t *testing.T) {
	cur := pod("a", "2")
	cur.Meta.Labels = map[string]string{"x": "y"}
	old := pod("a", "1")
	r := withObjects(&watcherv1.WatchResponse{Type: watcherv1.EventType_EVENT_TYPE_UPSERT, Revision: 2}, store.Encode(cur), store.Encode(old))
	b, err := proto.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	var got watcherv1.WatchResponse
	if err := proto.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	want := &watcherv1.WatchResponse{Type: watcherv1.EventType_EVENT_TYPE_UPSERT, Revision: 2, Object: cur, OldObject: old}
	if !proto.Equal(&got, want) {
		t.Fatalf("decoded %v, want %v", &got, want)
	}
}

// TestSubscriberThatStopsReadingIsCutOffInSnapshotAndDeltas: a subscriber
// that accepts nothing while the watcher has something to send it is closed
// with RESOURCE_EXHAUSTED after StallTimeout, whether it stopped in the middle
// of its snapshot or after SYNCED, even when nothing changes (so its queue
// never overflows); a subscriber that keeps reading is not.
func TestSubscriberThatStopsReadingIsCutOffInSnapshotAndDeltas(t *testing.T) {
	const stall = 300 * time.Millisecond
	st := store.New("e", 1000)
	for i := range 20 {
		st.Upsert(store.Encode(pod(fmt.Sprintf("p%d", i), "1")))
	}
	srv := New(Config{HeartbeatInterval: 50 * time.Millisecond, QueueSize: 1000, StallTimeout: stall}, st, nil, slog.New(slog.DiscardHandler), nil)
	req := &watcherv1.WatchRequest{Kinds: []watcherv1.Kind{watcherv1.Kind_KIND_POD}}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	// Stops in the snapshot: its first Send never completes.
	inSnapshot := newFakeStream(ctx, true)
	// Stops after SYNCED: reads the snapshot, then holds its Sends (the next
	// one is a HEARTBEAT: the watcher has something for it).
	inDeltas := newFakeStream(ctx, false)
	reading := newFakeStream(ctx, false)
	done := map[*fakeStream]chan error{inSnapshot: make(chan error, 1), inDeltas: make(chan error, 1), reading: make(chan error, 1)}
	for f, c := range done {
		go func() { c <- srv.Watch(req, f) }()
	}
	waitFor(t, "the reading subscribers to sync", func() bool { return synced(inDeltas) && synced(reading) })
	inDeltas.mu.Lock()
	inDeltas.gate = make(chan struct{}) // hold from now on
	inDeltas.mu.Unlock()

	for name, f := range map[string]*fakeStream{"stopped in the snapshot": inSnapshot, "stopped after SYNCED": inDeltas} {
		start := time.Now()
		select {
		case err := <-done[f]:
			if status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "read nothing") {
				t.Errorf("%s: ended with %v, want RESOURCE_EXHAUSTED saying it read nothing", name, err)
			}
		case <-time.After(stall + 5*time.Second):
			t.Errorf("%s: still open %s after it stopped reading (stall timeout %s)", name, time.Since(start).Round(time.Millisecond), stall)
		}
	}
	select {
	case err := <-done[reading]:
		t.Fatalf("the subscriber that keeps reading was closed: %v", err)
	default:
	}
}

// TestOmitOldObject: a subscriber that asks for it gets its deltas without
// the old object; one that does not still gets it.
func TestOmitOldObject(t *testing.T) {
	st := store.New("e", 1000)
	st.Upsert(store.Encode(pod("a", "1")))
	srv := New(Config{HeartbeatInterval: time.Hour, QueueSize: 50}, st, nil, slog.New(slog.DiscardHandler), nil)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	plain, omitting := newFakeStream(ctx, false), newFakeStream(ctx, false)
	go srv.Watch(&watcherv1.WatchRequest{Kinds: []watcherv1.Kind{watcherv1.Kind_KIND_POD}}, plain)
	go srv.Watch(&watcherv1.WatchRequest{Kinds: []watcherv1.Kind{watcherv1.Kind_KIND_POD}, OmitOldObject: true}, omitting)
	waitFor(t, "both streams synced", func() bool { return synced(plain) && synced(omitting) })
	st.Upsert(store.Encode(pod("a", "2")))
	delta := func(f *fakeStream) *watcherv1.WatchResponse {
		var d *watcherv1.WatchResponse
		waitFor(t, "the delta", func() bool {
			evs := f.events()
			d = evs[len(evs)-1]
			return d.GetObject().GetMeta().GetResourceVersion() == "2"
		})
		return d
	}
	if got := delta(plain).GetOldObject().GetMeta().GetResourceVersion(); got != "1" {
		t.Errorf("delta to a plain subscriber carries old object at %q, want 1", got)
	}
	if d := delta(omitting); d.GetOldObject() != nil {
		t.Errorf("delta to a subscriber that set omit_old_object carries an old object: %v", d.GetOldObject())
	}
}
