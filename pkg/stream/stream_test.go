package stream

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/protobuf/proto"

	"github.com/ipledger/ipledger/lab/testenv"
	watcherv1 "github.com/ipledger/ipledger/proto/ipledger/watcher/v1"
)

func eventually(t *testing.T, check func() error) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := check()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal(err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func waitSync(t *testing.T, c *Client) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.WaitForSync(ctx); err != nil {
		t.Fatal(err)
	}
}

func wantEvents(t *testing.T, r *recorder, want ...string) {
	t.Helper()
	eventually(t, func() error {
		if got := r.events(); !slices.Equal(got, want) {
			return fmt.Errorf("events\n got %q\nwant %q", got, want)
		}
		return nil
	})
}

func TestSnapshotThenDeltasReachHandlersWithOldObjects(t *testing.T) {
	f := startFake(t, "e1", svc("a", "x", "1", nil))
	c := runClient(t, f.addr)
	waitSync(t, c)
	r := newRecorder()
	c.AddHandler(r)
	f.upsert(svc("a", "x", "2", nil))
	f.upsert(svc("a", "y", "3", nil))
	f.remove(svc("a", "x", "2", nil))
	wantEvents(t, r, "add a/x@1", "update a/x@1->2", "add a/y@3", "delete a/x")
	if got := c.Store().List(watcherv1.Kind_KIND_SERVICE); len(got) != 1 || Key(got[0]) != "a/y" {
		t.Fatalf("store holds %v, want only a/y", got)
	}
}

// An attribute follows its object: derived when stored (objects already
// held included), replaced on a change, gone with the object.
func TestAttributes(t *testing.T) {
	s := newStore()
	s.put(svc("a", "x", "1", map[string]string{"app": "web"}), nil)
	app := func(o *watcherv1.Object) any { return o.GetMeta().GetLabels()["app"] }
	s.AddAttribute(watcherv1.Kind_KIND_SERVICE, "app", app)
	s.put(svc("a", "y", "1", map[string]string{"app": "db"}), nil)
	for key, want := range map[string]string{"a/x": "web", "a/y": "db"} {
		if v, ok := s.Attribute(watcherv1.Kind_KIND_SERVICE, "app", key); !ok || v != want {
			t.Errorf("Attribute(%s) = %v, %v; want %q", key, v, ok, want)
		}
	}
	s.put(svc("a", "x", "2", map[string]string{"app": "api"}), nil)
	if v, _ := s.Attribute(watcherv1.Kind_KIND_SERVICE, "app", "a/x"); v != "api" {
		t.Errorf("Attribute(a/x) after a change = %v, want api", v)
	}
	s.remove(watcherv1.Kind_KIND_SERVICE, "a/x")
	if v, ok := s.Attribute(watcherv1.Kind_KIND_SERVICE, "app", "a/x"); ok {
		t.Errorf("Attribute(a/x) after its removal = %v, still held", v)
	}
	if _, ok := s.Attribute(watcherv1.Kind_KIND_NODE, "app", "n"); ok {
		t.Error("Attribute of a kind never seen reported an object")
	}
}

// An InitialListHandler tells the replay from live additions.
func TestInitialAddsAreTheReplay(t *testing.T) {
	f := startFake(t, "e1", svc("a", "x", "1", nil))
	c := runClient(t, f.addr)
	waitSync(t, c)
	var mu sync.Mutex
	var got []string
	note := func(what string) func(*watcherv1.Object) {
		return func(o *watcherv1.Object) {
			mu.Lock()
			got = append(got, what+" "+Key(o))
			mu.Unlock()
		}
	}
	c.AddHandler(HandlerFuncs{AddFunc: note("add"), InitialAddFunc: note("initial")})
	c.AddHandler(HandlerFuncs{AddFunc: note("add-only")}) // no InitialAddFunc: the replay is OnAdd
	f.upsert(svc("a", "y", "2", nil))
	eventually(t, func() error {
		mu.Lock()
		defer mu.Unlock()
		if want := []string{"initial a/x", "add-only a/x", "add a/y", "add-only a/y"}; !slices.Equal(got, want) {
			return fmt.Errorf("got %q, want %q", got, want)
		}
		return nil
	})
}

