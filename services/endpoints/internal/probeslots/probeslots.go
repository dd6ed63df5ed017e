// Package probeslots decides which due readiness probe of ipledger-endpoints
// takes a free probe slot. The prober runs at most --probe-concurrency probes
// at once; a tenant who creates a thousand workloads that never answer would,
// first come first served, hold every slot for a whole timeout each and push
// every other namespace's probes back by minutes — their workloads flapping
// to not Ready through no fault of theirs. The slots are therefore shared
// among the namespaces that have probed workloads:
//
//   - a namespace's share is limit/N slots (at least one), N the namespaces
//     with probed workloads (or probes waiting or in flight);
//   - a namespace with nothing in flight takes any free slot;
//   - a namespace with probes in flight takes one more only if, once it
//     has, a slot is still free for each other namespace below its share
//     and one for a namespace not probing yet. So a quiet namespace's probe
//     finds a free slot at once however long the flood's probes hang, even
//     when the quiet workload arrives after the flood, while a namespace
//     alone (or beside idle ones) may use every slot but one;
//   - when several wait, namespaces below their share go first, served
//     round-robin, so none starves.
//
// The global bound is never exceeded. The decision is plain Go (no clock, no
// goroutines, no network): it is the policy of the prober's parallel.Shared,
// which holds the waiting probes and asks Table.Grant which to run whenever
// a slot frees or a probe arrives.
package probeslots

import "slices"

// Table is the state of the slots: per namespace its probed workloads, the
// probes it has in flight and those waiting. It is not safe for concurrent
// use; the prober guards it with a mutex.
type Table struct {
	limit    int
	inflight int
	ns       map[string]*namespace
	// order is the round-robin order of the namespaces known; last is the
	// namespace granted last, the scan starting after it.
	order []string
	last  string
}

type namespace struct {
	workloads, inflight, waiting int
}

// New returns a Table of limit slots (at least 1).
func New(limit int) *Table {
	return &Table{limit: max(limit, 1), ns: map[string]*namespace{}}
}

func (t *Table) get(ns string) *namespace {
	n := t.ns[ns]
	if n == nil {
		n = &namespace{}
		t.ns[ns] = n
		t.order = append(t.order, ns)
	}
	return n
}

// forget drops a namespace that has nothing left, so that it no longer
// counts in the shares.
func (t *Table) forget(ns string) {
	if n := t.ns[ns]; n != nil && n.workloads == 0 && n.inflight == 0 && n.waiting == 0 {
		delete(t.ns, ns)
		t.order = slices.DeleteFunc(t.order, func(s string) bool { return s == ns })
	}
}

// SetWorkloads says how many probed workloads ns has now.
func (t *Table) SetWorkloads(ns string, n int) {
	t.get(ns).workloads = max(n, 0)
	t.forget(ns)
}

// Enqueue records a due probe of ns waiting for a slot.
func (t *Table) Enqueue(ns string) { t.get(ns).waiting++ }

// Dequeue records that a waiting probe of ns gave up (its term or workload
// ended) before it was granted.
func (t *Table) Dequeue(ns string) {
	if n := t.ns[ns]; n != nil && n.waiting > 0 {
		n.waiting--
		t.forget(ns)
	}
}

// Release records that a probe of ns granted earlier has ended.
func (t *Table) Release(ns string) {
	if n := t.ns[ns]; n != nil && n.inflight > 0 {
		n.inflight--
		t.inflight--
		t.forget(ns)
	}
}

// Share is the slots each namespace is due now: limit/N, at least 1.
func (t *Table) Share() int { return max(1, t.limit/max(len(t.ns), 1)) }

// InFlight is the number of probes of ns granted and not released; with ns
// empty, of all namespaces.
func (t *Table) InFlight(ns string) int {
	if ns == "" {
		return t.inflight
	}
	if n := t.ns[ns]; n != nil {
		return n.inflight
	}
	return 0
}

// Grant picks the waiting probe to run next and counts it in flight: its
// namespace, or false when no waiting probe may take a slot now (none
// waits, every slot is taken, or those that wait already have probes in
// flight and the free slots are kept for the others).
func (t *Table) Grant() (string, bool) {
	free := t.limit - t.inflight
	if free <= 0 {
		return "", false
	}
	share := t.Share()
	below := 0 // namespaces below their share: each is kept a free slot
	for _, n := range t.ns {
		if n.inflight < share {
			below++
		}
	}
	// may: a namespace with nothing in flight takes any free slot; one with
	// probes in flight only if, once it has, a slot stays free for each
	// other namespace below its share and one for a namespace not probing
	// yet.
	may := func(n *namespace) bool {
		if n.inflight == 0 {
			return true
		}
		others := below
		if n.inflight < share {
			others-- // itself
		}
		return free-1 >= others+1
	}
	start := 0
	if i := slices.Index(t.order, t.last); i >= 0 {
		start = i + 1
	}
	pick := ""
	// Below their share first, round-robin; then the others.
	for _, anyShare := range []bool{false, true} {
		for i := range t.order {
			ns := t.order[(start+i)%len(t.order)]
			n := t.ns[ns]
			if n.waiting > 0 && (anyShare || n.inflight < share) && may(n) {
				pick = ns
				break
			}
		}
		if pick != "" {
			break
		}
	}
	if pick == "" {
		return "", false
	}
	n := t.ns[pick]
	n.waiting--
	n.inflight++
	t.inflight++
	t.last = pick
	return pick, true
}
