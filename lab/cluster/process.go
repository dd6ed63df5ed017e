package cluster

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// daemon is one of the node's processes, known by its pid file: the node
// outlives the command that started it (`ipledger-cluster up`), and Down may
// run in another process.
type daemon struct {
	name string
	pid  int
	// start is the process's start time in clock ticks since boot, so that a
	// pid reused by another process is never signalled.
	start string
}

// launch starts bin with args in a session of its own (so that it outlives
// its caller and a terminal's Ctrl-C does not reach it), output to the
// node's log of name, and records its pid file.
func launch(l layout, name, bin string, args ...string) error {
	out, err := os.OpenFile(l.logFile(name), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer out.Close()
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", name, err)
	}
	pid := cmd.Process.Pid
	// Reap it if it dies while this process lives; Down finds it by pid.
	go func() { _ = cmd.Wait() }()
	start, err := startTime(pid)
	if err != nil {
		return fmt.Errorf("%s exited at once (log %s): %w", name, l.logFile(name), err)
	}
	return os.WriteFile(l.pidFile(name), []byte(fmt.Sprintf("%d %s\n", pid, start)), 0o644)
}

// startTime is field 22 of /proc/<pid>/stat.
func startTime(pid int) (string, error) {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return "", err
	}
	// The command name (field 2) may hold spaces; it ends at the last ')'.
	s := string(stat)
	fields := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(fields) < 20 {
		return "", fmt.Errorf("/proc/%d/stat: %d fields after the name", pid, len(fields))
	}
	return fields[19], nil
}

// running returns the node's daemon of name if its pid file names a live
// process.
func running(l layout, name string) (daemon, bool) {
	data, err := os.ReadFile(l.pidFile(name))
	if err != nil {
		return daemon{}, false
	}
	var d daemon
	d.name = name
	if _, err := fmt.Sscan(string(data), &d.pid, &d.start); err != nil {
		return daemon{}, false
	}
	if s, err := startTime(d.pid); err != nil || s != d.start {
		return daemon{}, false
	}
	return d, true
}

// alive says whether the process is still the one started.
func (d daemon) alive() bool {
	s, err := startTime(d.pid)
	return err == nil && s == d.start
}

// stop sends SIGTERM, then SIGKILL after grace, and waits for the process
// to be gone.
func (d daemon) stop(grace time.Duration) error {
	if !d.alive() {
		return nil
	}
	_ = syscall.Kill(d.pid, syscall.SIGTERM)
	if waitGone(d.alive, grace) {
		return nil
	}
	_ = syscall.Kill(d.pid, syscall.SIGKILL)
	if waitGone(d.alive, 10*time.Second) {
		return nil
	}
	return fmt.Errorf("%s (pid %d) still runs after SIGKILL", d.name, d.pid)
}

func waitGone(alive func() bool, timeout time.Duration) bool {
	deadline := time.Now().Add(timeout)
	for alive() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(50 * time.Millisecond)
	}
	return true
}

// stopDaemon stops the node's daemon of name, if it runs, and removes its
// pid file.
func stopDaemon(l layout, name string, grace time.Duration) error {
	if d, ok := running(l, name); ok {
		if err := d.stop(grace); err != nil {
			return err
		}
	}
	if err := os.Remove(l.pidFile(name)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}

// shims returns the containerd shims serving the containerd at socket: they
// leave containerd's process tree on purpose, so that containers survive a
// containerd restart.
func shims(socket string) []int {
	var pids []int
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		args := strings.Split(string(cmdline), "\x00")
		if len(args) > 0 && strings.HasPrefix(filepath.Base(args[0]), "containerd-shim") && hasArg(args, "-address", socket) {
			pids = append(pids, pid)
		}
	}
	return pids
}

func hasArg(args []string, flag, value string) bool {
	for i, a := range args {
		if a == flag+"="+value || (a == flag && i+1 < len(args) && args[i+1] == value) {
			return true
		}
	}
	return false
}
