package integration

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/ipledger/ipledger/lab/testenv"
)

// leaderOnly are the series only the lease holder knows; alerts fire on them.
var leaderOnly = []string{
	"ipledger_ipam_pool_addresses", "ipledger_ipam_pending_services", "ipledger_ipam_ledger_corrupt",
	"ipledger_ipam_ledger_bytes", "ipledger_ipam_ledger_shards", "ipledger_ipam_ledger_entries",
}

// TestStandbyExportsNoLeaderGauges: a replica whose term ends stops
// exporting pool usage, pending Services and the ledger's size, so that a
// standby never reports values a former leader computed.
func TestStandbyExportsNoLeaderGauges(t *testing.T) {
	h := newHarness(t)
	h.poolIn("tstandby-"+h.lease[len("ipam-"):], []string{h.ns}, "10.78.4.0/30")
	h.service("a", nil)
	r := h.start("ipam-0")
	h.expect(wait, map[string]string{"a": "10.78.4.0"})
	series := func() map[string]int {
		out := map[string]int{}
		for _, name := range leaderOnly {
			n, err := testutil.GatherAndCount(r.reg, name)
			if err != nil {
				t.Fatal(err)
			}
			out[name] = n
		}
		return out
	}
	testenv.Eventually(t, wait, func() error {
		for name, n := range series() {
			if n == 0 {
				return fmt.Errorf("the leader does not export %s", name)
			}
		}
		return nil
	})

	// Another holder takes the Lease for a minute: ipam-0's term ends.
	ctx := context.Background()
	leases := h.env.Client.CoordinationV1().Leases(h.ledgerNS)
	testenv.Eventually(t, wait, func() error {
		l, err := leases.Get(ctx, h.lease, metav1.GetOptions{})
		if err != nil {
			return err
		}
		now := metav1.NewMicroTime(time.Now())
		l.Spec.HolderIdentity, l.Spec.LeaseDurationSeconds = ptr.To("elsewhere"), ptr.To[int32](60)
		l.Spec.AcquireTime, l.Spec.RenewTime = &now, &now
		_, err = leases.Update(ctx, l, metav1.UpdateOptions{})
		return err
	})
	testenv.Eventually(t, wait, func() error {
		for name, n := range series() {
			if n != 0 {
				return fmt.Errorf("the standby still exports %d series of %s", n, name)
			}
		}
		return nil
	})
}
