// Package heapstat is ipledger's one way for a benchmark to weigh what a
// structure keeps: the live Go heap, read after a collection, so that two
// readings around building something differ by what it holds and not by
// garbage.
package heapstat

import "runtime"

// Live runs a collection and returns the bytes of heap objects still
// reachable (runtime.MemStats.HeapAlloc right after it).
func Live() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// PerItem is the live heap gained from before to after, per item of n:
// the bytes each of n things built in between keeps.
func PerItem(before, after uint64, n int) float64 {
	return (float64(after) - float64(before)) / float64(n)
}
