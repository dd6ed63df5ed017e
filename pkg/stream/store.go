package stream

import (
	"bytes"
	"fmt"
	"iter"
	"maps"
	"slices"
	"sync"

	"google.golang.org/protobuf/proto"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/ipledger/ipledger/pkg/parallel"
	"github.com/ipledger/ipledger/pkg/stream/objkey"
	watcherv1 "github.com/ipledger/ipledger/proto/ipledger/watcher/v1"
)

// Store is the read-only, indexed view of the streamed objects. Every method is
// safe for concurrent use. Lists are sorted by Key.
//
// The store holds each object in its protobuf encoding, the bytes the
// watcher sent (wire.go) or, without them, its own deterministic encoding,
// and decodes it on every read: a decoded Service costs about 1.9 KB of
// heap, its encoding a few hundred bytes, and a consumer keeps every object
// of its kinds for its whole life (BENCHMARKS.md, ipam's RSS). Returned
// objects are therefore the caller's own; a caller that holds one keeps a
// snapshot, not a live view.
type Store struct {
	mu    sync.RWMutex
	kinds map[watcherv1.Kind]*kindStore
}

// keySet is a set of Keys.
type keySet = map[string]struct{}

type kindStore struct {
	// generation counts the changes taken: every put that changed an
	// object and every removal.
	generation uint64
	objs       map[string][]byte // Key -> encoded object
	byNS       map[string]keySet // namespace -> Keys
	indexers   map[string]func(*watcherv1.Object) []string
	indices    map[string]map[string]keySet // index -> value -> Keys
	derivers   map[string]func(*watcherv1.Object) any
	attrs      map[string]map[string]any // attribute -> Key -> value
}

func newStore() *Store { return &Store{kinds: map[watcherv1.Kind]*kindStore{}} }

func (s *Store) kind(k watcherv1.Kind) *kindStore {
	ks := s.kinds[k]
	if ks == nil {
		ks = &kindStore{objs: map[string][]byte{}, byNS: map[string]keySet{},
			indexers: map[string]func(*watcherv1.Object) []string{}, indices: map[string]map[string]keySet{},
			derivers: map[string]func(*watcherv1.Object) any{}, attrs: map[string]map[string]any{}}
		s.kinds[k] = ks
	}
	return ks
}

// encode is the store's form of an object: deterministic, so that two equal
// objects encode to equal bytes.
func encode(o *watcherv1.Object) []byte {
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(o)
	if err != nil {
		// Only an invalid UTF-8 string can fail, and the object was just
		// decoded from the same encoding, which rejects those.
		panic(fmt.Sprintf("stream: encode %s %s: %v", o.GetKind(), Key(o), err))
	}
	return b
}

// decode reads an object the store holds.
func decode(b []byte) *watcherv1.Object {
	o := &watcherv1.Object{}
	if err := proto.Unmarshal(b, o); err != nil {
		panic(fmt.Sprintf("stream: decode a stored object: %v", err))
	}
	return o
}

// Get returns the object of kind with that namespace ("" when cluster-scoped)
// and name.
func (s *Store) Get(kind watcherv1.Kind, namespace, name string) (*watcherv1.Object, bool) {
	return s.get(kind, objkey.Join(namespace, name))
}

// get returns the object of kind with key.
func (s *Store) get(kind watcherv1.Kind, key string) (*watcherv1.Object, bool) {
	s.mu.RLock()
	ks := s.kinds[kind]
	var b []byte
	if ks != nil {
		b = ks.objs[key]
	}
	s.mu.RUnlock()
	if b == nil {
		return nil, false
	}
	return decode(b), true
}

// List returns every object of kind.
func (s *Store) List(kind watcherv1.Kind) []*watcherv1.Object {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if ks := s.kinds[kind]; ks != nil {
		return ks.decodeSorted(maps.Keys(ks.objs))
	}
	return nil
}

// ListNamespace returns the objects of kind in namespace.
func (s *Store) ListNamespace(kind watcherv1.Kind, namespace string) []*watcherv1.Object {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if ks := s.kinds[kind]; ks != nil {
		return ks.decodeSorted(maps.Keys(ks.byNS[namespace]))
	}
	return nil
}

// ListSelector returns the objects of kind (in namespace, unless it is "")
// whose labels match sel.
func (s *Store) ListSelector(kind watcherv1.Kind, namespace string, sel labels.Selector) []*watcherv1.Object {
	var from []*watcherv1.Object
	if namespace != "" {
		from = s.ListNamespace(kind, namespace)
	} else {
		from = s.List(kind)
	}
	return slices.DeleteFunc(from, func(o *watcherv1.Object) bool {
		return !sel.Matches(labels.Set(o.GetMeta().GetLabels()))
	})
}

