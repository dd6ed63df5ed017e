package controlplane

import "testing"

func TestFreePortsAreDistinctAndOutsideTheEphemeralRange(t *testing.T) {
	low, high := staticPortRange()
	ports, err := FreePorts(50)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[int]bool{}
	for _, p := range ports {
		if p < low || p > high {
			t.Errorf("port %d outside %d-%d", p, low, high)
		}
		if seen[p] {
			t.Errorf("port %d returned twice", p)
		}
		seen[p] = true
	}
}

// A port handed out is not handed out again while reserved, by this
// process or any other (the claim is a file): two test binaries drawing at
// once never give one port to two servers.
func TestReservedPortIsNotHandedOutTwice(t *testing.T) {
	low, high := staticPortRange()
	var free int
	for p := low; p <= high; p++ {
		if reserve(p) {
			free = p
			break
		}
	}
	if free == 0 {
		t.Fatal("no port could be reserved")
	}
	if reserve(free) {
		t.Errorf("port %d reserved twice", free)
	}
}
