package servingcert

import (
	"testing"
	"time"
)

func TestRenewAt(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		name     string
		lifetime time.Duration
		want     time.Duration
	}{
		{"a week renews after four days and a half", 7 * 24 * time.Hour, 112 * time.Hour},
		{"ten minutes", 10 * time.Minute, 400 * time.Second},
		{"three seconds", 3 * time.Second, 2 * time.Second},
		{"already ended", 0, 0},
	} {
		if got := RenewAt(t0, t0.Add(c.lifetime)); !got.Equal(t0.Add(c.want)) {
			t.Errorf("%s: RenewAt = %s after receipt, want %s", c.name, got.Sub(t0), c.want)
		}
	}
}

func TestBackoff(t *testing.T) {
	for _, c := range []struct {
		failures int
		want     time.Duration
	}{
		{0, 0}, {1, time.Second}, {2, 2 * time.Second}, {6, 32 * time.Second}, {7, time.Minute}, {100, time.Minute},
	} {
		if got := Backoff(c.failures); got != c.want {
			t.Errorf("Backoff(%d) = %s, want %s", c.failures, got, c.want)
		}
	}
}
