package store

import (
	"strings"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/ipledger/ipledger/pkg/protofield"
	watcherv1 "github.com/ipledger/ipledger/proto/ipledger/watcher/v1"
)

// Object is one state of an object as the watcher keeps it: its key and its
// encoding, made once when the state arrives and shared by the informer's
// cache, the store, its history, every subscriber's queue and every stream.
//
// The watcher keeps the encoding, not the decoded message, because that is
// what it sends and because a decoded compact object costs 4–5 times as much
// Go heap (message headers, label maps) as its few hundred bytes of protobuf.
// What the store needs besides (kind, namespace, name, labels for selectors)
// is read from the key or, for labels, from the encoding on demand.
type Object struct {
	key             string // "<kind>/<namespace>/<name>"; namespace and name are substrings of it
	kind            watcherv1.Kind
	resourceVersion string
	// wire is the object as field `object` of a WatchResponse (tag, length,
	// deterministic encoding): equal states have equal bytes.
	wire []byte
}

// Field numbers of WatchResponse that carry objects, and of the messages the
// labels are read from.
const (
	objectField    protowire.Number = 5
	oldObjectField protowire.Number = 6
	metaField      protowire.Number = 2 // Object.meta
	labelsField    protowire.Number = 6 // ObjectMeta.labels
)

// Encode makes the watcher's form of o, which must have a kind and a name.
func Encode(o *watcherv1.Object) *Object {
	enc, err := proto.MarshalOptions{Deterministic: true}.Marshal(o)
	if err != nil {
		// Marshal fails only on invalid UTF-8 in a string field, which the API
		// server does not produce; subscribers still learn that the object
		// exists (and its deletion) rather than nothing.
		enc = nil
	}
	wire := protowire.AppendTag(make([]byte, 0, protowire.SizeTag(objectField)+protowire.SizeBytes(len(enc))), objectField, protowire.BytesType)
	return &Object{
		key:             Key(o),
		kind:            o.GetKind(),
		resourceVersion: o.GetMeta().GetResourceVersion(),
		wire:            protowire.AppendBytes(wire, enc),
	}
}

// Key identifies an object across kinds: "<kind>/<namespace>/<name>".
func Key(o *watcherv1.Object) string {
	return o.GetKind().String() + "/" + o.GetMeta().GetNamespace() + "/" + o.GetMeta().GetName()
}

// Key is "<kind>/<namespace>/<name>".
func (o *Object) Key() string { return o.key }

// Kind is the object's kind.
func (o *Object) Kind() watcherv1.Kind { return o.kind }

// Namespace is the object's namespace, empty when cluster-scoped.
func (o *Object) Namespace() string {
	ns, _ := o.namespacedName()
	return ns
}

// Name is the object's name.
func (o *Object) Name() string {
	_, name := o.namespacedName()
	return name
}

// ResourceVersion is the object's metadata.resourceVersion.
func (o *Object) ResourceVersion() string { return o.resourceVersion }

// namespacedName splits the key; neither kind names nor namespaces contain a
// slash, and Kubernetes names do not either.
func (o *Object) namespacedName() (namespace, name string) {
	_, rest, _ := strings.Cut(o.key, "/")
	namespace, name, _ = strings.Cut(rest, "/")
	return namespace, name
}

// Labels reads the object's labels from its encoding. Only subscribers with a
// label selector need them, so they are not kept decoded.
func (o *Object) Labels() labels.Set {
	var meta []byte
	protofield.Each(o.message(), metaField, func(v []byte) { meta = v })
	var set labels.Set
	protofield.Each(meta, labelsField, func(entry []byte) {
		k, v := mapEntry(entry)
		if set == nil {
			set = labels.Set{}
		}
		set[k] = v
	})
	return set
}

// message is the object's encoding without the WatchResponse field header.
func (o *Object) message() []byte {
	_, _, n := protowire.ConsumeTag(o.wire)
	msg, _ := protowire.ConsumeBytes(o.wire[n:])
	return msg
}

// mapEntry decodes a map<string, string> entry (key = 1, value = 2).
func mapEntry(b []byte) (key, value string) {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return key, value
		}
		b = b[n:]
		if typ == protowire.BytesType && (num == 1 || num == 2) {
			v, m := protowire.ConsumeString(b)
			if m < 0 {
				return key, value
			}
			if num == 1 {
				key = v
			} else {
				value = v
			}
			b = b[m:]
			continue
		}
		m := protowire.ConsumeFieldValue(num, typ, b)
		if m < 0 {
			return key, value
		}
		b = b[m:]
	}
	return key, value
}

// Fields returns obj as WatchResponse field `object` and old as field
// `old_object` (each when not nil) in wire format. Set on a WatchResponse as
// unknown fields, they are marshalled verbatim and parsed by every client as
// the ordinary fields: a snapshot to 50 subscribers encodes each object once.
// With old nil the result is obj's own encoding, shared and not copied: it
// must not be modified.
func Fields(obj, old *Object) []byte {
	switch {
	case obj == nil && old == nil:
		return nil
	case old == nil:
		return obj.wire[:len(obj.wire):len(obj.wire)]
	}
	var b []byte
	if obj != nil {
		b = append(b, obj.wire...)
	}
	_, _, n := protowire.ConsumeTag(old.wire)
	b = protowire.AppendTag(b, oldObjectField, protowire.BytesType)
	return append(b, old.wire[n:]...)
}
