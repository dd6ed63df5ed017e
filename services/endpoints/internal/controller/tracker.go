package controller

import (
	"fmt"
	"sync"
	"time"

	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/ipledger/ipledger/pkg/expect"
)

// tracker remembers, for one leadership term, every slice write this
// replica made, so that a sync can tell when the stream's view has not
// caught up with its own writes yet (a stale view) and wait instead of
// acting on it: acting would re-create a slice it just created, or undo an
// update. It is built empty at the start of every term: a tracker kept
// across terms would expect slices that were changed or deleted while this
// replica was not leading, and never see its expectations met (the Linkerd
// endpoints-controller bug this design exists to prevent).
//
// The writes of each Service are a pkg/expect Set (as ipam's and eipd's
// are) keyed by slice name. Its timeout (--expectation-timeout) bounds how
// long an expectation may hold syncs back. The stream delivers every
// change, so this only matters if an event is lost; the API server still
// refuses a write from a stale view (resourceVersion preconditions,
// deterministic slice names), so dropping an old expectation cannot create
// a duplicate. An expectation the view has met stays (expect.Shown) until
// its slice's deletion or the Service's: it recognises the echo of the
// write, and of the delete.
type tracker struct {
	expire time.Duration
	now    func() time.Time

	mu       sync.Mutex
	services map[string]*expect.Set[string, expectation] // service key -> slice name -> what we expect
	waiting  map[string]bool                             // services whose last sync found a stale view
	taken    map[string]map[string]bool                  // service key -> names a create found taken
}

// expectation is what the view must show for a slice before we act again.
type expectation struct {
	uid        types.UID
	generation int64  // at least this generation
	rv         string // the resourceVersion we wrote (diagnostics, and exact echo detection)
	deleted    bool   // we deleted it: the view must not show this uid
	exists     bool   // a create found the name taken: the view must show the name, whatever its generation
}

// seen compares the view's slice of e's name (nil when the view has none)
// with e, and says why the view is behind it ("" when it is not).
func (e expectation) seen(name string, s *discoveryv1.EndpointSlice) (expect.Seen, string) {
	switch {
	case e.exists:
		if s == nil {
			return expect.Behind, fmt.Sprintf("slice %s exists but is not in the view yet", name)
		}
	case e.deleted:
		if s != nil && s.UID == e.uid {
			return expect.Behind, fmt.Sprintf("slice %s was deleted but is still in the view", name)
		}
	case s == nil:
		return expect.Behind, fmt.Sprintf("slice %s was written at generation %d but is not in the view yet", name, e.generation)
	case s.UID != e.uid:
		// Replaced since we wrote it (deleted and re-created): the view
		// is newer than our write, which no longer matters.
		return expect.Done, ""
	case s.Generation < e.generation:
		return expect.Behind, fmt.Sprintf("slice %s is at generation %d in the view, we wrote %d", name, s.Generation, e.generation)
	}
	return expect.Shown, ""
}

// newTracker returns an empty tracker whose expectations hold syncs back
// at most expire (forever when expire <= 0), on the clock now.
func newTracker(expire time.Duration, now func() time.Time) *tracker {
	return &tracker{expire: expire, now: now, services: map[string]*expect.Set[string, expectation]{}, waiting: map[string]bool{}, taken: map[string]map[string]bool{}}
}

func (t *tracker) set(svc, name string, e expectation) {
	t.mu.Lock()
	defer t.mu.Unlock()
	m := t.services[svc]
	if m == nil {
		m = expect.New[string, expectation](t.expire, t.now)
		t.services[svc] = m
	}
	m.Wrote(name, e)
}

// Wrote records a slice as the API server returned it from a create or update.
func (t *tracker) Wrote(svc string, s *discoveryv1.EndpointSlice) {
	t.set(svc, s.Name, expectation{uid: s.UID, generation: s.Generation, rv: s.ResourceVersion})
}

// Deleted records a delete of the slice with that uid.
func (t *tracker) Deleted(svc, name string, uid types.UID) {
	t.set(svc, name, expectation{uid: uid, deleted: true})
}

// Taken records that a create found the name already taken: the view has
// missed a slice that exists.
func (t *tracker) Taken(svc, name string) {
	t.set(svc, name, expectation{exists: true})
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.taken[svc] == nil {
		t.taken[svc] = map[string]bool{}
	}
	t.taken[svc][name] = true
}

// TakenNames are the names creates found taken for the Service. New slices
// avoid them, so a name held by a slice the view never shows (another
// manager's) does not block the Service once its expectation expired.
func (t *tracker) TakenNames(svc string) []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make([]string, 0, len(t.taken[svc]))
	for n := range t.taken[svc] {
		out = append(out, n)
	}
	return out
}

// Stale compares the view of a Service's slices with what this term wrote.
// It returns why the view is stale, or "" when it may be acted on.
func (t *tracker) Stale(svc string, view []*discoveryv1.EndpointSlice) string {
	t.mu.Lock()
	defer t.mu.Unlock()
	exp := t.services[svc]
	if exp == nil || exp.Len() == 0 {
		delete(t.waiting, svc)
		return ""
	}
	byName := make(map[string]*discoveryv1.EndpointSlice, len(view))
	for _, s := range view {
		byName[s.Name] = s
	}
	for name := range exp.All() {
		reason := ""
		if _, behind := exp.Check(name, func(e expectation) expect.Seen {
			var seen expect.Seen
			seen, reason = e.seen(name, byName[name])
			return seen
		}); behind {
			t.waiting[svc] = true
			return reason
		}
	}
	delete(t.waiting, svc)
	return ""
}

// ShouldSync says whether an add or update of one of the Service's slices
// needs a sync: not when it is merely the echo of this term's own write,
// unless a sync is waiting for exactly that echo.
func (t *tracker) ShouldSync(svc string, s *discoveryv1.EndpointSlice) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.waiting[svc] {
		return true
	}
	e, ok := t.get(svc, s.Name)
	if !ok || e.deleted || e.exists {
		return true
	}
	return e.uid != s.UID || s.Generation > e.generation
}

// HandleDeletion forgets a deleted slice and reports whether the delete was
// this term's own (expected) one.
func (t *tracker) HandleDeletion(svc string, s *discoveryv1.EndpointSlice) (expected bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	e, ok := t.get(svc, s.Name)
	if !ok {
		return false
	}
	if e.exists || e.uid == s.UID || e.uid == "" {
		t.services[svc].Forget(s.Name)
	}
	return e.deleted && e.uid == s.UID
}

// get returns what this term expects of the Service's slice name, met or
// not, expired or not.
func (t *tracker) get(svc, name string) (expectation, bool) {
	if m := t.services[svc]; m != nil {
		return m.Get(name)
	}
	return expectation{}, false
}

// Forget drops everything about a Service (it was deleted).
func (t *tracker) Forget(svc string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.services, svc)
	delete(t.waiting, svc)
	delete(t.taken, svc)
}
