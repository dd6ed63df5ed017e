package stream

import (
	"bytes"

	"google.golang.org/grpc/encoding"
	protocodec "google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/ipledger/ipledger/pkg/protofield"
	watcherv1 "github.com/ipledger/ipledger/proto/ipledger/watcher/v1"
)

// received is one WatchResponse and the bytes its object arrived in.
//
// The watcher sends every object in its deterministic encoding, made once
// when the state arrives (services/watcher/internal/store.Encode): exactly
// the form the store keeps. Keeping those bytes spares the client encoding
// every object again, a third of its CPU per object in a snapshot.
type received struct {
	resp watcherv1.WatchResponse
	// object is the encoding of resp.Object as sent, nil when the response
	// has none or the client cannot tell it apart (then the store encodes
	// the object itself).
	object []byte
}

// wireCodec is the Watch call's codec: gRPC's proto codec, except that a
// received is decoded with its object's bytes kept. Its name is the proto
// codec's, so the watcher decodes the call as any other (its content type is
// application/grpc+proto, the explicit spelling of application/grpc).
type wireCodec struct{}

// responseObjectField is WatchResponse.object's field number.
const responseObjectField protowire.Number = 5

func (wireCodec) Name() string { return protocodec.Name }

func (wireCodec) Marshal(v any) (mem.BufferSlice, error) {
	return encoding.GetCodecV2(protocodec.Name).Marshal(v)
}

func (wireCodec) Unmarshal(data mem.BufferSlice, v any) error {
	r, ok := v.(*received)
	if !ok {
		return encoding.GetCodecV2(protocodec.Name).Unmarshal(data, v)
	}
	buf := data.MaterializeToBuffer(mem.DefaultBufferPool())
	defer buf.Free()
	b := buf.ReadOnlyData()
	if err := proto.Unmarshal(b, &r.resp); err != nil {
		return err
	}
	r.object = objectField(b)
	return nil
}

// objectField returns a copy of the value of the one `object` field of an
// encoded WatchResponse, or nil when there is none, or more than one (the
// decoded object is then their merge, which no single field's bytes are).
func objectField(b []byte) []byte {
	var out []byte
	n := 0
	if !protofield.Each(b, responseObjectField, func(v []byte) { out, n = v, n+1 }) || n != 1 {
		return nil
	}
	return bytes.Clone(out)
}
