package server

import (
	"context"
	"errors"
	"slices"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	ipamv1 "github.com/ipledger/ipledger/proto/ipledger/ipam/v1"
	watcherv1 "github.com/ipledger/ipledger/proto/ipledger/watcher/v1"
	"github.com/ipledger/ipledger/services/ipam/internal/allocator"
	"github.com/ipledger/ipledger/services/ipam/internal/ledger"
	"github.com/ipledger/ipledger/services/ipam/internal/objects"
	"github.com/ipledger/ipledger/services/ipam/internal/plan"
	"github.com/ipledger/ipledger/services/ipam/internal/poolstate"
)

// parsedLedger is the outcome of parsing the ledger at one version of its
// shards: the store's generation of ledger ConfigMaps.
type parsedLedger struct {
	generation uint64
	state      ledger.State
	err        error
}

// ledgerState parses the streamed ledger once per version of its shards. A
// ledger that does not parse (or a split seen half-way) answers with the
// last state that did, so reads never fail for a moment's inconsistency; a
// corrupt ledger is reported by the leader. The outcome, failures included,
// is kept until a shard changes: a corrupt ledger is not parsed again on
// every call, and no call decodes the shards while none changed (the store
// holds encodings; decoding 10,000 entries on every call made a read cost
// 7–9× the gRPC floor).
func (s *Server) ledgerState() (ledger.State, uint64, error) {
	gen := s.store().Generation(watcherv1.Kind_KIND_LEDGER_CONFIG_MAP) // before the List it keys
	s.ledgerMu.Lock()
	defer s.ledgerMu.Unlock()
	if p := s.ledger; p != nil && p.generation == gen {
		return p.state, gen, p.err
	}
	var shards []*watcherv1.Object
	for _, o := range s.store().List(watcherv1.Kind_KIND_LEDGER_CONFIG_MAP) {
		if o.GetMeta().GetNamespace() == s.cfg.Namespace {
			shards = append(shards, o)
		}
	}
	st, _, err := ledger.Parse(objects.LedgerData(shards, s.cfg.Namespace))
	if err != nil {
		s.m.parses.WithLabelValues("failed").Inc()
	} else {
		s.m.parses.WithLabelValues("ok").Inc()
	}
	var ce *ledger.CorruptError
	switch {
	case err == nil:
		s.good = st
	case errors.As(err, &ce) && len(s.good.Allocations)+len(s.good.Reservations) > 0:
		st, err = s.good, nil
	default:
		st, err = ledger.State{}, status.Errorf(codes.Unavailable, "the ledger cannot be read: %v", err)
	}
	s.ledger = &parsedLedger{generation: gen, state: st, err: err}
	return st, gen, err
}

// readState is the version of the ledger and the IPPools that reads answer
// from. seq grows by one each time either changes.
type readState struct {
	seq uint64
	// generations of the ledger ConfigMaps and of the IPPools it was read at.
	ledgerGen, poolGen uint64
	ledger             ledger.State
	pools              []*watcherv1.Object // the streamed IPPools, sorted by name
}

// readState returns the current version of the ledger and IPPools. The
// versions are read under stateMu, so seq never goes back.
func (s *Server) readState() (*readState, error) {
	s.stateMu.Lock()
	defer s.stateMu.Unlock()
	poolGen := s.store().Generation(watcherv1.Kind_KIND_IP_POOL) // before the List it keys
	st, ledgerGen, err := s.ledgerState()
	if err != nil {
		return nil, err
	}
	if s.state == nil || s.state.ledgerGen != ledgerGen || s.state.poolGen != poolGen {
		seq := uint64(1)
		if s.state != nil {
			seq = s.state.seq + 1
		}
		s.state = &readState{seq: seq, ledgerGen: ledgerGen, poolGen: poolGen, ledger: st, pools: s.store().List(watcherv1.Kind_KIND_IP_POOL)}
	}
	return s.state, nil
}

// coalesced is a value built from the read state on demand: rebuilt only
// when a caller needs a newer version than the one it holds, one build at a
// time, always from the newest version. Callers arriving during a build wait
// for it (or for the next one, if it started before the version they saw)
// instead of starting their own. So the work follows the rate of change,
// never the rate of calls, and never exceeds one build at a time, however
// fast the ledger changes.
type coalesced[T any] struct {
	mu       sync.Mutex
	val      T
	seq      uint64        // the version val was built from; 0: none
	building chan struct{} // non-nil while a build runs, closed when it ends
	waiting  int           // callers waiting for a build (for tests)
}

// get returns a value built from version want or newer. build builds one
// from the newest version and returns that version's seq.
func (c *coalesced[T]) get(ctx context.Context, want uint64, build func() (T, uint64, error)) (T, error) {
	var zero T
	for {
		c.mu.Lock()
		if c.seq != 0 && c.seq >= want {
			v := c.val
			c.mu.Unlock()
			return v, nil
		}
		if ch := c.building; ch != nil {
			c.waiting++
			c.mu.Unlock()
			var err error
			select {
			case <-ch:
			case <-ctx.Done():
				err = status.FromContextError(ctx.Err()).Err()
			}
			c.mu.Lock()
			c.waiting--
			c.mu.Unlock()
			if err != nil {
				return zero, err
			}
			continue
		}
		ch := make(chan struct{})
		c.building = ch
		c.mu.Unlock()
		v, seq, err := c.run(ch, build)
		if err != nil {
			return zero, err
		}
		if seq >= want {
			return v, nil
		}
	}
}

