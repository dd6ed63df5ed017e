package poolplan

import (
	"encoding/json"
	"math"
	"math/big"
	"testing"
	"time"

	"github.com/ipledger/ipledger/services/ipam/internal/allocator"
)

// TestFamilyStatusIsIntegersCappedWithExactDecimals: kubectl sorts and
// prints the counts as numbers; an IPv6 pool's total does not fit int64, so
// the integer is capped and the exact decimal kept beside it.
func TestFamilyStatusIsIntegersCappedWithExactDecimals(t *testing.T) {
	pow := func(n uint) *big.Int { return new(big.Int).Lsh(big.NewInt(1), n) }
	tests := []struct {
		name        string
		total, used *big.Int
		held        int64
		want        map[string]any
	}{
		{"empty family", big.NewInt(0), big.NewInt(0), 0,
			map[string]any{"total": int64(0), "used": int64(0), "held": int64(0), "available": int64(0), "totalExact": "0", "availableExact": "0"}},
		{"IPv4 /30 half used, one of them kept", big.NewInt(4), big.NewInt(2), 1,
			map[string]any{"total": int64(4), "used": int64(2), "held": int64(1), "available": int64(2), "totalExact": "4", "availableExact": "2"}},
		{"2^63-1 fits", new(big.Int).Sub(pow(63), big.NewInt(1)), big.NewInt(0), 0,
			map[string]any{"total": int64(math.MaxInt64), "used": int64(0), "held": int64(0), "available": int64(math.MaxInt64),
				"totalExact": "9223372036854775807", "availableExact": "9223372036854775807"}},
		{"IPv6 /64 capped", pow(64), big.NewInt(3), 3,
			map[string]any{"total": int64(math.MaxInt64), "used": int64(3), "held": int64(3), "available": int64(math.MaxInt64),
				"totalExact": "18446744073709551616", "availableExact": "18446744073709551613"}},
		{"IPv6 /64 nearly full: available fits again", pow(64), new(big.Int).Sub(pow(64), big.NewInt(10)), 5,
			map[string]any{"total": int64(math.MaxInt64), "used": int64(math.MaxInt64), "held": int64(5), "available": int64(10),
				"totalExact": "18446744073709551616", "availableExact": "10"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// The status is written as JSON: compare the JSON, byte for byte.
			got, _ := json.Marshal(familyStatus(allocator.FamilyUsage{Total: tt.total, Used: tt.used, Held: tt.held}))
			want, _ := json.Marshal(tt.want)
			if string(got) != string(want) {
				t.Fatalf("familyStatus = %s, want %s", got, want)
			}
		})
	}
}

// The typed status renders the JSON the map it replaced did: keys in
// alphabetical order, heldOutside written even when 0, the counts of a pool
// the allocator does not serve left out (a merge patch keeps the last ones).
func TestPoolStatusJSON(t *testing.T) {
	zero := 0
	ready := Condition{Type: "Ready", Status: "True", Reason: "Serving", Message: "The pool serves Services", ObservedGeneration: 2}
	for _, tc := range []struct {
		name   string
		status Status
		want   string
	}{{
		name: "served",
		status: Status{Conditions: []Condition{ready}, HeldOutside: &zero,
			IPv4: &FamilyCounts{Total: 4, Used: 1, Held: 1, Available: 3, TotalExact: "4", AvailableExact: "3"},
			IPv6: &FamilyCounts{TotalExact: "0", AvailableExact: "0"}, Kept: &zero},
		want: `{"status":{"conditions":[{"message":"The pool serves Services","observedGeneration":2,"reason":"Serving","status":"True","type":"Ready"}],` +
			`"heldOutside":0,"ipv4":{"available":3,"availableExact":"3","held":1,"total":4,"totalExact":"4","used":1},` +
			`"ipv6":{"available":0,"availableExact":"0","held":0,"total":0,"totalExact":"0","used":0},"kept":0}}`,
	}, {
		name:   "no allocator: conditions only, with their transition time once written",
		status: Status{Conditions: []Condition{{Type: "Ready", Status: "False", Reason: "LedgerUnreadable", Message: "m", LastTransitionTime: "2026-01-02T03:04:05Z"}}},
		want:   `{"status":{"conditions":[{"lastTransitionTime":"2026-01-02T03:04:05Z","message":"m","observedGeneration":0,"reason":"LedgerUnreadable","status":"False","type":"Ready"}]}}`,
	}} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := json.Marshal(map[string]any{"status": tc.status})
			if err != nil || string(got) != tc.want {
				t.Fatalf("status JSON =\n%s (%v)\nwant\n%s", got, err, tc.want)
			}
		})
	}
}

// TestPoolStatusWrite: conditions are written at once, counts at most once
// a Interval, and nothing unchanged.
func TestPoolStatusWrite(t *testing.T) {
	t0 := time.Date(2026, 12, 6, 3, 0, 0, 0, time.UTC)
	ready := []Condition{{Type: "Ready", Status: "True", Reason: "Serving", Message: "The pool serves Services"}}
	terminating := []Condition{{Type: "Ready", Status: "False", Reason: "Terminating", Message: "…"}}
	counts := func(used int64, conds []Condition) Status {
		return Status{Conditions: conds, IPv4: &FamilyCounts{Total: 256, Used: used, Available: 256 - used}}
	}
	kept := func(n int) Status { s := counts(1, ready); s.Kept = &n; return s }
	last := Written{Status: counts(1, ready), At: t0}
	tests := []struct {
		name      string
		written   bool
		status    Status
		now       time.Time
		wantWrite bool
		wantDue   time.Time
	}{
		{"first write of the term", false, counts(1, ready), t0, true, time.Time{}},
		{"unchanged", true, counts(1, ready), t0.Add(time.Hour), false, time.Time{}},
		{"counts changed soon after: deferred", true, counts(2, ready), t0.Add(100 * time.Millisecond), false, t0.Add(Interval)},
		{"kept changed soon after: deferred", true, kept(3), t0.Add(100 * time.Millisecond), false, t0.Add(Interval)},
		{"counts changed an interval later", true, counts(2, ready), t0.Add(Interval), true, time.Time{}},
		{"conditions changed at once", true, counts(1, terminating), t0.Add(time.Millisecond), true, time.Time{}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			write, due := writeNow(last, tc.written, tc.status, tc.now)
			if write != tc.wantWrite || !due.Equal(tc.wantDue) {
				t.Fatalf("poolStatusWrite = %v, %v; want %v, %v", write, due, tc.wantWrite, tc.wantDue)
			}
		})
	}
}