func TestLateHandlerGetsReplayThenLiveEvents(t *testing.T) {
	f := startFake(t, "e1", svc("a", "x", "1", nil), svc("b", "y", "1", nil))
	c := runClient(t, f.addr)
	waitSync(t, c)
	f.upsert(svc("a", "z", "2", nil))
	eventually(t, func() error {
		if c.Store().Len(watcherv1.Kind_KIND_SERVICE) != 3 {
			return fmt.Errorf("store has %d services, want 3", c.Store().Len(watcherv1.Kind_KIND_SERVICE))
		}
		return nil
	})
	r := newRecorder()
	reg := c.AddHandler(r)
	f.upsert(svc("b", "y", "3", nil))
	wantEvents(t, r, "add a/x@1", "add a/z@2", "add b/y@1", "update b/y@1->3")

	c.RemoveHandler(reg)
	c.RemoveHandler(reg) // idempotent
	f.upsert(svc("b", "y", "4", nil))
	eventually(t, func() error {
		if o, _ := c.Store().Get(watcherv1.Kind_KIND_SERVICE, "b", "y"); o.GetMeta().GetResourceVersion() != "4" {
			return fmt.Errorf("b/y not at 4 yet")
		}
		return nil
	})
	if got := r.events(); len(got) != 4 {
		t.Fatalf("removed handler still called: %q", got)
	}
}

// TestFollowDeliversOnlyLaterEvents: a handler registered with Follow is
// told nothing of what the store already holds, and everything after.
func TestFollowDeliversOnlyLaterEvents(t *testing.T) {
	f := startFake(t, "e1", svc("a", "x", "1", nil), svc("b", "y", "1", nil))
	c := runClient(t, f.addr)
	waitSync(t, c)
	r := newRecorder()
	c.Follow(r)
	f.upsert(svc("b", "y", "2", nil))
	f.upsert(svc("c", "z", "1", nil))
	wantEvents(t, r, "update b/y@1->2", "add c/z@1")
}

// TestFailoverToNewEpochDeletesWhatDidNotComeBack runs two replicas with
// different epochs; objects deleted while the client moves from one to the
// other must be deleted from the store, with OnDelete, and nothing else.
func TestFailoverToNewEpochDeletesWhatDidNotComeBack(t *testing.T) {
	a, b, x := svc("ns", "a", "1", nil), svc("ns", "b", "1", nil), svc("ns", "x", "1", nil)
	r1 := startFake(t, "epoch-1", a, b, x)
	addr2 := testenv.FreeAddr(t)

	// Round robin only uses ready replicas: the client starts on r1.
	c2 := runClient(t, "static:///"+r1.addr+","+addr2)
	waitSync(t, c2)
	rec2 := newRecorder()
	c2.AddHandler(rec2)
	wantEvents(t, rec2, "add ns/a@1", "add ns/b@1", "add ns/x@1")

	// The second replica never saw b (deleted while the client was away) and
	// has a newer a.
	startFakeOn(t, addr2, "epoch-2", svc("ns", "a", "2", nil), x)
	r1.srv.Stop()
	eventually(t, func() error {
		keys := []string{}
		for _, o := range c2.Store().List(watcherv1.Kind_KIND_SERVICE) {
			keys = append(keys, Key(o)+"@"+o.GetMeta().GetResourceVersion())
		}
		if want := []string{"ns/a@2", "ns/x@1"}; !slices.Equal(keys, want) {
			return fmt.Errorf("store %v, want %v", keys, want)
		}
		return nil
	})
	got := strings.Join(rec2.events()[3:], ",")
	if got != "update ns/a@1->2,delete ns/b" {
		t.Fatalf("events after failover %q, want update of a and delete of b only", got)
	}
}

