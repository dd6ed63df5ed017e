package ledger

import (
	"net/netip"
	"slices"
)

// commitWrites is what committing a Change to a layout writes, computed
// without the API server (layOutCommit); Ledger.commit performs it: it
// creates the shards of creates, then updates the shards of writes in order.
type commitWrites struct {
	// creates are the new shards that splits cut off, in the order to
	// create them. They are created first: they count only once the head
	// lists them, and the split shard is trimmed after that, so a reader
	// never sees an entry vanish.
	creates []Shard
	// writes are the updates of shards of the layout, in layout order:
	// the head first when it is written, since it publishes creates.
	writes []shardWrite
	// index is the head's new index when creates is not empty (nil
	// otherwise): writes[0] is then the head and its Index is this slice,
	// so that rename reaches both.
	index []IndexEntry
	// maxNum is the highest shard number once the splits named their
	// pieces.
	maxNum int
}

// shardWrite is one update of a shard of the layout.
type shardWrite struct {
	// pos is the shard's position in the layout (0: the head).
	pos int
	// shard is its new content.
	shard Shard
	// data is shard encoded, or nil for the writer to encode it: a shard
	// that was split, and the head when it lists new shards, whose names
	// are final only once they are created.
	data map[string]string
}

// layOutCommit computes the writes that commit ch to layout (whose head is
// layout[0]), stamped with epoch and term: every shard ch touches is
// written whole, and one whose encoding outgrows limit is split, its new
// pieces named from maxNum+1 on and listed by the head. Each shard that
// fits is encoded once here (with the lines of c): that encoding is the one
// written.
func layOutCommit(layout Layout, ch Change, epoch uint64, term string, limit, maxNum int, c *lineCache) commitWrites {
	p := commitWrites{writes: editShards(layout, ch, epoch, term), maxNum: maxNum}
	var from []netip.Addr
	for k := range p.writes {
		w := &p.writes[k]
		if data := encode(w.shard, c); Size(data) <= limit {
			w.data = data
			continue
		}
		first, rest, f := Split(w.shard, limit, func() string {
			p.maxNum++
			return ShardName(p.maxNum)
		})
		w.shard = first
		p.creates = append(p.creates, rest...)
		from = append(from, f...)
	}
	if len(p.creates) > 0 {
		p.publish(layout[0], from, epoch, term)
	}
	return p
}

// publish makes the head list the created shards, from[k] being the lowest
// IP of creates[k]: the head is written (unchanged but for its index and
// stamp if ch left it alone) and encoded only when written.
func (p *commitWrites) publish(head Shard, from []netip.Addr, epoch uint64, term string) {
	p.index = slices.Clone(head.Index)
	for k, s := range p.creates {
		p.index = append(p.index, IndexEntry{Name: s.Name, From: from[k]})
	}
	slices.SortFunc(p.index, func(a, b IndexEntry) int { return a.From.Compare(b.From) })
	if len(p.writes) == 0 || p.writes[0].pos != 0 {
		w := shardWrite{pos: 0, shard: Shard{Name: head.Name, Epoch: epoch, Term: term,
			Allocations: head.Allocations, Reservations: head.Reservations}}
		p.writes = slices.Insert(p.writes, 0, w)
	}
	p.writes[0].shard.Index = p.index
	p.writes[0].data = nil
}

// rename gives the k-th created shard another name (an orphan holds the
// planned one), in the index the head publishes too.
func (p *commitWrites) rename(k int, name string) {
	old := p.creates[k].Name
	p.creates[k].Name = name
	for i := range p.index {
		if p.index[i].Name == old {
			p.index[i].Name = name
		}
	}
}

// editShards applies ch to copies of the shards of layout it touches,
// stamped with epoch and term, and returns them as writes (without data)
// in layout order. Released and re-allocated entries leave first, then
// reservations are removed, allocations added, and reservations replaced.
func editShards(layout Layout, ch Change, epoch uint64, term string) []shardWrite {
	e := editor{layout: layout, epoch: epoch, term: term, edits: map[int]*Shard{}}
	e.removeAllocations(ch.Release, ch.Allocate)
	for _, ip := range ch.Unreserve {
		s := e.shard(ip)
		s.Reservations = slices.DeleteFunc(s.Reservations, func(x Reservation) bool { return x.IP == ip })
	}
	for _, a := range ch.Allocate {
		s := e.shard(a.IP)
		s.Allocations = append(s.Allocations, a)
	}
	for _, r := range ch.Reserve {
		s := e.shard(r.IP)
		s.Reservations = slices.DeleteFunc(s.Reservations, func(x Reservation) bool { return x.IP == r.IP })
		s.Reservations = append(s.Reservations, r)
	}
	writes := make([]shardWrite, 0, len(e.edits))
	for i, s := range e.edits {
		// Kept sorted, as Decode leaves a shard: the Ledger finds a
		// Service's entries by address in the shards it holds.
		slices.SortFunc(s.Allocations, CompareAllocations)
		slices.SortFunc(s.Reservations, compareReservations)
		writes = append(writes, shardWrite{pos: i, shard: *s})
	}
	slices.SortFunc(writes, func(a, b shardWrite) int { return a.pos - b.pos })
	return writes
}

// editor holds the edited copies of the shards of a layout, by position.
type editor struct {
	layout Layout
	epoch  uint64
	term   string
	edits  map[int]*Shard
}

// shard returns the edited copy of the shard whose range holds ip, made
// on first use with the editor's epoch and term.
func (e *editor) shard(ip netip.Addr) *Shard {
	i := ShardFor(e.layout[0], ip)
	if s, ok := e.edits[i]; ok {
		return s
	}
	cur := e.layout[i]
	s := &Shard{Name: cur.Name, Epoch: e.epoch, Term: e.term, Index: cur.Index,
		Allocations: slices.Clone(cur.Allocations), Reservations: slices.Clone(cur.Reservations)}
	e.edits[i] = s
	return s
}

// removeAllocations removes the allocations matching those of each batch
// by IP and Service namespace/name, in one pass per shard: one scan per
// entry made a batch of 2,000 cost 2,000 scans of a shard of thousands.
func (e *editor) removeAllocations(batches ...[]Allocation) {
	type entry struct { // an IP and the namespace and name holding it
		ip       netip.Addr
		ns, name string
	}
	leaving := map[*Shard]map[entry]struct{}{}
	for _, batch := range batches {
		for _, a := range batch {
			s := e.shard(a.IP)
			if leaving[s] == nil {
				leaving[s] = map[entry]struct{}{}
			}
			leaving[s][entry{a.IP, a.Service.Namespace, a.Service.Name}] = struct{}{}
		}
	}
	for s, gone := range leaving {
		s.Allocations = slices.DeleteFunc(s.Allocations, func(x Allocation) bool {
			_, ok := gone[entry{x.IP, x.Service.Namespace, x.Service.Name}]
			return ok
		})
	}
}
