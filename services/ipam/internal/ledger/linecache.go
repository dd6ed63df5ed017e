package ledger

import "strings"

// lineCache keeps the allocation lines of the shards encoded last (at most
// lineCacheShards of them), so that a commit encodes only the lines it
// changed: every commit writes each shard it touches whole, and encoding a
// full shard's thousands of unchanged lines was most of a steady-state
// commit's CPU. In steady state the shard new addresses go to is written at
// nearly every commit, between others where a Service was deleted. Only the
// committing goroutine uses it (under Ledger.mu).
type lineCache struct {
	// shards, most recently encoded first.
	shards []encodedShard
}

// encodedShard is one encoding of a shard's allocations: sorted as
// written, their lines, and where each line ends.
type encodedShard struct {
	name   string
	allocs []Allocation
	text   string
	ends   []int
}

// lineCacheShards: the shard allocations go to and the one last edited
// otherwise; each kept encoding is at most a shard's size plus its entries.
const lineCacheShards = 2

// allocationLines encodes allocs (sorted by CompareAllocations) as the
// lines of shard name: lines of an entry equal to one of the shard's last
// encoding kept in c (nil: none kept) are copied from it, found by one
// merge of the two sorted lists. The result is kept in c in its place.
func (c *lineCache) allocationLines(name string, allocs []Allocation) string {
	var prev encodedShard
	if c != nil {
		prev = c.take(name)
	}
	var b strings.Builder
	b.Grow(len(allocs) * typicalLine)
	ends := make([]int, 0, len(allocs))
	buf := make([]byte, 0, typicalLine)
	j := 0
	for _, a := range allocs {
		for j < len(prev.allocs) && CompareAllocations(prev.allocs[j], a) < 0 {
			j++
		}
		if j < len(prev.allocs) && prev.allocs[j] == a {
			start := 0
			if j > 0 {
				start = prev.ends[j-1]
			}
			b.WriteString(prev.text[start:prev.ends[j]])
			j++
		} else {
			buf = allocationLineOf(a).append(buf[:0])
			b.Write(buf)
		}
		ends = append(ends, b.Len())
	}
	text := b.String()
	if c != nil {
		c.shards = append([]encodedShard{{name: name, allocs: allocs, text: text, ends: ends}}, c.shards...)
		if len(c.shards) > lineCacheShards {
			c.shards = c.shards[:lineCacheShards]
		}
	}
	return text
}

// take removes and returns the kept encoding of shard name (zero if none).
func (c *lineCache) take(name string) encodedShard {
	for i, s := range c.shards {
		if s.name == name {
			c.shards = append(c.shards[:i], c.shards[i+1:]...)
			return s
		}
	}
	return encodedShard{}
}
