package allocator

import (
	"os"
	"testing"
)

// TestMain makes every operation of every Allocator in these tests and
// fuzzers check its indexes afterwards (checkIndexes).
func TestMain(m *testing.M) {
	checkIndexes = true
	os.Exit(m.Run())
}

// noChecks turns the checks off for a benchmark, which measures what
// production runs.
func noChecks(b *testing.B) {
	checkIndexes = false
	b.Cleanup(func() { checkIndexes = true })
}