func TestNewChecksConfig(t *testing.T) {
	if _, err := New(Config{Kinds: []watcherv1.Kind{watcherv1.Kind_KIND_NODE}}, nil, nil); err == nil {
		t.Error("no target accepted")
	}
	if _, err := New(Config{Target: "x:1"}, nil, nil); err == nil {
		t.Error("no kinds accepted")
	}
	if _, err := New(Config{Target: "static:///", Plaintext: true, Kinds: []watcherv1.Kind{watcherv1.Kind_KIND_NODE}}, nil, nil); err == nil {
		t.Error("empty static target accepted")
	}
}

func TestIndexes(t *testing.T) {
	s := newStore()
	s.AddIndex(watcherv1.Kind_KIND_SERVICE, "app", func(o *watcherv1.Object) []string {
		if v, ok := o.GetMeta().GetLabels()["app"]; ok {
			return []string{v}
		}
		return nil
	})
	s.put(svc("a", "x", "1", map[string]string{"app": "web"}), nil)
	s.put(svc("b", "y", "1", map[string]string{"app": "web"}), nil)
	s.put(svc("a", "x", "2", map[string]string{"app": "db"}), nil) // the store finds what it held
	keys := func(objs []*watcherv1.Object) (out []string) {
		for _, o := range objs {
			out = append(out, Key(o))
		}
		return out
	}
	if got := keys(s.ByIndex(watcherv1.Kind_KIND_SERVICE, "app", "web")); !slices.Equal(got, []string{"b/y"}) {
		t.Errorf("ByIndex web = %v", got)
	}
	if got := s.IndexKeys(watcherv1.Kind_KIND_SERVICE, "app", "web"); !slices.Equal(got, []string{"b/y"}) {
		t.Errorf("IndexKeys web = %v", got)
	}
	if got := keys(s.ListNamespace(watcherv1.Kind_KIND_SERVICE, "a")); !slices.Equal(got, []string{"a/x"}) {
		t.Errorf("ListNamespace a = %v", got)
	}
	s.remove(watcherv1.Kind_KIND_SERVICE, "a/x")
	if got := s.ByIndex(watcherv1.Kind_KIND_SERVICE, "app", "db"); len(got) != 0 {
		t.Errorf("ByIndex db after remove = %v", keys(got))
	}
	if got := s.IndexKeys(watcherv1.Kind_KIND_SERVICE, "app", "db"); len(got) != 0 {
		t.Errorf("IndexKeys db after remove = %v", got)
	}
}

// The store holds encodings: what a read returns is the caller's own, and
// putting an equal object is not a change (nor a new Generation).
func TestStoreReadsAreCopies(t *testing.T) {
	s := newStore()
	o := svc("a", "x", "1", map[string]string{"app": "web", "tier": "front"})
	if !s.put(o, nil) {
		t.Fatal("put of a new object reported no change")
	}
	got, ok := s.Get(watcherv1.Kind_KIND_SERVICE, "a", "x")
	if !ok || !proto.Equal(got, o) {
		t.Fatalf("Get = %v, %v; want %v", got, ok, o)
	}
	got.GetMeta().Labels["app"] = "changed"
	if again, _ := s.Get(watcherv1.Kind_KIND_SERVICE, "a", "x"); again.GetMeta().GetLabels()["app"] != "web" {
		t.Errorf("changing a returned object changed the store: %v", again)
	}
	gen := s.Generation(watcherv1.Kind_KIND_SERVICE)
	if s.put(svc("a", "x", "1", map[string]string{"tier": "front", "app": "web"}), o) {
		t.Error("put of an equal object (labels built in another order) reported a change")
	}
	if g := s.Generation(watcherv1.Kind_KIND_SERVICE); g != gen {
		t.Errorf("Generation moved from %d to %d on an equal put", gen, g)
	}
	if !s.put(svc("a", "x", "2", map[string]string{"app": "web"}), o) {
		t.Error("put of a changed object reported no change")
	}
	s.remove(watcherv1.Kind_KIND_SERVICE, "a/x")
	if g := s.Generation(watcherv1.Kind_KIND_SERVICE); g != gen+2 {
		t.Errorf("Generation = %d after a change and a removal, want %d", g, gen+2)
	}
	if g := s.Generation(watcherv1.Kind_KIND_NODE); g != 0 {
		t.Errorf("Generation of a kind never seen = %d, want 0", g)
	}
}