// Generation counts the changes to the objects of kind the store has
// taken (each put that changed an object, each removal). It only grows, so
// an unchanged count means unchanged objects: a reader that derives
// something from a List can keep it until the count moves, without decoding
// the List again. Read the count before the List it keys.
func (s *Store) Generation(kind watcherv1.Kind) uint64 {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if ks := s.kinds[kind]; ks != nil {
		return ks.generation
	}
	return 0
}

// Len is the number of objects of kind.
func (s *Store) Len(kind watcherv1.Kind) int {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if ks := s.kinds[kind]; ks != nil {
		return len(ks.objs)
	}
	return 0
}

// AddIndex adds a custom index on kind: fn returns the values an object is
// found under with ByIndex. Call it before Run; objects already held are
// indexed too. Adding an index name twice replaces it.
func (s *Store) AddIndex(kind watcherv1.Kind, name string, fn func(*watcherv1.Object) []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ks := s.kind(kind)
	ks.indexers[name] = fn
	idx := map[string]keySet{}
	ks.indices[name] = idx
	for key, b := range ks.objs {
		for _, v := range fn(decode(b)) {
			addTo(idx, v, key)
		}
	}
}

// ByIndex returns the objects of kind whose index name yields value.
func (s *Store) ByIndex(kind watcherv1.Kind, name, value string) []*watcherv1.Object {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if ks := s.kinds[kind]; ks != nil {
		return ks.decodeSorted(maps.Keys(ks.indices[name][value]))
	}
	return nil
}

// IndexKeys returns the Keys of the objects of kind whose index name yields
// value, sorted, without decoding them: for a caller that needs only the
// keys, or keeps what it reads of them itself.
func (s *Store) IndexKeys(kind watcherv1.Kind, name, value string) []string {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if ks := s.kinds[kind]; ks != nil {
		if set := ks.indices[name][value]; len(set) > 0 {
			return slices.Sorted(maps.Keys(set))
		}
	}
	return nil
}

// AddAttribute keeps, beside every object of kind, the value fn derives
// from it: computed when the object is stored, dropped when it is removed,
// and read with Attribute without decoding the object (a consumer that
// orders or matches many objects by one small field). Call it before Run;
// objects already held get it too. Adding a name twice replaces it.
func (s *Store) AddAttribute(kind watcherv1.Kind, name string, fn func(*watcherv1.Object) any) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ks := s.kind(kind)
	ks.derivers[name] = fn
	vals := make(map[string]any, len(ks.objs))
	ks.attrs[name] = vals
	for key, b := range ks.objs {
		vals[key] = fn(decode(b))
	}
}

// Attribute returns the value attribute name has for the object of kind
// with key, and whether the store holds that object.
func (s *Store) Attribute(kind watcherv1.Kind, name, key string) (any, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if ks := s.kinds[kind]; ks != nil {
		v, ok := ks.attrs[name][key]
		return v, ok
	}
	return nil, false
}

// put stores o in place of held, the object the store holds under o's key
// (nil when none; only the Run goroutine writes the store, so the caller's
// read is still current), and reports whether o differs from it.
func (s *Store) put(o, held *watcherv1.Object) (changed bool) { return s.putEncoded(o, nil, held) }

// putEncoded is put of o whose encoding is enc, as the watcher sent it (nil:
// encode o here). enc becomes the store's when o is a change.
func (s *Store) putEncoded(o *watcherv1.Object, enc []byte, held *watcherv1.Object) (changed bool) {
	key, b := Key(o), enc
	if b == nil {
		b = encode(o)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	ks := s.kind(o.GetKind())
	if prev, ok := ks.objs[key]; ok {
		if bytes.Equal(prev, b) {
			return false
		}
		if held == nil {
			held = decode(prev)
		}
		if proto.Equal(held, o) {
			// Equal, encoded otherwise: a sender whose encoding is not
			// deterministic (the watcher's is).
			return false
		}
		ks.unindex(key, held)
	}
	ks.objs[key] = b
	ks.generation++
	addTo(ks.byNS, o.GetMeta().GetNamespace(), key)
	for name, fn := range ks.indexers {
		for _, v := range fn(o) {
			addTo(ks.indices[name], v, key)
		}
	}
	for name, fn := range ks.derivers {
		ks.attrs[name][key] = fn(o)
	}
	return true
}

// remove deletes the object of kind with key and returns it.
func (s *Store) remove(kind watcherv1.Kind, key string) (old *watcherv1.Object) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ks := s.kinds[kind]
	if ks == nil {
		return nil
	}
	b, ok := ks.objs[key]
	if !ok {
		return nil
	}
	old = decode(b)
	ks.unindex(key, old)
	delete(ks.objs, key)
	for name := range ks.attrs {
		delete(ks.attrs[name], key)
	}
	ks.generation++
	return old
}

