package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestLogFollowerEndsWithItsCommand: `ipledger-dev logs -f` killed (as
// Ctrl-C through make and go run may leave it) must not leave its tail
// following .dev/logs behind.
func TestLogFollowerEndsWithItsCommand(t *testing.T) {
	if dir := os.Getenv("IPLEDGER_DEV_LOGS_HELPER"); dir != "" {
		d := &Dev{dir: dir}
		_ = d.Logs(os.Stdout, true, "")
		return
	}
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "logs"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "logs", "ipam.log"), []byte("hello\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	helper := exec.Command(os.Args[0], "-test.run=^TestLogFollowerEndsWithItsCommand$")
	helper.Env = append(os.Environ(), "IPLEDGER_DEV_LOGS_HELPER="+dir)
	if err := helper.Start(); err != nil {
		t.Fatal(err)
	}
	tailPID := waitFor(t, func() (int, bool) { return childTail(helper.Process.Pid) })
	if err := helper.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = helper.Wait()
	waitFor(t, func() (int, bool) {
		err := syscall.Kill(tailPID, 0)
		return 0, err != nil && !isZombieOf(tailPID)
	})
}

// childTail finds the tail process started by pid. Go forks from any of
// the process's threads, so every thread's children are looked at.
func childTail(pid int) (int, bool) {
	lists, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/children", pid))
	var children []string
	for _, l := range lists {
		if b, err := os.ReadFile(l); err == nil {
			children = append(children, strings.Fields(string(b))...)
		}
	}
	for _, f := range children {
		var child int
		if _, err := fmt.Sscan(f, &child); err == nil {
			if comm, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", child)); strings.TrimSpace(string(comm)) == "tail" {
				return child, true
			}
		}
	}
	return 0, false
}

// isZombieOf reports whether pid is a zombie (exited, not yet reaped by init).
func isZombieOf(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	fields := strings.Fields(string(b))
	return len(fields) > 2 && fields[2] == "Z"
}

func waitFor(t *testing.T, cond func() (int, bool)) int {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if v, ok := cond(); ok {
			return v
		}
		if time.Now().After(deadline) {
			t.Fatal("condition not met after 10s")
		}
		time.Sleep(50 * time.Millisecond)
	}
}
