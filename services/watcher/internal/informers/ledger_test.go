package informers

import (
	"testing"
	"time"
)

func TestReadDelay(t *testing.T) {
	now := time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		name string
		last time.Time
		want time.Duration
	}{
		{"never read: at once", time.Time{}, 0},
		{"read long ago: at once", now.Add(-time.Minute), 0},
		{"read exactly an interval ago: at once", now.Add(-500 * time.Millisecond), 0},
		{"read 200 ms ago: the rest of the interval", now.Add(-200 * time.Millisecond), 300 * time.Millisecond},
		{"read just now: a whole interval", now, 500 * time.Millisecond},
	} {
		if got := readDelay(c.last, now, 500*time.Millisecond); got != c.want {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
}
