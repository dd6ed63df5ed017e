package cluster

import "testing"

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
