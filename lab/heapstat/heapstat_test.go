package heapstat

import (
	"runtime"
	"testing"
)

// A slice of 1 MiB kept between the readings weighs 1 MiB (within 64 KiB:
// the runtime frees and makes its own objects meanwhile); dropped, it
// weighs nothing.
func TestLive(t *testing.T) {
	before := Live()
	kept := make([]byte, 1<<20)
	kept[0] = 1
	held := Live()
	runtime.KeepAlive(kept)
	if got := PerItem(before, held, 1); got < 1<<20-64<<10 || got > 1<<20+64<<10 {
		t.Fatalf("a kept 1 MiB slice weighs %v bytes", got)
	}
	if got := PerItem(before, Live(), 1); got > 64<<10 {
		t.Fatalf("a dropped 1 MiB slice still weighs %v bytes", got)
	}
}
