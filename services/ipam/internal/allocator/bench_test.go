package allocator

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"runtime"
	"testing"
	"time"

	"github.com/ipledger/ipledger/lab/heapstat"
)

// nth returns base + i (IPv4, or IPv6 within the low 64 bits).
func nth(base netip.Addr, i int) netip.Addr {
	if base.Is4() {
		v := u32(base) + uint32(i)
		return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)})
	}
	b := base.As16()
	lo := binary.BigEndian.Uint64(b[8:]) + uint64(i)
	binary.BigEndian.PutUint64(b[8:], lo)
	return netip.AddrFrom16(b)
}

func fillSlash16(b *testing.B, used int, shuffle bool) *Allocator {
	a := newAllocator(b, mustPool(b, "p", spec("10.0.0.0/16")))
	order := make([]int, used)
	for i := range order {
		order[i] = i
	}
	if shuffle {
		rand.New(rand.NewPCG(7, 7)).Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
	}
	base := netip.MustParseAddr("10.0.0.0")
	for _, i := range order {
		if err := a.Assign(fmt.Sprintf("ns/s%d", i), []netip.Addr{nth(base, i)}, Sharing{}); err != nil {
			b.Fatal(err)
		}
	}
	return a
}

// BenchmarkAllocateSlash16With60000Used allocates the lowest free address of
// a /16 whose lowest 60,000 addresses are held, then releases it.
func BenchmarkAllocateSlash16With60000Used(b *testing.B) {
	noChecks(b)
	a := fillSlash16(b, 60000, false)
	req := Request{Service: "ns/bench"}
	for b.Loop() {
		if _, err := a.Allocate(req); err != nil {
			b.Fatal(err)
		}
		a.Release(req.Service)
	}
}

// BenchmarkAllocateSlash16Fragmented: 60,000 random addresses of a /16 are
// held (thousands of gaps); each iteration allocates the lowest gap and
// releases it.
func BenchmarkAllocateSlash16Fragmented(b *testing.B) {
	noChecks(b)
	a := newAllocator(b, mustPool(b, "p", spec("10.0.0.0/16")))
	rng := rand.New(rand.NewPCG(1, 1))
	base := netip.MustParseAddr("10.0.0.0")
	for n := 0; n < 60000; {
		ip := nth(base, rng.IntN(65536))
		if len(a.Holders(ip)) == 0 {
			a.Assign(fmt.Sprintf("ns/s%d", n), []netip.Addr{ip}, Sharing{})
			n++
		}
	}
	b.Logf("%d taken ranges", a.idx.taken.len())
	req := Request{Service: "ns/bench"}
	for b.Loop() {
		if _, err := a.Allocate(req); err != nil {
			b.Fatal(err)
		}
		a.Release(req.Service)
	}
}

// BenchmarkAllocateIPv6Slash64 keeps allocating new addresses from a /64.
func BenchmarkAllocateIPv6Slash64(b *testing.B) {
	noChecks(b)
	a := newAllocator(b, mustPool(b, "v6", spec("2001:db8::/64")))
	i := 0
	for b.Loop() {
		if _, err := a.Allocate(Request{Service: fmt.Sprintf("ns/s%d", i), Families: []Family{IPv6}}); err != nil {
			b.Fatal(err)
		}
		i++
	}
}

// BenchmarkExplainIPv6Slash64 explains a pending Service against a /64
// holding 10,000 addresses and nine other pools.
func BenchmarkExplainIPv6Slash64(b *testing.B) {
	noChecks(b)
	pools := []*Pool{mustPool(b, "v6", spec("2001:db8::/64"))}
	for i := range 9 {
		pools = append(pools, mustPool(b, fmt.Sprintf("p%d", i), spec(fmt.Sprintf("10.%d.0.0/16", i))))
	}
	a := newAllocator(b, pools...)
	for i := range 10000 {
		a.Allocate(Request{Service: fmt.Sprintf("ns/s%d", i), Families: []Family{IPv6}})
	}
	for b.Loop() {
		a.Explain(Request{Service: "ns/pending", Families: []Family{IPv6}})
	}
}