// keys returns the kind and Key of every object held.
func (s *Store) keys() map[objectRef]struct{} {
	s.mu.RLock()
	defer s.mu.RUnlock()
	out := map[objectRef]struct{}{}
	for k, ks := range s.kinds {
		for key := range ks.objs {
			out[objectRef{k, key}] = struct{}{}
		}
	}
	return out
}

// all yields every object, sorted by kind and Key (for replays), decoded
// as the caller reaches them (see All).
func (s *Store) all() iter.Seq[*watcherv1.Object] {
	s.mu.RLock()
	kinds := slices.Sorted(maps.Keys(s.kinds))
	var encs [][]byte
	for _, k := range kinds {
		ks := s.kinds[k]
		encs = append(encs, ks.encodingsSorted(maps.Keys(ks.objs))...)
	}
	s.mu.RUnlock()
	return decodeEach(encs)
}

// All yields every object of kind, sorted by Key, as the store held them
// when All was called. They are decoded as the caller reaches them (a few
// hundred ahead, on another core), so a pass over thousands of objects that
// keeps none of them holds at most three chunks of decodeAhead at a time, where
// List holds them all (a Service decoded is about 2 KB, five times its
// encoding).
func (s *Store) All(kind watcherv1.Kind) iter.Seq[*watcherv1.Object] {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if ks := s.kinds[kind]; ks != nil {
		return decodeEach(ks.encodingsSorted(maps.Keys(ks.objs)))
	}
	return decodeEach(nil)
}

// decodeSorted decodes the objects with keys, sorted by Key (the order
// objkey.Compare gives), with the store's read lock held.
func (ks *kindStore) decodeSorted(keys iter.Seq[string]) []*watcherv1.Object {
	encs := ks.encodingsSorted(keys)
	if len(encs) == 0 {
		return nil
	}
	out := make([]*watcherv1.Object, len(encs))
	for i, b := range encs {
		out[i] = decode(b)
	}
	return out
}

// encodingsSorted returns the encodings of the objects with keys, sorted by
// Key, with the store's read lock held. They may be decoded after the lock
// is released: put stores a new encoding, it never changes one.
func (ks *kindStore) encodingsSorted(keys iter.Seq[string]) [][]byte {
	sorted := slices.Sorted(keys)
	encs := make([][]byte, len(sorted))
	for i, key := range sorted {
		encs[i] = ks.objs[key]
	}
	return encs
}

// decodeAhead is how many objects All decodes at a time ahead of its
// caller: a few hundred KB of decoded Services.
const decodeAhead = 256

// decodeEach yields encs decoded, on another core a few hundred ahead of
// the caller (parallel.Ahead): ipam's rebuild reads 100,000 Services, and
// their decode was half of its CPU (BENCHMARKS.md).
func decodeEach(encs [][]byte) iter.Seq[*watcherv1.Object] {
	return parallel.Ahead(encs, decodeAhead, decode)
}

func (ks *kindStore) unindex(key string, o *watcherv1.Object) {
	removeFrom(ks.byNS, o.GetMeta().GetNamespace(), key)
	for name, fn := range ks.indexers {
		for _, v := range fn(o) {
			removeFrom(ks.indices[name], v, key)
		}
	}
}

type objectRef struct {
	kind watcherv1.Kind
	key  string
}

func addTo(m map[string]keySet, v, key string) {
	set := m[v]
	if set == nil {
		set = keySet{}
		m[v] = set
	}
	set[key] = struct{}{}
}

func removeFrom(m map[string]keySet, v, key string) {
	if set := m[v]; set != nil {
		delete(set, key)
		if len(set) == 0 {
			delete(m, v)
		}
	}
}

// Key returns "namespace/name", or "name" for a cluster-scoped object (the
// format of package objkey, which decision packages use).
func Key(obj *watcherv1.Object) string { return objkey.Of(obj) }
