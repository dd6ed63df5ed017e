package allocator

import (
	"math/rand/v2"
	"net/netip"
	"testing"
)

// TestAddrSetAgainstModel drives the interval set and a plain map with the
// same random operations and compares every answer.
func TestAddrSetAgainstModel(t *testing.T) {
	t.Run("small", func(t *testing.T) { testAddrSetModel(t, 64, 5000, 1) })
	// Large enough for thousands of ranges: chunks split and empty.
	t.Run("large", func(t *testing.T) { testAddrSetModel(t, 8192, 60000, 500) })
}

func testAddrSetModel(t *testing.T, size, steps, checkEvery int) {
	rng := rand.New(rand.NewPCG(1, 2))
	base := netip.MustParseAddr("10.0.0.0")
	addr := func(i int) netip.Addr { return nth(base, i) }
	var s addrSet
	model := map[int]bool{}
	for step := range steps {
		i := rng.IntN(size)
		if step > steps/2 && rng.IntN(4) == 0 {
			i = 0 // lean towards removals near the front late on, emptying chunks
		}
		switch rng.IntN(3) {
		case 0:
			if got, want := s.add(addr(i)), !model[i]; got != want {
				t.Fatalf("step %d: add(%d) = %v, want %v", step, i, got, want)
			}
			model[i] = true
		case 1:
			if got, want := s.remove(addr(i)), model[i]; got != want {
				t.Fatalf("step %d: remove(%d) = %v, want %v", step, i, got, want)
			}
			delete(model, i)
		case 2:
			j := i + rng.IntN(size-i)
			want := -1
			for k := i; k <= j; k++ {
				if !model[k] {
					want = k
					break
				}
			}
			got, ok := s.firstAbsent(addr(i), addr(j))
			if (want >= 0) != ok || (ok && got != addr(want)) {
				t.Fatalf("step %d: firstAbsent(%d, %d) = %v %v, want %d", step, i, j, got, ok, want)
			}
		}
		if s.contains(addr(i)) != model[i] {
			t.Fatalf("step %d: contains(%d) wrong", step, i)
		}
		if step%checkEvery == 0 {
			for k := range size {
				if s.contains(addr(k)) != model[k] {
					t.Fatalf("step %d: contains(%d) wrong", step, k)
				}
			}
			checkSet(t, &s)
		}
	}
}

// TestAddrSetFamilyEdges checks that the highest IPv4 address and the lowest
// IPv6 address never join into one span.
func TestAddrSetFamilyEdges(t *testing.T) {
	var s addrSet
	s.add(netip.MustParseAddr("255.255.255.255"))
	s.add(netip.MustParseAddr("::"))
	if s.len() != 2 {
		t.Fatalf("ranges = %v, want two", s.ranges())
	}
	last := netip.MustParseAddr("ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff")
	s.add(last)
	if _, ok := s.firstAbsent(last, last); ok {
		t.Fatal("firstAbsent found an address past the end")
	}
	s.remove(last)
	if got, ok := s.firstAbsent(last, last); !ok || got != last {
		t.Fatalf("firstAbsent = %v %v", got, ok)
	}
}

// checkSet checks the set's invariants: ranges sorted, disjoint, apart,
// chunks non-empty and bounded, n counted right.
func checkSet(t *testing.T, s *addrSet) {
	t.Helper()
	rs := s.ranges()
	if len(rs) != s.len() {
		t.Fatalf("len() = %d, have %d ranges", s.len(), len(rs))
	}
	for _, ch := range s.chunks {
		if len(ch) == 0 || len(ch) > 2*chunkSize {
			t.Fatalf("chunk of %d ranges", len(ch))
		}
	}
	for k, r := range rs {
		if r.first.Compare(r.last) > 0 || r.first.Is4() != r.last.Is4() {
			t.Fatalf("bad range %v", r)
		}
		if k > 0 && (rs[k-1].last.Next() == r.first || rs[k-1].last.Compare(r.first) >= 0) {
			t.Fatalf("ranges %v and %v not disjoint and apart", rs[k-1], r)
		}
	}
}

func TestNth(t *testing.T) {
	if got := nth(netip.MustParseAddr("10.0.0.250"), 300); got != netip.MustParseAddr("10.0.2.38") {
		t.Fatalf("nth = %s", got)
	}
	if got := nth(netip.MustParseAddr("2001:db8::ffff"), 1); got != netip.MustParseAddr("2001:db8::1:0") {
		t.Fatalf("nth = %s", got)
	}
}
