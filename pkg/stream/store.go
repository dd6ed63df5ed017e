package stream

import (
	"slices"
	"sort"
	"sync"

	"k8s.io/apimachinery/pkg/labels"

	"github.com/ipledger/ipledger/pkg/stream/objkey"
	watcherv1 "github.com/ipledger/ipledger/proto/ipledger/watcher/v1"
)

// Store is the read-only, indexed view of the streamed objects. Every method is
// safe for concurrent use. Returned objects are shared with the store and with
// every handler: never mutate them (proto.Clone first). Lists are sorted by Key.
type Store struct {
	mu    sync.RWMutex
	kinds map[watcherv1.Kind]*kindStore
}

type kindStore struct {
	objs     map[string]*watcherv1.Object            // Key -> object
	byNS     map[string]map[string]*watcherv1.Object // namespace -> Key -> object
	indexers map[string]func(*watcherv1.Object) []string
	indices  map[string]map[string]map[string]*watcherv1.Object // index -> value -> Key -> object
}

func newStore() *Store { return &Store{kinds: map[watcherv1.Kind]*kindStore{}} }

func (s *Store) kind(k watcherv1.Kind) *kindStore {
	ks := s.kinds[k]
	if ks == nil {
		ks = &kindStore{objs: map[string]*watcherv1.Object{}, byNS: map[string]map[string]*watcherv1.Object{},
			indexers: map[string]func(*watcherv1.Object) []string{}, indices: map[string]map[string]map[string]*watcherv1.Object{}}
		s.kinds[k] = ks
	}
	return ks
}

// Get returns the object of kind with that namespace ("" when cluster-scoped)
// and name.
func (s *Store) Get(kind watcherv1.Kind, namespace, name string) (*watcherv1.Object, bool) {
	return s.get(kind, objkey.Join(namespace, name))
}

// get returns the object of kind with key.
func (s *Store) get(kind watcherv1.Kind, key string) (*watcherv1.Object, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	ks := s.kinds[kind]
	if ks == nil {
		return nil, false
	}
	o, ok := ks.objs[key]
	return o, ok
}

// List returns every object of kind.
func (s *Store) List(kind watcherv1.Kind) []*watcherv1.Object {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if ks := s.kinds[kind]; ks != nil {
		return sorted(ks.objs)
	}
	return nil
}

// ListNamespace returns the objects of kind in namespace.
func (s *Store) ListNamespace(kind watcherv1.Kind, namespace string) []*watcherv1.Object {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if ks := s.kinds[kind]; ks != nil {
		return sorted(ks.byNS[namespace])
	}
	return nil
}

// ListSelector returns the objects of kind (in namespace, unless it is "")
// whose labels match sel.
func (s *Store) ListSelector(kind watcherv1.Kind, namespace string, sel labels.Selector) []*watcherv1.Object {
	s.mu.RLock()
	defer s.mu.RUnlock()
	ks := s.kinds[kind]
	if ks == nil {
		return nil
	}
	from := ks.objs
	if namespace != "" {
		from = ks.byNS[namespace]
	}
	var out []*watcherv1.Object
	for _, o := range from {
		if sel.Matches(labels.Set(o.GetMeta().GetLabels())) {
			out = append(out, o)
		}
	}
	sortObjects(out)
	return out
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
	idx := map[string]map[string]*watcherv1.Object{}
	ks.indices[name] = idx
	for key, o := range ks.objs {
		for _, v := range fn(o) {
			addTo(idx, v, key, o)
		}
	}
}

// ByIndex returns the objects of kind whose index name yields value.
func (s *Store) ByIndex(kind watcherv1.Kind, name, value string) []*watcherv1.Object {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if ks := s.kinds[kind]; ks != nil {
		return sorted(ks.indices[name][value])
	}
	return nil
}

// put stores o and returns the object it replaced.
func (s *Store) put(o *watcherv1.Object) (old *watcherv1.Object) {
	key := Key(o)
	s.mu.Lock()
	defer s.mu.Unlock()
	ks := s.kind(o.GetKind())
	old = ks.objs[key]
	if old != nil {
		ks.unindex(key, old)
	}
	ks.objs[key] = o
	addTo(ks.byNS, o.GetMeta().GetNamespace(), key, o)
	for name, fn := range ks.indexers {
		for _, v := range fn(o) {
			addTo(ks.indices[name], v, key, o)
		}
	}
	return old
}

// remove deletes the object of kind with key and returns it.
func (s *Store) remove(kind watcherv1.Kind, key string) (old *watcherv1.Object) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ks := s.kinds[kind]
	if ks == nil {
		return nil
	}
	old = ks.objs[key]
	if old != nil {
		ks.unindex(key, old)
		delete(ks.objs, key)
	}
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

// all returns every object, sorted by kind and Key (for replays).
func (s *Store) all() []*watcherv1.Object {
	s.mu.RLock()
	defer s.mu.RUnlock()
	kinds := make([]watcherv1.Kind, 0, len(s.kinds))
	for k := range s.kinds {
		kinds = append(kinds, k)
	}
	sort.Slice(kinds, func(i, j int) bool { return kinds[i] < kinds[j] })
	var out []*watcherv1.Object
	for _, k := range kinds {
		out = append(out, sorted(s.kinds[k].objs)...)
	}
	return out
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

func addTo(m map[string]map[string]*watcherv1.Object, v, key string, o *watcherv1.Object) {
	set := m[v]
	if set == nil {
		set = map[string]*watcherv1.Object{}
		m[v] = set
	}
	set[key] = o
}

func removeFrom(m map[string]map[string]*watcherv1.Object, v, key string) {
	if set := m[v]; set != nil {
		delete(set, key)
		if len(set) == 0 {
			delete(m, v)
		}
	}
}

func sorted(m map[string]*watcherv1.Object) []*watcherv1.Object {
	if len(m) == 0 {
		return nil
	}
	out := make([]*watcherv1.Object, 0, len(m))
	for _, o := range m {
		out = append(out, o)
	}
	sortObjects(out)
	return out
}

func sortObjects(objs []*watcherv1.Object) { slices.SortFunc(objs, objkey.Compare) }

// Key returns "namespace/name", or "name" for a cluster-scoped object (the
// format of package objkey, which decision packages use).
func Key(obj *watcherv1.Object) string { return objkey.Of(obj) }
