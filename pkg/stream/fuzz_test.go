package stream

import (
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strconv"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	watcherv1 "github.com/ipledger/ipledger/proto/ipledger/watcher/v1"
)

// FuzzClientStore drives the client's event handling with random sequences of
// streams (complete or broken snapshots, resumes, deltas, changes made while
// disconnected, replicas that are behind and catch up, time passing beyond
// the lag grace) and checks after every event that a handler's mirror equals
// the store, that the custom index agrees with a scan, and that handlers are
// never handed an older version of an object than one they were handed (or
// saw deleted) within the grace. After every complete snapshot (and a
// lagging replica's catching up) the store must hold the watcher's world
// plus only deletions held back; once the grace has passed, exactly the
// world.
func FuzzClientStore(f *testing.F) {
	f.Add([]byte{0, 1, 2, 3, 1, 2, 0, 5, 9, 13, 4, 0})
	f.Add([]byte{0, 17, 33, 6, 0, 2, 1, 2, 3, 4, 5, 6, 7})
	// Upsert o0, o1, o2; delete o2; a replica two changes behind takes over
	// (it still has o2's creation to send) and catches up; time passes.
	f.Add([]byte{0, 1, 19, 37, 33, 0x65, 0x34})
	// Upsert o0, o1; a replica that has neither takes over and catches up.
	f.Add([]byte{0, 1, 19, 0x65, 0x14})
	// Upsert o0, o1; disconnect; delete o1; a new replica cannot show it is
	// past o1; time passes.
	f.Add([]byte{0, 1, 19, 4, 21, 5, 0x34})
	f.Fuzz(func(t *testing.T, data []byte) {
		const grace = time.Minute
		c, err := New(Config{Target: "127.0.0.1:1", Plaintext: true, Kinds: []watcherv1.Kind{watcherv1.Kind_KIND_SERVICE}, LagGrace: grace}, slog.New(slog.DiscardHandler), nil)
		if err != nil {
			t.Fatal(err)
		}
		clock := time.Unix(0, 0)
		c.now = func() time.Time { return clock }
		c.Store().AddIndex(watcherv1.Kind_KIND_SERVICE, "tier", func(o *watcherv1.Object) []string {
			return []string{o.GetMeta().GetLabels()["tier"]}
		})
		mirror := newRecorder()
		c.AddHandler(mirror)
		never := &monotonic{t: t, floor: map[string]uint64{}}
		c.AddHandler(never)

		truth := map[string]*watcherv1.Object{}
		var (
			st        *session // nil: disconnected
			epoch     = "e0"
			epochN    = 0
			rev       uint64
			serverRev = map[string]uint64{} // epoch -> revisions it has
			past      = []map[string]*watcherv1.Object{{}}
			changes   = []*watcherv1.WatchResponse{nil} // by revision
		)
		sent := 0
		send := func(r *watcherv1.WatchResponse) bool {
			// Every other object comes with the bytes it was sent in, as
			// from the watcher; the others the store encodes itself.
			var wire []byte
			if sent++; sent%2 == 0 && r.GetObject() != nil {
				wire = encode(r.GetObject())
			}
			if err := c.handle(st, r, wire); err != nil {
				st = nil // the client would drop the stream
				return false
			}
			check(t, c, mirror)
			return true
		}
		// worldOrHeldBack: the store holds the world, plus objects whose
		// deletion is held back (and, with exact, nothing more).
		worldOrHeldBack := func(when string, exact bool) {
			t.Helper()
			got := storeMap(c)
			for k, o := range truth {
				if !proto.Equal(got[k], o) {
					t.Fatalf("%s: store has %s at %v, want %v", when, k, got[k].GetMeta().GetResourceVersion(), o.GetMeta().GetResourceVersion())
				}
			}
			for k := range got {
				if _, ok := truth[k]; ok {
					continue
				}
				if exact || c.lag.held[objectRef{watcherv1.Kind_KIND_SERVICE, "ns/" + k}] == nil {
					t.Fatalf("%s: store has %s, which the world does not (held back: %d)", when, k, c.lag.heldBackCount())
				}
			}
		}
		changed := func(r *watcherv1.WatchResponse) {
			past = append(past, maps.Clone(truth))
			changes = append(changes, r)
		}
		for i := 0; i < len(data); i++ {
			b := data[i]
			key := "o" + strconv.Itoa(int(b>>4)%6)
			switch b % 6 {
			case 0, 5: // new stream; with b%6==5 from a new epoch; may break mid-snapshot
				if b%6 == 5 {
					epochN++
					epoch = "e" + strconv.Itoa(epochN)
				}
				st = &session{}
				world, at := truth, rev
				if b%6 == 5 && b&0x20 != 0 && rev > 0 {
					// A replica behind: it has the world of a few changes ago.
					at = rev - min(rev, 1+uint64(b>>6))
					world = past[at]
				}
				cut := len(world) + 1
				if b&0x80 != 0 && at == rev {
					cut = int(b>>4) % (len(world) + 1)
				}
				if c.epoch == epoch && serverRev[epoch] == rev && b&0x40 != 0 {
					send(&watcherv1.WatchResponse{Type: watcherv1.EventType_EVENT_TYPE_SYNCED, Epoch: epoch, Revision: rev, ResumeRevision: c.resumeRev, Resumed: true})
					continue
				}
				n := 0
				for _, k := range slices.Sorted(maps.Keys(world)) {
					if n == cut || st == nil {
						break
					}
					n++
					send(&watcherv1.WatchResponse{Type: watcherv1.EventType_EVENT_TYPE_UPSERT, Epoch: epoch, Revision: at, Object: world[k]})
				}
				if n < cut && st != nil && send(&watcherv1.WatchResponse{Type: watcherv1.EventType_EVENT_TYPE_SYNCED, Epoch: epoch, Revision: at, ResumeRevision: at}) {
					// The replica catches up: the changes it had missed, in order.
					for r := at + 1; r <= rev && st != nil; r++ {
						d := proto.Clone(changes[r]).(*watcherv1.WatchResponse)
						d.Epoch, d.Revision, d.ResumeRevision = epoch, r, r
						send(d)
					}
					if st != nil {
						serverRev[epoch] = rev
						worldOrHeldBack("after SYNCED", false)
					}
				} else {
					st = nil
				}
			case 1, 2: // upsert
				rev++
				o := svc("ns", key, strconv.FormatUint(rev, 10), map[string]string{"tier": strconv.Itoa(int(b) % 3)})
				old := truth[key]
				truth[key] = o
				r := &watcherv1.WatchResponse{Type: watcherv1.EventType_EVENT_TYPE_UPSERT, Epoch: epoch, Revision: rev, ResumeRevision: rev, Object: o, OldObject: old}
				changed(r)
				if st != nil && st.synced {
					send(r)
					serverRev[epoch] = rev
				} else {
					st = nil // a change while connected mid-snapshot: model it as a broken stream
				}
			case 3: // delete
				old, ok := truth[key]
				if !ok {
					continue
				}
				rev++
				delete(truth, key)
				r := &watcherv1.WatchResponse{Type: watcherv1.EventType_EVENT_TYPE_DELETE, Epoch: epoch, Revision: rev, ResumeRevision: rev, Object: old}
				changed(r)
				if st != nil && st.synced {
					send(r)
					serverRev[epoch] = rev
				} else {
					st = nil
				}
			case 4: // heartbeat (perhaps after the grace has passed) or disconnect
				if st != nil && st.synced && b&0x10 != 0 {
					passed := b&0x20 != 0
					if passed {
						clock = clock.Add(grace)
						never.forgetDeleted()
					}
					if send(&watcherv1.WatchResponse{Type: watcherv1.EventType_EVENT_TYPE_HEARTBEAT, Epoch: epoch, Revision: rev, ResumeRevision: rev}) && passed && serverRev[epoch] == rev {
						worldOrHeldBack("after the lag grace", true)
					}
				} else {
					st = nil
				}
			}
		}
	})
}