// waitMetric waits until the metric (summed over the matching series)
// reaches at least want.
func waitMetric(t *testing.T, reg *prometheus.Registry, name string, labels map[string]string, want float64) {
	t.Helper()
	eventually(t, func() error {
		if got := testenv.MetricValue(t, reg, name, labels); got < want {
			return fmt.Errorf("%s%v = %v, want at least %v", name, labels, got, want)
		}
		return nil
	})
}

func storeVersions(c *Client) []string {
	var out []string
	for _, o := range c.Store().List(watcherv1.Kind_KIND_SERVICE) {
		out = append(out, Key(o)+"@"+o.GetMeta().GetResourceVersion())
	}
	return out
}

// failover starts the client on a replica at epoch-1 with objs, then moves
// it to one at epoch-2 with behind once change (run against the first) is
// seen by the client. It returns the client, its metrics, the second
// replica, and a recorder that saw the events from the failover on.
func failover(t *testing.T, objs []*watcherv1.Object, change func(*fakeWatcher), seen []string, behind []*watcherv1.Object,
	setup func(*Client)) (*Client, *prometheus.Registry, *fakeWatcher, *recorder) {
	t.Helper()
	r1 := startFake(t, "epoch-1", objs...)
	addr2 := testenv.FreeAddr(t)
	reg := prometheus.NewRegistry()
	// Round robin only uses ready replicas: the client starts on r1.
	c := runClientWith(t, Config{Target: "static:///" + r1.addr + "," + addr2}, reg, setup)
	waitSync(t, c)
	if change != nil {
		change(r1)
	}
	eventually(t, func() error {
		if got := storeVersions(c); !slices.Equal(got, seen) {
			return fmt.Errorf("store %v, want %v", got, seen)
		}
		return nil
	})
	rec := newRecorder()
	c.AddHandler(rec)
	rec.reset() // forget the replay
	r2 := startFakeOn(t, addr2, "epoch-2", behind...)
	r1.srv.Stop()
	waitMetric(t, reg, "ipledger_stream_syncs_total", map[string]string{"resumed": "false"}, 2)
	return c, reg, r2, rec
}

// TestFailoverToReplicaBehindNeverGoesBack: the second replica has not heard
// of an update of a, the creation of born and the deletion of gone. The
// client keeps what it saw and tells handlers nothing; when the replica
// catches up, nothing either.
func TestFailoverToReplicaBehindNeverGoesBack(t *testing.T) {
	c, reg, r2, rec := failover(t,
		[]*watcherv1.Object{svc("ns", "a", "10", nil), svc("ns", "gone", "11", nil)},
		func(r1 *fakeWatcher) {
			r1.upsert(svc("ns", "a", "20", nil))
			r1.upsert(svc("ns", "born", "21", nil))
			r1.remove(svc("ns", "gone", "11", nil))
		},
		[]string{"ns/a@20", "ns/born@21"},
		[]*watcherv1.Object{svc("ns", "a", "10", nil), svc("ns", "gone", "11", nil)}, nil)
	if got, want := storeVersions(c), []string{"ns/a@20", "ns/born@21"}; !slices.Equal(got, want) {
		t.Fatalf("store after failover %v, want %v", got, want)
	}
	if got := rec.events(); len(got) != 0 {
		t.Fatalf("failover to a replica behind told handlers %q, want nothing", got)
	}
	if n := testenv.MetricValue(t, reg, "ipledger_stream_deletes_held_back", nil); n != 1 {
		t.Errorf("%v deletions held back, want 1 (born)", n)
	}

	r2.upsert(svc("ns", "a", "20", nil))
	r2.upsert(svc("ns", "born", "21", nil))
	r2.remove(svc("ns", "gone", "11", nil))
	r2.upsert(svc("ns", "marker", "30", nil))
	wantEvents(t, rec, "add ns/marker@30")
	if n := testenv.MetricValue(t, reg, "ipledger_stream_deletes_held_back", nil); n != 0 {
		t.Errorf("%v deletions held back after catching up, want 0", n)
	}
}

