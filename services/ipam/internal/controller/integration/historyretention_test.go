package integration

import (
	"context"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ipledger/ipledger/lab/testenv"
	"github.com/ipledger/ipledger/services/ipam/internal/history"
)

// storedHistory is what the history ConfigMaps of the test's ledger
// namespace hold for ip, as "action name".
func (h *harness) storedHistory(ip string) ([]string, error) {
	entries, err := history.Read(context.Background(), h.env.Client, h.ledgerNS)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, e := range entries {
		if e.IP.String() == ip {
			out = append(out, string(e.Action)+" "+e.Name)
		}
	}
	return out, nil
}

func (h *harness) expectStored(ip string, want ...string) {
	h.t.Helper()
	testenv.Eventually(h.t, wait, func() error {
		got, err := h.storedHistory(ip)
		if err != nil {
			return err
		}
		if !slices.Equal(got, want) {
			return fmt.Errorf("history ConfigMaps hold for %s:\n got %q\nwant %q", ip, got, want)
		}
		return nil
	})
}

// Retention on the real API server, across ipam restarts: with
// --history-max-per-address 4 and --history-max-age 1h, the ConfigMaps
// keep the 4 newest entries of an address that changed holder 7 times,
// and, once the clock has moved 2 hours on, none of an address nobody
// holds and only the entry saying who holds the other.
func TestHistoryRetentionAcrossRestarts(t *testing.T) {
	h := newHarness(t)
	var skew atomic.Int64 // how far the history's clock is ahead
	h.historyRetention = history.Retention{MaxAge: time.Hour, MaxPerAddress: 4}
	h.historyNow = func() time.Time { return time.Now().Add(time.Duration(skew.Load())) }
	h.pool("thist-keep-"+h.lease[len("ipam-"):], "10.83.4.0/31")
	at := func(ip string) map[string]string { return map[string]string{"ipledger.io/loadBalancerIPs": ip} }

	r := h.start("ipam-0")
	h.service("x", at("10.83.4.1"))
	h.expect(wait, map[string]string{"x": "10.83.4.1"})
	h.deleteService("x")
	for range 3 {
		h.service("c", at("10.83.4.0"))
		h.expect(wait, map[string]string{"c": "10.83.4.0"})
		h.deleteService("c")
		h.expectStored("10.83.4.1", "granted x", "released x") // and c's release is written: the address is free again
		testenv.Eventually(t, wait, func() error {
			got, err := h.storedHistory("10.83.4.0")
			if err != nil || len(got) == 0 || got[len(got)-1] != "released c" {
				return fmt.Errorf("history of 10.83.4.0 %q (%v), want it to end with c released", got, err)
			}
			return nil
		})
	}
	h.service("c", at("10.83.4.0"))
	h.expect(wait, map[string]string{"c": "10.83.4.0"})
	// Within the term, retention waits for its next round (every 10
	// minutes): all 7 entries of 10.83.4.0 are there.
	h.expectStored("10.83.4.0", "granted c", "released c", "granted c", "released c", "granted c", "released c", "granted c")

	// The next term trims as it starts: the 4 newest.
	r = h.restart(r, "ipam-1")
	h.expectStored("10.83.4.0", "released c", "granted c", "released c", "granted c")
	h.expectStored("10.83.4.1", "granted x", "released x")

	// Two hours later, for the history's clock: everything is past the
	// maximum age but the entry saying c holds 10.83.4.0.
	skew.Store(int64(2 * time.Hour))
	r = h.restart(r, "ipam-2")
	h.expectStored("10.83.4.0", "granted c")
	h.expectStored("10.83.4.1")
	h.expect(wait, map[string]string{"c": "10.83.4.0"})
	r.stop()
}
