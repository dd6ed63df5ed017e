package controller

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/ipledger/ipledger/pkg/stream/objkey"
	watcherv1 "github.com/ipledger/ipledger/proto/ipledger/watcher/v1"
	"github.com/ipledger/ipledger/services/ipam/internal/ledger"
	"github.com/ipledger/ipledger/services/ipam/internal/objects"
	"github.com/ipledger/ipledger/services/ipam/internal/plan"
)

// Opening and releasing a term's ledger: fence it, rebuild the allocator
// from it (plan.Rebuild), overrule the entries the statuses contradict
// (plan.Overrule), report a corrupt shard, and release it when the term
// stops. The phases that call these are in term.go.

// open fences the ledger and rebuilds every allocation from it, the pools
// and the Services, before anything is allocated. The allocator is rebuilt,
// and the suspect entries are asked about, while the shards after the head
// are fenced (ledger.Opener): nothing is acted on until they are, and an
// attempt another writer got in on is rebuilt again from the next read.
func (w *worker) open(ctx context.Context) error {
	o := ledger.NewOpener(w.c.client, ledger.Options{
		Namespace: w.c.cfg.Namespace, Term: w.term.ID(), ShardLimit: w.c.cfg.ShardLimit,
		Metrics: w.c.ledgerM, Log: w.log, Holds: w.term.Holds,
	})
	for o.Next(ctx) {
		w.ldg = o.Ledger()
		if overruled := w.overrule(ctx, w.rebuild(nil)); len(overruled) > 0 {
			w.rebuild(overruled)
		}
	}
	l, err := o.Ledger(), o.Err()
	if err != nil {
		return err
	}
	w.ldg = l
	w.hist.Opened(w.opened, l.Epoch(), len(l.ForeignWrites()) > 0)
	w.opened = ledger.State{}
	for _, f := range l.ForeignWrites() {
		w.event(configMapRef(w.c.cfg.Namespace, f.Shard), "Warning", "LedgerForeignWrite", fmt.Sprintf(
			"Written by %q at %s, not by ipam; ipam obeys its entries only where the Services' statuses do not contradict them. "+
				"Only ipam and the break-glass group may write the ledger (docs/security.md)", f.Manager, f.At.UTC().Format(time.RFC3339)))
	}
	for _, cf := range w.conflicts {
		w.log.Warn("Conflicting claim to an IP", "service", cf.Service, "ip", addrs(cf.IPs), "source", string(cf.Source), "reason", cf.Message)
		if ns, name, ok := strings.Cut(cf.Service, "/"); ok {
			if obj, ok := w.store().Get(watcherv1.Kind_KIND_SERVICE, ns, name); ok {
				w.event(serviceRef(obj), "Warning", "IPConflict",
					fmt.Sprintf("The %s of this Service names %s, which is already held: %s", cf.Source, addrs(cf.IPs), cf.Message))
			}
		}
	}
	return nil
}

// release ends the term's ledger writing. A term that stopped gracefully
// (its context still live: the process is shutting down) says on the
// ledger's head that every write of it was answered, if that is so, and the
// next term fences the head alone instead of every shard (ledger.Release).
// A term that lost its Lease says nothing, nor does one that holds no open
// ledger (fenced, corrupt, reopening): the next one fences every shard.
func (w *worker) release(ctx context.Context) {
	if ctx.Err() != nil || w.phase != serving || w.ldg == nil {
		return
	}
	start := time.Now()
	if err := w.ldg.Release(ctx); err != nil {
		w.log.Info("Stopped without releasing the ledger cleanly; the next term fences every shard", "reason", err)
		return
	}
	w.log.Info("Released the ledger cleanly; the next term fences its head only", "epoch", w.ldg.Epoch(), "took", time.Since(start))
}

// overrule asks the API server about each ledger entry the stream's
// statuses contradict (plan.Suspect) and returns those plan.Overrule
// decides to overrule, with their Events.
func (w *worker) overrule(ctx context.Context, suspects []plan.Suspect) []ledger.Allocation {
	p := plan.Overrule(checkSuspects(ctx, w.c.client, suspects))
	for _, c := range p.Unchecked {
		w.log.Warn("Cannot confirm a ledger entry the statuses contradict; it is obeyed", "ip", c.Entry.IP.String(), "service", c.Entry.Service.Key(), "err", c.Err)
	}
	for _, o := range p.Overrule {
		w.c.metrics.ledgerOverruled.Inc()
		w.log.Warn("A ledger entry contradicts the Services' statuses and is not obeyed", "ip", o.Entry.IP.String(), "service", o.Entry.Service.Key(), "shownBy", o.Shows)
		w.event(configMapRef(w.c.cfg.Namespace, ledger.HeadName), "Warning", "LedgerEntryOverruled", o.Message)
	}
	return p.Entries()
}

