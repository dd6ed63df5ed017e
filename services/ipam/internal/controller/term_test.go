package controller

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/ipledger/ipledger/services/ipam/internal/ledger"
)

// The one table from a ledger error to the term's next phase and delay.
func TestAfterLedger(t *testing.T) {
	other := errors.New("connection refused")
	corruptErr := fmt.Errorf("open: %w", &ledger.CorruptError{Shard: "ipledger-ledger", Err: errors.New("bad entry")})
	for _, tc := range []struct {
		name      string
		err       error
		failures  int
		wantPhase phase
		wantDelay time.Duration
	}{
		{"opened", nil, 0, serving, 0},
		{"fenced by a newer term", fmt.Errorf("commit: %w", ledger.ErrFenced), 0, fenced, 0},
		{"fenced at open", ledger.ErrFenced, 3, fenced, 0},
		{"corrupt", corruptErr, 1, corrupt, corruptRetry},
		{"corrupt, again", corruptErr, 7, corrupt, corruptRetry},
		{"a commit failed: read the ledger again at once", other, 0, reopening, 0},
		{"first failed open", other, 1, reopening, time.Second},
		{"second", other, 2, reopening, 2 * time.Second},
		{"fourth", other, 4, reopening, 8 * time.Second},
		{"capped", other, 5, reopening, maxLedgerRetry},
		{"capped, long after", other, 60, reopening, maxLedgerRetry},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, d := afterLedger(tc.err, tc.failures)
			if p != tc.wantPhase || d != tc.wantDelay {
				t.Errorf("afterLedger(%v, %d) = %v, %v; want %v, %v", tc.err, tc.failures, p, d, tc.wantPhase, tc.wantDelay)
			}
		})
	}
}
