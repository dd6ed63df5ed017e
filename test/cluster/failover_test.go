package cluster_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/ipledger/ipledger/lab/testenv"
)

// TestIPAMLeaderFailoverMidBurst: with two ipam replicas, deleting the
// leader's pod while Services pour in hands the Lease to another replica
// (the standby, or the replacement pod when it wins the race for the
// released Lease), which goes on where the leader stopped: every Service
// gets one address, no address shows on two Services at any moment, and the
// ledger equals the statuses.
func TestIPAMLeaderFailoverMidBurst(t *testing.T) {
	e := get(t)
	ctx := context.Background()
	e.scale(t, "ipledger-ipam", 2)
	ipams := e.pods(t, "ipledger-ipam")
	var leader, standby string
	testenv.Eventually(t, time.Minute, func() error {
		leader, standby = e.leader(t, "ipledger-ipam"), ""
		for _, p := range ipams {
			m, err := e.metrics(ctx, p.Name)
			if err != nil {
				return err
			}
			if p.Name != leader && m["ipledger_stream_synced"] == 1 {
				standby = p.Name
			}
		}
		if standby == "" {
			return fmt.Errorf("leader %q, no synced standby among the %d ipam pods yet", leader, len(ipams))
		}
		return nil
	})

	dups := e.watchDuplicates()
	l := e.startLoad(t, 20*time.Millisecond, 200)
	l.waitCreated(t, 50)
	t.Logf("deleting the ipam leader %s; standby %s", leader, standby)
	e.deletePod(t, podNamed(t, ipams, leader))
	// The deleted leader releases the Lease as it drains; the standby and
	// the Deployment's replacement pod (synced a few seconds later) both
	// campaign, and either may win the released Lease. What must hold is
	// that a live replica leads and goes on where the leader stopped.
	var successor string
	testenv.Eventually(t, time.Minute, func() error {
		successor = e.leader(t, "ipledger-ipam")
		if successor == "" || successor == leader {
			return fmt.Errorf("the Lease is held by %q; want a replica other than the deleted leader %s", successor, leader)
		}
		return nil
	})
	t.Logf("the Lease went to %s (the standby was %s)", successor, standby)
	l.waitCreated(t, 200)
	e.ips(t, l.ns, l.stop(t), 2*time.Minute)
	dups.check(t, "addresses on two Services")
	e.consistent(t, "")
	e.rolledOut(t, "ipledger-ipam")
}