// run runs build and publishes its value; the build is ended (waiters
// released) even if build panics.
func (c *coalesced[T]) run(ch chan struct{}, build func() (T, uint64, error)) (v T, seq uint64, err error) {
	defer func() {
		c.mu.Lock()
		if err == nil && seq > c.seq {
			c.val, c.seq = v, seq
		}
		c.building = nil
		c.mu.Unlock()
		close(ch)
	}()
	return build()
}

// explainState is the allocator as the leader would rebuild it from one
// version of the ledger and pools, and the Services and Namespaces streamed
// when it was built.
type explainState struct {
	// mu serialises its use: the allocator is not safe for concurrent use,
	// and an Explain (≈20 µs) is short next to a call.
	mu    sync.Mutex
	alloc *allocator.Allocator
}

func (s *Server) buildExplain() (*explainState, uint64, error) {
	rs, err := s.readState()
	if err != nil {
		return nil, 0, err
	}
	start := time.Now()
	pools, _ := s.pools.Parse(rs.pools)
	a := plan.Rebuild(plan.Inputs{Ledger: rs.ledger, Pools: pools, Env: s.env(), LBClass: s.cfg.LBClass,
		RequireLBClass: s.cfg.RequireLBClass, Services: s.store().All(watcherv1.Kind_KIND_SERVICE)}).Alloc
	s.m.rebuilt(partExplain, start)
	return &explainState{alloc: a}, rs.seq, nil
}

// usageState is each pool's usage as the ledger counts it (poolstate.Of,
// as the leader's pool status counts it once its statuses are written),
// with the IPPools it was computed for.
type usageState struct {
	pools []*watcherv1.Object // sorted by name
	usage map[string]poolUsage
	// heldOutside counts, by each of pools, the addresses Services keep
	// that came from it and that it no longer offers.
	heldOutside map[string]int
	// kept counts, by pool, its addresses kept for Services that released
	// them.
	kept map[string]int
}

// poolUsage is one pool's usage, rendered once (never changed: each
// answer clones it).
type poolUsage struct {
	v4, v6 *ipamv1.FamilyUsage
}

func (s *Server) buildUsage() (*usageState, uint64, error) {
	rs, err := s.readState()
	if err != nil {
		return nil, 0, err
	}
	start := time.Now()
	pools, _ := s.pools.Parse(rs.pools)
	a := plan.Rebuild(plan.Inputs{Ledger: rs.ledger, Pools: pools, LBClass: s.cfg.LBClass, RequireLBClass: s.cfg.RequireLBClass}).Alloc
	out := &usageState{pools: rs.pools, usage: map[string]poolUsage{}, heldOutside: map[string]int{}, kept: map[string]int{}}
	for _, st := range poolstate.Of(poolstate.Inputs{Alloc: a}, rs.pools) {
		if st.Served {
			out.usage[st.Name] = poolUsage{v4: poolstate.FamilyProto(st.IPv4), v6: poolstate.FamilyProto(st.IPv6)}
		}
		out.heldOutside[st.Name] = st.HeldOutside
		out.kept[st.Name] = st.Kept
	}
	s.m.rebuilt(partUsage, start)
	return out, rs.seq, nil
}

// listState is what ListAllocations and GetAllocation answer from: one
// version of the ledger, and the addresses it keeps for Services that
// released them, each with the serving pool containing it and the end of
// its grace period — which take the IPPools, so it is built once per change
// of the ledger or of an IPPool. While the ledger keeps no address, that is
// all the build does.
type listState struct {
	ledger ledger.State
	kept   []entry // sorted by comparePositions
}

func (s *Server) listState(ctx context.Context) (*listState, error) {
	rs, err := s.readState()
	if err != nil {
		return nil, err
	}
	return s.listing.get(ctx, rs.seq, s.buildList)
}

func (s *Server) buildList() (*listState, uint64, error) {
	rs, err := s.readState()
	if err != nil {
		return nil, 0, err
	}
	out := &listState{ledger: rs.ledger}
	var kept []ledger.Reservation
	for _, r := range rs.ledger.Reservations {
		if _, ok := r.Kept(); ok {
			kept = append(kept, r)
		}
	}
	if len(kept) == 0 {
		return out, rs.seq, nil
	}
	start := time.Now()
	// The serving pool containing an address, and its grace period, are
	// those of the pools alone (allocator.SetPools): no need to rebuild
	// the allocations.
	pools, _ := s.pools.Parse(rs.pools)
	a := allocator.New()
	a.SetPools(pools)
	for _, r := range kept {
		key, _ := r.Kept()
		pool, _ := a.PoolOf(r.IP)
		out.kept = append(out.kept, entry{
			position: position{Allocation: ledger.Allocation{IP: r.IP, Pool: pool, Service: *r.ForService, SharingKey: key, AllocatedAt: r.CreatedAt}, kept: true},
			until:    a.KeptUntil(objects.AllocatorReservation(r)),
		})
	}
	slices.SortFunc(out.kept, func(x, y entry) int { return comparePositions(x.position, y.position) })
	s.m.rebuilt(partKept, start)
	return out, rs.seq, nil
}