// monotonic is a Handler that fails the test when it is handed a version of
// an object older than the last one it was handed or saw deleted.
type monotonic struct {
	t     *testing.T
	floor map[string]uint64 // Key -> version
	gone  map[string]bool
}

func (m *monotonic) see(o *watcherv1.Object, what string) {
	m.t.Helper()
	v, err := strconv.ParseUint(o.GetMeta().GetResourceVersion(), 10, 64)
	if err != nil {
		m.t.Fatal(err)
	}
	if v < m.floor[Key(o)] {
		m.t.Fatalf("%s of %s at version %d after version %d: the client went back", what, Key(o), v, m.floor[Key(o)])
	}
	m.floor[Key(o)] = v
}

func (m *monotonic) OnAdd(o *watcherv1.Object)       { m.see(o, "add"); delete(m.gone, Key(o)) }
func (m *monotonic) OnUpdate(_, o *watcherv1.Object) { m.see(o, "update") }
func (m *monotonic) OnDelete(o *watcherv1.Object) {
	m.see(o, "delete")
	if m.gone == nil {
		m.gone = map[string]bool{}
	}
	m.gone[Key(o)] = true
}

// forgetDeleted: past the grace the client no longer remembers deletions.
func (m *monotonic) forgetDeleted() {
	for k := range m.gone {
		delete(m.floor, k)
	}
	m.gone = nil
}

func storeMap(c *Client) map[string]*watcherv1.Object {
	out := map[string]*watcherv1.Object{}
	for _, o := range c.Store().List(watcherv1.Kind_KIND_SERVICE) {
		out[o.GetMeta().GetName()] = o
	}
	return out
}

func check(t *testing.T, c *Client, mirror *recorder) {
	t.Helper()
	objs := c.Store().List(watcherv1.Kind_KIND_SERVICE)
	mirror.mu.Lock()
	if len(objs) != len(mirror.mirror) {
		t.Fatalf("store has %d objects, handler mirror %d", len(objs), len(mirror.mirror))
	}
	for _, o := range objs {
		if !proto.Equal(mirror.mirror[Key(o)], o) {
			t.Fatalf("handler mirror disagrees with the store on %s", Key(o))
		}
	}
	mirror.mu.Unlock()
	for _, tier := range []string{"0", "1", "2"} {
		var want []string
		for _, o := range objs {
			if o.GetMeta().GetLabels()["tier"] == tier {
				want = append(want, Key(o))
			}
		}
		var got []string
		for _, o := range c.Store().ByIndex(watcherv1.Kind_KIND_SERVICE, "tier", tier) {
			got = append(got, Key(o))
		}
		if !slices.Equal(got, want) {
			t.Fatal(fmt.Sprintf("index tier=%s: %v, scan %v", tier, got, want))
		}
	}
}
