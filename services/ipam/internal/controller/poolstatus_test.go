package controller

import (
	"math"
	"math/big"
	"testing"

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
		want        map[string]any
	}{
		{"empty family", big.NewInt(0), big.NewInt(0),
			map[string]any{"total": int64(0), "used": int64(0), "available": int64(0), "totalExact": "0", "availableExact": "0"}},
		{"IPv4 /30 half used", big.NewInt(4), big.NewInt(2),
			map[string]any{"total": int64(4), "used": int64(2), "available": int64(2), "totalExact": "4", "availableExact": "2"}},
		{"2^63-1 fits", new(big.Int).Sub(pow(63), big.NewInt(1)), big.NewInt(0),
			map[string]any{"total": int64(math.MaxInt64), "used": int64(0), "available": int64(math.MaxInt64),
				"totalExact": "9223372036854775807", "availableExact": "9223372036854775807"}},
		{"IPv6 /64 capped", pow(64), big.NewInt(3),
			map[string]any{"total": int64(math.MaxInt64), "used": int64(3), "available": int64(math.MaxInt64),
				"totalExact": "18446744073709551616", "availableExact": "18446744073709551613"}},
		{"IPv6 /64 nearly full: available fits again", pow(64), new(big.Int).Sub(pow(64), big.NewInt(10)),
			map[string]any{"total": int64(math.MaxInt64), "used": int64(math.MaxInt64), "available": int64(10),
				"totalExact": "18446744073709551616", "availableExact": "10"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := familyStatus(allocator.FamilyUsage{Total: tt.total, Used: tt.used})
			if len(got) != len(tt.want) {
				t.Fatalf("familyStatus = %v, want %v", got, tt.want)
			}
			for k, w := range tt.want {
				if got[k] != w {
					t.Errorf("%s = %#v, want %#v", k, got[k], w)
				}
			}
		})
	}
}
