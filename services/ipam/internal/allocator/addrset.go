package allocator

import (
	"math/big"
	"net/netip"
	"slices"
	"sort"
)

// addrRange is an inclusive range of addresses of one family.
type addrRange struct{ first, last netip.Addr }

func (r addrRange) String() string {
	if r.first == r.last {
		return r.first.String()
	}
	return r.first.String() + "-" + r.last.String()
}

func (r addrRange) contains(a netip.Addr) bool {
	return r.first.Compare(a) <= 0 && a.Compare(r.last) <= 0
}

func (r addrRange) overlaps(o addrRange) bool {
	return r.first.Compare(o.last) <= 0 && o.first.Compare(r.last) <= 0
}

// size returns the number of addresses in r, exactly.
func (r addrRange) size() *big.Int {
	n := new(big.Int).Sub(addrInt(r.last), addrInt(r.first))
	return n.Add(n, big.NewInt(1))
}

func addrInt(a netip.Addr) *big.Int {
	if a.Is4() {
		b := a.As4()
		return new(big.Int).SetBytes(b[:])
	}
	b := a.As16()
	return new(big.Int).SetBytes(b[:])
}

// buggy reports whether a is an IPv4 address ending in .0 or .255, which
// avoidBuggyIPs skips (some old clients treat them as network or broadcast
// addresses even in classless networks).
func buggy(a netip.Addr) bool {
	if !a.Is4() {
		return false
	}
	last := a.As4()[3]
	return last == 0 || last == 255
}

// buggyCount counts the addresses of an IPv4 range that buggy reports.
func buggyCount(r addrRange) *big.Int {
	if !r.first.Is4() {
		return new(big.Int)
	}
	f, l := int64(u32(r.first)), int64(u32(r.last))
	// upTo counts x in [0, n] with x%256 == rem.
	upTo := func(n, rem int64) int64 {
		if n < rem {
			return 0
		}
		return (n-rem)/256 + 1
	}
	n := upTo(l, 0) - upTo(f-1, 0) + upTo(l, 255) - upTo(f-1, 255)
	return big.NewInt(n)
}

func u32(a netip.Addr) uint32 {
	b := a.As4()
	return uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
}

// addrSet is a set of addresses kept as sorted, disjoint, non-adjacent
// ranges, stored in chunks of at most 2*chunkSize ranges (a two-level sorted
// list). Membership and "lowest absent address in [lo, hi]" are two binary
// searches; insertion and removal shift one chunk. Nothing is proportional to
// a pool's size, a block of consecutive taken addresses (the usual shape:
// lowest free first) is a single range, and re-registering 50,000 addresses
// in random order (a restart) never shifts a long slice.
type addrSet struct {
	chunks [][]addrRange // each non-empty; ranges sorted across chunks
	n      int           // number of ranges
}

const chunkSize = 128

// pos is a position in an addrSet: chunk c, index i. c == len(chunks) is the end.
type pos struct{ c, i int }

// search returns the position of the first range whose last is >= a.
func (s *addrSet) search(a netip.Addr) pos {
	c := sort.Search(len(s.chunks), func(k int) bool {
		ch := s.chunks[k]
		return ch[len(ch)-1].last.Compare(a) >= 0
	})
	if c == len(s.chunks) {
		return pos{c, 0}
	}
	ch := s.chunks[c]
	return pos{c, sort.Search(len(ch), func(i int) bool { return ch[i].last.Compare(a) >= 0 })}
}

func (s *addrSet) at(p pos) (*addrRange, bool) {
	if p.c >= len(s.chunks) {
		return nil, false
	}
	return &s.chunks[p.c][p.i], true
}

func (s *addrSet) prev(p pos) (*addrRange, bool) {
	switch {
	case p.i > 0:
		return &s.chunks[p.c][p.i-1], true
	case p.c > 0:
		ch := s.chunks[p.c-1]
		return &ch[len(ch)-1], true
	}
	return nil, false
}

func (s *addrSet) insertAt(p pos, r addrRange) {
	s.n++
	if len(s.chunks) == 0 {
		s.chunks = [][]addrRange{{r}}
		return
	}
	if p.c == len(s.chunks) {
		p = pos{p.c - 1, len(s.chunks[p.c-1])}
	}
	ch := slices.Insert(s.chunks[p.c], p.i, r)
	if len(ch) <= 2*chunkSize {
		s.chunks[p.c] = ch
		return
	}
	right := slices.Clone(ch[chunkSize:])
	s.chunks[p.c] = slices.Clip(ch[:chunkSize])
	s.chunks = slices.Insert(s.chunks, p.c+1, right)
}

