package cluster

import (
	"context"
	"strings"
	"testing"
)

// TestFailNodeRefuses: only a node beyond the first can fail or be
// restored, and a name the cluster does not have is refused naming it —
// before anything on the machine changes (no link, no process is touched).
func TestFailNodeRefuses(t *testing.T) {
	c := Options{Dir: "/d", NodeIP: "192.0.2.2", Nodes: 2}.cluster()
	for _, tc := range []struct{ name, want string }{
		{NodeName, "is the first node"},
		{"ipledger-node-3", "no node ipledger-node-3"},
	} {
		if err := c.FailNode(tc.name); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("FailNode(%s) = %v, want an error saying %q", tc.name, err, tc.want)
		}
		if err := c.RestoreNode(context.Background(), tc.name); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("RestoreNode(%s) = %v, want an error saying %q", tc.name, err, tc.want)
		}
	}
	if n, err := c.extraNode(NodeName + "-2"); err != nil || n.HostLink != "ipl-node-2" {
		t.Errorf("extraNode(%s-2) = %+v, %v; want node 2 with its link ipl-node-2", NodeName, n.Node, err)
	}
}

// TestTaskRunning reads `ctr tasks ls`: a task is running only when its
// own line says RUNNING.
func TestTaskRunning(t *testing.T) {
	ls := "TASK    PID      STATUS\nabc     1234     RUNNING\nabcd    0        STOPPED\nxyz     99       PAUSED\n"
	for id, want := range map[string]bool{"abc": true, "abcd": false, "xyz": false, "ab": false, "": false} {
		if got := taskRunning(ls, id); got != want {
			t.Errorf("taskRunning(%q) = %v, want %v", id, got, want)
		}
	}
}
