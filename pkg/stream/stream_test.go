package stream

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

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

// TestFailoverToNewEpochDeletesWhatDidNotComeBack runs two replicas with
// different epochs; objects deleted while the client moves from one to the
// other must be deleted from the store, with OnDelete, and nothing else.
func TestFailoverToNewEpochDeletesWhatDidNotComeBack(t *testing.T) {
	a, b, x := svc("ns", "a", "1", nil), svc("ns", "b", "1", nil), svc("ns", "x", "1", nil)
	r1 := startFake(t, "epoch-1", a, b, x)
	addr2 := freeAddr(t)
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
	s.put(svc("a", "x", "1", map[string]string{"app": "web"}))
	s.put(svc("b", "y", "1", map[string]string{"app": "web"}))
	s.put(svc("a", "x", "2", map[string]string{"app": "db"}))
	keys := func(objs []*watcherv1.Object) (out []string) {
		for _, o := range objs {
			out = append(out, Key(o))
		}
		return out
	}
	if got := keys(s.ByIndex(watcherv1.Kind_KIND_SERVICE, "app", "web")); !slices.Equal(got, []string{"b/y"}) {
		t.Errorf("ByIndex web = %v", got)
	}
	if got := keys(s.ListNamespace(watcherv1.Kind_KIND_SERVICE, "a")); !slices.Equal(got, []string{"a/x"}) {
		t.Errorf("ListNamespace a = %v", got)
	}
	s.remove(watcherv1.Kind_KIND_SERVICE, "a/x")
	if got := s.ByIndex(watcherv1.Kind_KIND_SERVICE, "app", "db"); len(got) != 0 {
		t.Errorf("ByIndex db after remove = %v", keys(got))
	}
}