// BenchmarkAssign10000 re-registers 10,000 held IPs (a restart), in IP order
// (the ledger's order) and shuffled (Service status order).
func BenchmarkAssign10000(b *testing.B) {
	noChecks(b)
	for _, shuffle := range []bool{false, true} {
		b.Run(fmt.Sprintf("shuffled=%v", shuffle), func(b *testing.B) {
			for b.Loop() {
				fillSlash16(b, 10000, shuffle)
			}
		})
	}
}

// BenchmarkRestart50000 is the restart of the benchmark: SetPools,
// then 50,000 Assigns in random order.
func BenchmarkRestart50000(b *testing.B) {
	noChecks(b)
	for b.Loop() {
		fillSlash16(b, 50000, true)
	}
}

// BenchmarkAllocateFromFreed: every address of a /20 has been used and
// freed (4,096 in the order of reuse); each iteration a new Service takes
// the least recently freed one and releases it, to the back of the order.
func BenchmarkAllocateFromFreed(b *testing.B) {
	noChecks(b)
	a := newAllocator(b, mustPool(b, "p", spec("10.0.0.0/20")))
	for i := range 4096 {
		mustAllocate(b, a, Request{Service: fmt.Sprintf("ns/s%d", i)})
	}
	for i := range 4096 {
		a.Release(fmt.Sprintf("ns/s%d", i))
	}
	i := 0
	for b.Loop() {
		svc := fmt.Sprintf("ns/new%d", i)
		i++
		if _, err := a.Allocate(Request{Service: svc}); err != nil {
			b.Fatal(err)
		}
		a.Release(svc)
	}
}

// BenchmarkTakeKeptFromFullPool: a /20 whose 4,096 addresses are all kept
// for deleted Services; each iteration a waiter takes the one kept longest
// (a scan of what is kept), and its own release keeps it again.
func BenchmarkTakeKeptFromFullPool(b *testing.B) {
	noChecks(b)
	hour := keeping(time.Hour, spec("10.0.0.0/20"))
	a := newAllocator(b, mustPool(b, "p", hour))
	for i := range 4096 {
		mustAllocate(b, a, Request{Service: fmt.Sprintf("ns/s%d", i)})
	}
	at := time.Date(2026, 12, 5, 12, 0, 0, 0, time.UTC)
	keepAll := func(svcs ...string) {
		kept := a.KeepOnRelease(svcs, at)
		for _, s := range svcs {
			a.Release(s)
		}
		for _, r := range kept {
			if err := a.Reserve(r); err != nil {
				b.Fatal(err)
			}
		}
	}
	for i := range 4096 {
		keepAll(fmt.Sprintf("ns/s%d", i))
	}
	i := 0
	for b.Loop() {
		svc := fmt.Sprintf("other/w%d", i)
		i++
		at = at.Add(time.Second)
		res, err := a.Allocate(Request{Service: svc})
		if err != nil || len(res.Kept) != 1 {
			b.Fatalf("%v %+v", err, res)
		}
		keepAll(svc)
	}
}

// BenchmarkHeldBytes reports the allocator's live heap per held address:
// 100,000 Services of 100 namespaces, each allocated one IPv4 address from
// a /15, as a cold start leaves them (BENCHMARKS.md, where ipam's bytes go).
// The Service keys are made before the measurement starts: the worker's
// own strings, which the allocator shares rather than copies.
func BenchmarkHeldBytes(b *testing.B) {
	noChecks(b)
	const n = 100000
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("bench-%02d/svc-%06d", i%100, i)
	}
	for b.Loop() {
		before := heapstat.Live()
		a := newAllocator(b, mustPool(b, "bench", spec("10.0.0.0/15")))
		for _, k := range keys {
			if _, err := a.Allocate(Request{Service: k}); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(heapstat.PerItem(before, heapstat.Live(), n), "B/held")
		runtime.KeepAlive(a)
	}
}
