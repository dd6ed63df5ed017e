package stream

import (
	"bytes"
	"testing"

	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	watcherv1 "github.com/ipledger/ipledger/proto/ipledger/watcher/v1"
)

// TestWireCodecKeepsTheObjectAsSent: the store keeps the bytes the watcher
// sent, and they are the encoding the store would have made itself.
func TestWireCodecKeepsTheObjectAsSent(t *testing.T) {
	obj := svc("ns", "web", "7", map[string]string{"app": "web", "tier": "front", "team": "a"})
	upsert := &watcherv1.WatchResponse{Type: watcherv1.EventType_EVENT_TYPE_UPSERT, Epoch: "e1", Revision: 7, Object: obj}
	synced := &watcherv1.WatchResponse{Type: watcherv1.EventType_EVENT_TYPE_SYNCED, Epoch: "e1", Revision: 7}
	sent := func(m proto.Message) []byte {
		b, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	// Two object fields: protobuf merges them, which neither one's bytes is.
	twice := protowire.AppendBytes(protowire.AppendTag(sent(upsert), responseObjectField, protowire.BytesType), encode(svc("ns", "web", "8", nil)))

	for _, tc := range []struct {
		name       string
		frame      []byte
		wantObject []byte
	}{
		{"an UPSERT carries the object's deterministic encoding", sent(upsert), encode(obj)},
		{"SYNCED carries no object", sent(synced), nil},
		{"an object sent twice is encoded by the store", twice, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var r received
			// The frame split in two buffers, as gRPC may deliver it.
			half := len(tc.frame) / 2
			data := mem.BufferSlice{mem.SliceBuffer(tc.frame[:half]), mem.SliceBuffer(tc.frame[half:])}
			if err := (wireCodec{}).Unmarshal(data, &r); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(r.object, tc.wantObject) {
				t.Errorf("kept object bytes %x, want %x", r.object, tc.wantObject)
			}
			var want watcherv1.WatchResponse
			if err := proto.Unmarshal(tc.frame, &want); err != nil {
				t.Fatal(err)
			}
			if !proto.Equal(&r.resp, &want) {
				t.Errorf("decoded %v, want %v", &r.resp, &want)
			}
		})
	}
}

func TestWireCodecRefusesATruncatedFrame(t *testing.T) {
	b, err := proto.Marshal(&watcherv1.WatchResponse{Type: watcherv1.EventType_EVENT_TYPE_UPSERT, Object: svc("ns", "web", "7", nil)})
	if err != nil {
		t.Fatal(err)
	}
	var r received
	if err := (wireCodec{}).Unmarshal(mem.BufferSlice{mem.SliceBuffer(b[:len(b)-3])}, &r); err == nil {
		t.Fatal("a truncated frame was decoded")
	}
}

// TestStoreTakesAnEqualObjectEncodedOtherwiseAsUnchanged: a sender that
// orders fields otherwise sends an equal object in other bytes; it is no
// update.
func TestStoreTakesAnEqualObjectEncodedOtherwiseAsUnchanged(t *testing.T) {
	s := newStore()
	obj := svc("ns", "web", "7", map[string]string{"app": "web", "tier": "front"})
	if !s.put(obj, nil) {
		t.Fatal("a new object was not stored")
	}
	reordered := encodeMetaLast(t, obj)
	if bytes.Equal(reordered, encode(obj)) {
		t.Fatal("the test's two encodings are equal")
	}
	if s.putEncoded(obj, reordered, nil) {
		t.Error("an equal object in other bytes was taken as an update")
	}
	if !s.putEncoded(svc("ns", "web", "8", nil), nil, nil) {
		t.Error("a changed object was not taken as an update")
	}
}

// encodeMetaLast encodes obj with its metadata after its body, where a
// deterministic encoding puts it before (fields in number order); protobuf
// decodes both alike.
func encodeMetaLast(t *testing.T, obj *watcherv1.Object) []byte {
	t.Helper()
	bare := proto.Clone(obj).(*watcherv1.Object)
	bare.Meta = nil
	det := proto.MarshalOptions{Deterministic: true}
	body, err := det.Marshal(bare)
	if err != nil {
		t.Fatal(err)
	}
	meta, err := det.Marshal(obj.GetMeta())
	if err != nil {
		t.Fatal(err)
	}
	return protowire.AppendBytes(protowire.AppendTag(body, 2, protowire.BytesType), meta)
}