// rebuild resets the allocator from the ledger writer's state and the
// stream, leaving out the overruled ledger entries, and marks every
// Service for a pass. It returns the entries the statuses contradict.
func (w *worker) rebuild(overruled []ledger.Allocation) []plan.Suspect {
	// Clear the flag before reading the pools, never after: a pool event
	// that lands while the rebuild runs must leave it set, or that pool
	// would be ignored until the next pool change (seen in e2e: a pool
	// created during a slow rebuild served nothing).
	w.dirty.takePools()
	st := w.ldg.State()
	w.opened = st
	pools, invalid := w.c.pools.Parse(w.store().List(watcherv1.Kind_KIND_IP_POOL))
	// Every Service is decided again: those the rebuild reads, those a
	// handler adds meanwhile (it marks them itself), and those only the
	// ledger names. Those the stream shows holding addresses are verified
	// after the others (w.verify).
	var keys []string
	services := func(yield func(*watcherv1.Object) bool) {
		for obj := range w.store().All(watcherv1.Kind_KIND_SERVICE) {
			keys = append(keys, objkey.Of(obj))
			if !yield(obj) {
				return
			}
		}
	}
	r := plan.Rebuild(plan.Inputs{Ledger: st, Pools: pools, Services: services, ServiceCount: w.store().Len(watcherv1.Kind_KIND_SERVICE),
		Env: w.env(), LBClass: w.c.cfg.LBClass,
		RequireLBClass: w.c.cfg.RequireLBClass, Overruled: overruled})
	w.alloc, w.invalidPools, w.conflicts = r.Alloc, invalid, r.Conflicts
	keys = append(keys, w.ldg.Services()...)
	// A Service the stream does not show is not verified later: if it is
	// gone, the addresses it frees may be what a pending Service needs.
	first, verify := splitHolders(keys, func(k string) bool {
		_, shown := w.store().Attribute(watcherv1.Kind_KIND_SERVICE, attrCreated, k)
		return shown && len(w.alloc.Allocations(k)) > 0
	})
	w.mark(first...)
	w.verify = w.inAllocationOrder(verify)
	w.forgetPoolStatuses()
	return r.Suspects
}

// splitHolders splits keys (without repeats) into those that hold no
// address (holds false) and those that do.
func splitHolders(keys []string, holds func(string) bool) (none, holding []string) {
	seen := make(map[string]bool, len(keys))
	for _, k := range keys {
		if seen[k] {
			continue
		}
		seen[k] = true
		if holds(k) {
			holding = append(holding, k)
		} else {
			none = append(none, k)
		}
	}
	return none, holding
}

// inAllocationOrder sorts keys in allocation order (objects.Less: oldest
// first, then by key) by the store's creation-time attribute, keys the
// stream does not show first.
func (w *worker) inAllocationOrder(keys []string) []string {
	cs := make([]aged, len(keys))
	for i, k := range keys {
		cs[i] = w.aged(k)
	}
	slices.SortFunc(cs, compareAged)
	for i, c := range cs {
		keys[i] = c.key
	}
	return keys
}

// aged is a Service's key and its creation time as the store's attribute
// has it: 0 when the stream does not show the Service (gone, or never seen).
type aged struct {
	key     string
	created int64
}

func (w *worker) aged(key string) aged {
	created, _ := w.store().Attribute(watcherv1.Kind_KIND_SERVICE, attrCreated, key)
	ts, _ := created.(int64)
	return aged{key, ts}
}

// compareAged is allocation order (objects.Less) by the attribute.
func compareAged(a, b aged) int { return objects.CompareByAge(a.created, a.key, b.created, b.key) }

// reportCorrupt stops allocation with an Event on the shard, and owes a
// condition on every pool (the loop's next step writes it). The shard
// itself is never touched.
func (w *worker) reportCorrupt(ce *ledger.CorruptError) {
	first := w.corrupt == nil || w.corrupt.Error() != ce.Error()
	w.corrupt = ce
	w.c.metrics.ledgerCorrupt.Set(1)
	if first {
		w.log.Error("The ledger cannot be read; no address is allocated until it is repaired", "configMap", ce.Shard, "err", ce.Err)
		w.event(configMapRef(w.c.cfg.Namespace, ce.Shard), "Warning", "LedgerCorrupt", ce.Error())
	}
	w.statusesOwed = true
}
