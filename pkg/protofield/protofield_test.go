package protofield

import (
	"slices"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
)

func TestEach(t *testing.T) {
	bytesField := func(b []byte, num protowire.Number, v string) []byte {
		return protowire.AppendString(protowire.AppendTag(b, num, protowire.BytesType), v)
	}
	varint := func(b []byte, num protowire.Number, v uint64) []byte {
		return protowire.AppendVarint(protowire.AppendTag(b, num, protowire.VarintType), v)
	}
	msg := bytesField(varint(bytesField(nil, 5, "a"), 5, 7), 2, "other")
	msg = bytesField(msg, 5, "b")
	for _, tc := range []struct {
		name       string
		msg        []byte
		field      protowire.Number
		want       []string
		wellFormed bool
	}{
		{"every occurrence in order, other fields and a varint of the same number skipped", msg, 5, []string{"a", "b"}, true},
		{"a field that is not there", msg, 9, nil, true},
		{"an empty message", nil, 5, nil, true},
		{"a value cut short", msg[:len(msg)-1], 5, []string{"a"}, false},
		{"a tag cut short", append(bytesField(nil, 5, "a"), 0x80), 5, []string{"a"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got []string
			ok := Each(tc.msg, tc.field, func(v []byte) { got = append(got, string(v)) })
			if !slices.Equal(got, tc.want) || ok != tc.wellFormed {
				t.Errorf("Each = %q, well formed %v; want %q, %v", got, ok, tc.want, tc.wellFormed)
			}
		})
	}
}
