package history

import (
	"encoding/base64"
	"hash/fnv"
	"strconv"
	"strings"
)

// The Services index (ServicesAnnotation) is a Bloom filter of the
// namespace/name of a ConfigMap's entries, not their list: it is read in
// every indexed lookup's metadata LIST (that of an address too), and a
// list of 2,600 names is ≈ 57 KB per segment with typical names (up to
// ≈ 330 KB with the longest), where the filter is ≈ 10 bits per Service
// (≤ 4.4 KB base64 for a full segment, whatever the names), and says "may
// hold" of a Service it does not hold about 1 time in 100: that segment is
// then read for nothing, never skipped wrongly.
//
// Its text: "bloom1 <k> <bits, base64 (standard, padded)>"; bit i of the
// m = 8·len(bytes) bits is set for each of k positions
// (h1 + j·h2) mod m of a name, j < k, h1 and h2 the low and high 32 bits
// (h2 made odd) of its FNV-1a 64-bit hash.
const (
	bloomPrefix    = "bloom1"
	bloomHashes    = 7
	bloomBitsPerIn = 10
)

func bloomPositions(name string, m uint64, yield func(uint64) bool) {
	h := fnv.New64a()
	h.Write([]byte(name))
	sum := h.Sum64()
	h1, h2 := sum&0xffffffff, sum>>32|1
	for j := range uint64(bloomHashes) {
		if !yield((h1 + j*h2) % m) {
			return
		}
	}
}

// bloomOf is the filter of names (distinct or not).
func bloomOf(names []string) string {
	n := max(len(names), 8)
	bits := make([]byte, (n*bloomBitsPerIn+7)/8)
	m := uint64(len(bits)) * 8
	for _, name := range names {
		bloomPositions(name, m, func(p uint64) bool {
			bits[p/8] |= 1 << (p % 8)
			return true
		})
	}
	return bloomPrefix + " " + strconv.Itoa(bloomHashes) + " " + base64.StdEncoding.EncodeToString(bits)
}

// bloomMayHold reports whether filter may hold name: false only if it
// surely does not. A filter it cannot parse may hold anything.
func bloomMayHold(filter, name string) bool {
	f := strings.Fields(filter)
	if len(f) != 3 || f[0] != bloomPrefix || f[1] != strconv.Itoa(bloomHashes) {
		return true
	}
	bits, err := base64.StdEncoding.DecodeString(f[2])
	if err != nil || len(bits) == 0 {
		return true
	}
	m := uint64(len(bits)) * 8
	all := true
	bloomPositions(name, m, func(p uint64) bool {
		all = bits[p/8]&(1<<(p%8)) != 0
		return all
	})
	return all
}
