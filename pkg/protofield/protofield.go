// Package protofield reads the fields of an encoded protobuf message without
// decoding it: the watcher reads labels from the encodings it keeps, and the
// stream client keeps the bytes each object arrived in.
package protofield

import "google.golang.org/protobuf/encoding/protowire"

// Each calls fn with the value of every length-delimited occurrence of field
// in msg, in order, and reports whether msg is well formed to its end (fn
// has then seen every occurrence). Values alias msg.
func Each(msg []byte, field protowire.Number, fn func(value []byte)) (wellFormed bool) {
	for len(msg) > 0 {
		num, typ, n := protowire.ConsumeTag(msg)
		if n < 0 {
			return false
		}
		msg = msg[n:]
		if num == field && typ == protowire.BytesType {
			v, m := protowire.ConsumeBytes(msg)
			if m < 0 {
				return false
			}
			fn(v)
			msg = msg[m:]
			continue
		}
		m := protowire.ConsumeFieldValue(num, typ, msg)
		if m < 0 {
			return false
		}
		msg = msg[m:]
	}
	return true
}
