package ledger

import (
	"fmt"
	"net/netip"
	"runtime"
	"testing"

	"github.com/ipledger/ipledger/lab/heapstat"
)

// shardsOf builds a ledger of n allocations split like the Ledger splits it.
func shardsOf(n int) map[string]map[string]string {
	head := Shard{Name: HeadName, Term: "t"}
	for i := range n {
		ip := netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)})
		head.Allocations = append(head.Allocations, Allocation{IP: ip, Pool: "pool", Service: ServiceRef{Namespace: "ns", Name: fmt.Sprintf("svc-%06d", i), UID: "0b0f3a3e-6c1b-4d8e-9a55-3f1f6a1d2c3b"}, AllocatedAt: t0})
	}
	next := 0
	first, rest, from := Split(head, DefaultShardLimit, func() string { next++; return ShardName(next) })
	for i, r := range rest {
		first.Index = append(first.Index, IndexEntry{Name: r.Name, From: from[i]})
	}
	out := map[string]map[string]string{HeadName: Encode(first)}
	for _, r := range rest {
		out[r.Name] = Encode(r)
	}
	return out
}

// BenchmarkParse50k is what a replica does when the streamed ledger changes
// (then cached until it changes again): decode and assemble 50,000 entries.
func BenchmarkParse50k(b *testing.B) {
	cms := shardsOf(50000)
	total := 0
	for _, d := range cms {
		total += Size(d)
	}
	for b.Loop() {
		st, _, err := Parse(cms)
		if err != nil || len(st.Allocations) != 50000 {
			b.Fatal(err, len(st.Allocations))
		}
	}
	b.ReportMetric(float64(len(cms)), "shards")
	b.ReportMetric(float64(total)/float64(len(cms))/1024, "KiB/shard")
}

// BenchmarkEncodeFullShard is what every commit pays for each shard it
// touches: one full shard (DefaultShardLimit) encoded.
func BenchmarkEncodeFullShard(b *testing.B) {
	shard := fullShard()
	for b.Loop() {
		Encode(shard)
	}
	b.ReportMetric(float64(len(shard.Allocations)), "entries")
}

// BenchmarkEncodeFullShardOneNewLine is a steady-state commit's encoding:
// the same full shard with one allocation added each time, its other lines
// kept from the encoding before (lineCache).
func BenchmarkEncodeFullShardOneNewLine(b *testing.B) {
	shard := fullShard()
	var c lineCache
	encode(shard, &c)
	last := len(shard.Allocations) - 1
	for i := 0; b.Loop(); i++ {
		shard.Allocations[last].Service.Name = fmt.Sprintf("new-%d", i)
		encode(shard, &c)
	}
	b.ReportMetric(float64(len(shard.Allocations)), "entries")
}

// fullShard is a shard of allocations filled to DefaultShardLimit.
func fullShard() Shard {
	shard := Shard{Name: ShardName(1), Term: "t"}
	for i := 0; ; i++ {
		ip := netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)})
		shard.Allocations = append(shard.Allocations, Allocation{IP: ip, Pool: "pool", Service: ServiceRef{Namespace: "ns", Name: fmt.Sprintf("svc-%06d", i), UID: "0b0f3a3e-6c1b-4d8e-9a55-3f1f6a1d2c3b"}, AllocatedAt: t0})
		if i%100 == 0 && Size(Encode(shard)) >= DefaultShardLimit {
			return shard
		}
	}
}

// BenchmarkHeldBytes reports what a term's Ledger keeps per entry once
// opened over 100,000 allocations: its shards and its index by Service (the
// entries themselves, their strings as decoded, the addresses by Service;
// index-B/entry is the index's share).
// full-index-B/entry is what indexing the entries whole (IndexByService)
// would add, for comparison: how the Ledger indexed them before.
func BenchmarkHeldBytes(b *testing.B) {
	const n = 100000
	cms := shardsOf(n)
	for b.Loop() {
		before := heapstat.Live()
		st, layout, err := Parse(cms)
		if err != nil {
			b.Fatal(err)
		}
		l := &Ledger{}
		for i, s := range layout { // as the fence makes a term's shards
			ls := &liveShard{Shard: Shard{Name: s.Name, Index: s.Index}}
			ls.Allocations, ls.Reservations = layout.withinRange(i)
			l.shards = append(l.shards, ls)
		}
		sharded := heapstat.Live()
		l.addrs = indexAddrs(st.Allocations) // as adopt does
		addressed := heapstat.Live()
		runtime.KeepAlive(st) // alive at both readings: only the index differs
		opened := heapstat.Live()
		full := IndexByService(l.State().Allocations)
		indexed := heapstat.Live()
		b.ReportMetric(heapstat.PerItem(before, opened, n), "B/entry")
		b.ReportMetric(heapstat.PerItem(sharded, addressed, n), "index-B/entry")
		b.ReportMetric(heapstat.PerItem(opened, indexed, n), "full-index-B/entry")
		runtime.KeepAlive(l)
		runtime.KeepAlive(full)
	}
}