func (s *addrSet) deleteAt(p pos) {
	s.n--
	ch := slices.Delete(s.chunks[p.c], p.i, p.i+1)
	if len(ch) == 0 {
		s.chunks = slices.Delete(s.chunks, p.c, p.c+1)
		return
	}
	s.chunks[p.c] = ch
}

// len returns the number of ranges.
func (s *addrSet) len() int { return s.n }

// ranges returns every range in order (for tests).
func (s *addrSet) ranges() []addrRange {
	var out []addrRange
	for _, ch := range s.chunks {
		out = append(out, ch...)
	}
	return out
}

func (s *addrSet) contains(a netip.Addr) bool {
	r, ok := s.at(s.search(a))
	return ok && r.first.Compare(a) <= 0
}

// add inserts a and reports whether it was absent.
func (s *addrSet) add(a netip.Addr) bool {
	p := s.search(a)
	right, hasRight := s.at(p)
	if hasRight && right.first.Compare(a) <= 0 {
		return false
	}
	left, hasLeft := s.prev(p)
	// Next of the highest address of a family is the zero Addr, so ranges
	// never join across families.
	joinLeft := hasLeft && left.last.Next() == a
	joinRight := hasRight && a.Next() == right.first
	switch {
	case joinLeft && joinRight:
		left.last = right.last
		s.deleteAt(p)
	case joinLeft:
		left.last = a
	case joinRight:
		right.first = a
	default:
		s.insertAt(p, addrRange{a, a})
	}
	return true
}

// remove deletes a and reports whether it was present.
func (s *addrSet) remove(a netip.Addr) bool {
	p := s.search(a)
	r, ok := s.at(p)
	if !ok || r.first.Compare(a) > 0 {
		return false
	}
	switch {
	case r.first == a && r.last == a:
		s.deleteAt(p)
	case r.first == a:
		r.first = a.Next()
	case r.last == a:
		r.last = a.Prev()
	default:
		tail := addrRange{a.Next(), r.last}
		r.last = a.Prev()
		s.insertAt(pos{p.c, p.i + 1}, tail)
	}
	return true
}

// firstAbsent returns the lowest address of [lo, hi] not in the set.
func (s *addrSet) firstAbsent(lo, hi netip.Addr) (netip.Addr, bool) {
	if lo.Compare(hi) > 0 {
		return netip.Addr{}, false
	}
	r, ok := s.at(s.search(lo))
	if !ok || r.first.Compare(lo) > 0 {
		return lo, true
	}
	// Ranges are not adjacent, so the address after a range is absent.
	c := r.last.Next()
	if !c.IsValid() || c.Compare(hi) > 0 {
		return netip.Addr{}, false
	}
	return c, true
}

// poolIndex maps an address to the serving pool containing it: the serving
// pools' ranges, sorted and disjoint.
type poolIndex struct{ spans []poolSpan }

type poolSpan struct {
	r    addrRange
	pool *Pool
}

// lookup returns the pool whose range contains a.
func (x *poolIndex) lookup(a netip.Addr) *Pool {
	i := sort.Search(len(x.spans), func(i int) bool { return x.spans[i].r.last.Compare(a) >= 0 })
	if i < len(x.spans) && x.spans[i].r.first.Compare(a) <= 0 {
		return x.spans[i].pool
	}
	return nil
}

// overlap returns a span of the index overlapping r.
func (x *poolIndex) overlap(r addrRange) (poolSpan, bool) {
	i := sort.Search(len(x.spans), func(i int) bool { return x.spans[i].r.last.Compare(r.first) >= 0 })
	if i < len(x.spans) && x.spans[i].r.first.Compare(r.last) <= 0 {
		return x.spans[i], true
	}
	return poolSpan{}, false
}

func (x *poolIndex) insert(r addrRange, p *Pool) {
	i := sort.Search(len(x.spans), func(i int) bool { return x.spans[i].r.first.Compare(r.first) > 0 })
	x.spans = slices.Insert(x.spans, i, poolSpan{r, p})
}