// TestHeldBackDeletionAppliedOnceReplicaShowsItIsPast: x was deleted while
// the client was away, and the new replica has nothing as new as x; the
// first newer version of a Service it shows proves it had heard of x.
func TestHeldBackDeletionAppliedOnceReplicaShowsItIsPast(t *testing.T) {
	c, _, r2, rec := failover(t,
		[]*watcherv1.Object{svc("ns", "x", "5", nil), svc("ns", "y", "3", nil)}, nil, []string{"ns/x@5", "ns/y@3"},
		[]*watcherv1.Object{svc("ns", "y", "3", nil)}, nil)
	if got, want := storeVersions(c), []string{"ns/x@5", "ns/y@3"}; !slices.Equal(got, want) {
		t.Fatalf("store after failover %v, want %v (x held back)", got, want)
	}
	r2.upsert(svc("ns", "z", "6", nil))
	wantEvents(t, rec, "add ns/z@6", "delete ns/x")
}

// TestHeldBackDeletionAppliedAfterLagGrace: a replica that shows nothing
// newer is believed once LagGrace has passed, at its next event.
func TestHeldBackDeletionAppliedAfterLagGrace(t *testing.T) {
	var clock atomic.Int64
	now := func() time.Time { return time.Unix(0, clock.Load()) }
	const grace = time.Minute // the default
	_, reg, r2, rec := failover(t,
		[]*watcherv1.Object{svc("ns", "x", "5", nil), svc("ns", "y", "3", nil)}, nil, []string{"ns/x@5", "ns/y@3"},
		[]*watcherv1.Object{svc("ns", "y", "3", nil)},
		func(c *Client) { c.now = now })
	clock.Add(int64(grace - time.Second))
	r2.heartbeat()
	waitMetric(t, reg, "ipledger_stream_events_received_total", map[string]string{"type": "HEARTBEAT"}, 1)
	if got := rec.events(); len(got) != 0 {
		t.Fatalf("before the grace handlers were told %q", got)
	}
	clock.Add(int64(time.Second))
	r2.heartbeat()
	wantEvents(t, rec, "delete ns/x")
	if n := testenv.MetricValue(t, reg, "ipledger_stream_deletes_held_back_expired_total", nil); n != 1 {
		t.Errorf("%v held-back deletions expired, want 1", n)
	}
}

// TestDeleteOfAnOlderIncarnationIsHeldBack: x was deleted and recreated
// while the second replica was behind; its catching up deletes the old x,
// which must not delete the new one.
func TestDeleteOfAnOlderIncarnationIsHeldBack(t *testing.T) {
	older, newer := withUID(svc("ns", "x", "12", nil), "u1"), withUID(svc("ns", "x", "20", nil), "u2")
	_, reg, r2, rec := failover(t, []*watcherv1.Object{newer}, nil, []string{"ns/x@20"}, []*watcherv1.Object{older}, nil)
	r2.remove(older)
	waitMetric(t, reg, "ipledger_stream_deletes_held_back", nil, 1)
	r2.upsert(newer)
	r2.upsert(svc("ns", "marker", "30", nil))
	wantEvents(t, rec, "add ns/marker@30")
}

