package controller

import (
	"testing"
	"time"
)

// TestRetryPolicy: per key, the delay after each consecutive failure, its
// cap, and a success that starts the key over; keys do not share counts.
func TestRetryPolicy(t *testing.T) {
	ms := time.Millisecond
	for _, tc := range []struct {
		name string
		key  string
		want []time.Duration // after failures 1, 2, ...
	}{
		{"a Service", "web/a", []time.Duration{100 * ms, 200 * ms, 400 * ms, 800 * ms, 1600 * ms}},
		{"the IPPool finalizers", finalizersKey, []time.Duration{100 * ms, 200 * ms, 400 * ms}},
		{"the ledger", ledgerKey, []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second, maxLedgerRetry, maxLedgerRetry}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := retries{}
			r.failed("web/other") // another key's failure counts for nothing here
			for i, want := range tc.want {
				if got := r.failed(tc.key); got != want {
					t.Fatalf("failure %d: %v, want %v", i+1, got, want)
				}
			}
			r.forget(tc.key)
			if got := r.failed(tc.key); got != tc.want[0] {
				t.Fatalf("after a success: %v, want %v", got, tc.want[0])
			}
		})
	}
	r := retries{}
	var d time.Duration
	for range 40 {
		d = r.failed("web/a")
	}
	if d != time.Minute {
		t.Fatalf("a Service after 40 failures waits %v, want the cap %v", d, time.Minute)
	}
}
