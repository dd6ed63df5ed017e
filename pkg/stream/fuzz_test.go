package stream

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"testing"

	"google.golang.org/protobuf/proto"

	watcherv1 "github.com/ipledger/ipledger/proto/ipledger/watcher/v1"
)

// FuzzClientStore drives the client's event handling with random sequences of
// streams (complete or broken snapshots, resumes, deltas, changes made while
// disconnected) and checks after every event that a handler's mirror equals the
// store, that the custom index agrees with a scan, and that after every
// complete snapshot the store equals the watcher's world exactly.
func FuzzClientStore(f *testing.F) {
	f.Add([]byte{0, 1, 2, 3, 1, 2, 0, 5, 9, 13, 4, 0})
	f.Add([]byte{0, 17, 33, 6, 0, 2, 1, 2, 3, 4, 5, 6, 7})
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := New(Config{Target: "127.0.0.1:1", Plaintext: true, Kinds: []watcherv1.Kind{watcherv1.Kind_KIND_SERVICE}}, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		c.Store().AddIndex(watcherv1.Kind_KIND_SERVICE, "tier", func(o *watcherv1.Object) []string {
			return []string{o.GetMeta().GetLabels()["tier"]}
		})
		mirror := newRecorder()
		c.AddHandler(mirror)

		truth := map[string]*watcherv1.Object{}
		var (
			st        *session // nil: disconnected
			epoch     = "e0"
			epochN    = 0
			rev       uint64
			serverRev = map[string]uint64{} // epoch -> revisions it has
		)
		send := func(r *watcherv1.WatchResponse) bool {
			if err := c.handle(st, r); err != nil {
				st = nil // the client would drop the stream
				return false
			}
			check(t, c, mirror)
			return true
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
				cut := len(truth) + 1
				if b&0x80 != 0 {
					cut = int(b>>4) % (len(truth) + 1)
				}
				if c.epoch == epoch && serverRev[epoch] == rev && b&0x40 != 0 {
					send(&watcherv1.WatchResponse{Type: watcherv1.EventType_EVENT_TYPE_SYNCED, Epoch: epoch, Revision: rev, ResumeRevision: c.resumeRev, Resumed: true})
					continue
				}
				n := 0
				for _, k := range slices.Sorted(maps.Keys(truth)) {
					if n == cut || st == nil {
						break
					}
					n++
					send(&watcherv1.WatchResponse{Type: watcherv1.EventType_EVENT_TYPE_UPSERT, Epoch: epoch, Revision: rev, Object: truth[k]})
				}
				if n < cut && st != nil && send(&watcherv1.WatchResponse{Type: watcherv1.EventType_EVENT_TYPE_SYNCED, Epoch: epoch, Revision: rev, ResumeRevision: rev}) {
					serverRev[epoch] = rev
					if got := storeMap(c); !maps.EqualFunc(got, truth, func(a, b *watcherv1.Object) bool { return proto.Equal(a, b) }) {
						t.Fatalf("after SYNCED store %v, want %v", slices.Sorted(maps.Keys(got)), slices.Sorted(maps.Keys(truth)))
					}
				} else {
					st = nil
				}
			case 1, 2: // upsert
				rev++
				o := svc("ns", key, strconv.FormatUint(rev, 10), map[string]string{"tier": strconv.Itoa(int(b) % 3)})
				old := truth[key]
				truth[key] = o
				if st != nil && st.synced {
					send(&watcherv1.WatchResponse{Type: watcherv1.EventType_EVENT_TYPE_UPSERT, Epoch: epoch, Revision: rev, ResumeRevision: rev, Object: o, OldObject: old})
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
				if st != nil && st.synced {
					send(&watcherv1.WatchResponse{Type: watcherv1.EventType_EVENT_TYPE_DELETE, Epoch: epoch, Revision: rev, ResumeRevision: rev, Object: old})
					serverRev[epoch] = rev
				} else {
					st = nil
				}
			case 4: // heartbeat or disconnect
				if st != nil && st.synced && b&0x10 != 0 {
					send(&watcherv1.WatchResponse{Type: watcherv1.EventType_EVENT_TYPE_HEARTBEAT, Epoch: epoch, Revision: rev, ResumeRevision: rev})
				} else {
					st = nil
				}
			}
		}
	})
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
		if mirror.mirror[Key(o)] != o {
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
