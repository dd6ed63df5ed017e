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