// TestStoreAll: All yields a kind's objects sorted by key, as the store held
// them when it was called (a later put or remove does not change what an
// iteration already under way yields), and stops when the caller does.
func TestStoreAll(t *testing.T) {
	s := newStore()
	for _, name := range []string{"c", "a", "b"} {
		s.put(svc("ns", name, "1", nil), nil)
	}
	s.put(&watcherv1.Object{Kind: watcherv1.Kind_KIND_NAMESPACE, Meta: &watcherv1.ObjectMeta{Name: "ns"}}, nil)
	seq := s.All(watcherv1.Kind_KIND_SERVICE)
	s.put(svc("ns", "a", "2", nil), nil)
	s.remove(watcherv1.Kind_KIND_SERVICE, "ns/b")
	var got []string
	for o := range seq {
		got = append(got, Key(o)+"@"+o.GetMeta().GetResourceVersion())
	}
	if want := []string{"ns/a@1", "ns/b@1", "ns/c@1"}; !slices.Equal(got, want) {
		t.Errorf("All = %v, want %v", got, want)
	}
	n := 0
	for range s.All(watcherv1.Kind_KIND_SERVICE) {
		n++
		break
	}
	if n != 1 {
		t.Errorf("an iteration stopped after one object went on to %d", n)
	}
	for o := range s.All(watcherv1.Kind_KIND_NODE) {
		t.Errorf("All of a kind never seen yields %v", o)
	}
}

// TestStoreAllDecodesAheadInOrder: past one chunk (decodeAhead) All decodes
// on another goroutine, and still yields every object once, sorted, and
// stops when the caller does.
func TestStoreAllDecodesAheadInOrder(t *testing.T) {
	s := newStore()
	const n = 3*decodeAhead + 7
	var want []string
	for i := range n {
		o := svc("ns", fmt.Sprintf("svc-%05d", n-1-i), "1", nil)
		s.put(o, nil)
		want = append(want, Key(o))
	}
	slices.Sort(want)
	var got []string
	for o := range s.All(watcherv1.Kind_KIND_SERVICE) {
		got = append(got, Key(o))
	}
	if !slices.Equal(got, want) {
		t.Fatalf("All yielded %d objects out of order or missing, want %d sorted", len(got), n)
	}
	read := 0
	for range s.All(watcherv1.Kind_KIND_SERVICE) {
		if read++; read == decodeAhead+1 {
			break
		}
	}
	if read != decodeAhead+1 {
		t.Errorf("an iteration stopped after %d objects went on to %d", decodeAhead+1, read)
	}
}

// A watcher of an older release refuses a kind it does not know: the client
// watches its Kinds alone rather than wait for a watcher that serves the
// optional ones (a roll of the watchers must not hold it back), and asks
// for them again on its next stream.
func TestOptionalKindsAWatcherDoesNotServe(t *testing.T) {
	f := startFake(t, "e1", svc("a", "x", "1", nil))
	f.serves = []watcherv1.Kind{watcherv1.Kind_KIND_SERVICE}
	c := runClientWith(t, Config{Target: f.addr, OptionalKinds: []watcherv1.Kind{watcherv1.Kind_KIND_GATEWAY}}, nil, nil)
	waitSync(t, c)
	if got := c.Store().List(watcherv1.Kind_KIND_SERVICE); len(got) != 1 {
		t.Fatalf("store holds %v, want a/x", got)
	}
	f.mu.Lock()
	kinds := slices.Clone(f.kinds)
	f.mu.Unlock()
	want := [][]watcherv1.Kind{{watcherv1.Kind_KIND_SERVICE, watcherv1.Kind_KIND_GATEWAY}, {watcherv1.Kind_KIND_SERVICE}}
	if len(kinds) < 2 || !slices.Equal(kinds[0], want[0]) || !slices.Equal(kinds[1], want[1]) {
		t.Fatalf("streams asked for %v, want %v: all kinds, then the required ones alone", kinds, want)
	}
}
