package testenv

import (
	"bytes"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/ipledger/ipledger/lab/controlplane"
)

// Process is an ipledger binary running as a child of the test.
type Process struct {
	Name    string
	LogPath string
	cmd     *exec.Cmd
	done    chan struct{}
	mu      sync.Mutex
	err     error
}

// StartProcess runs path with args (and extra environment) until the test
// ends, logging to a file that is printed when the test fails.
func StartProcess(t testing.TB, name, path string, env []string, args ...string) *Process {
	t.Helper()
	logPath := filepath.Join(t.TempDir(), name+".log")
	out, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(path, args...)
	cmd.Stdout, cmd.Stderr = out, out
	cmd.Env = append(os.Environ(), env...)
	cmd.SysProcAttr = controlplane.ProcAttr(false)
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	p := &Process{Name: name, LogPath: logPath, cmd: cmd, done: make(chan struct{})}
	go func() {
		err := cmd.Wait()
		out.Close()
		p.mu.Lock()
		p.err = err
		p.mu.Unlock()
		close(p.done)
	}()
	t.Cleanup(func() {
		p.Stop(10 * time.Second)
		if t.Failed() {
			logs, _ := os.ReadFile(logPath)
			if len(logs) > 20000 {
				logs = logs[len(logs)-20000:]
			}
			t.Logf("--- %s log (tail) ---\n%s", name, bytes.TrimSpace(logs))
		}
	})
	return p
}

// Stop sends SIGTERM and waits up to grace before SIGKILL. It returns the
// process's exit error (nil for a clean exit).
func (p *Process) Stop(grace time.Duration) error {
	if p.Exited() {
		return p.Err()
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(grace):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
	return p.Err()
}

// Kill sends SIGKILL, as a node crash would, and waits for the process.
func (p *Process) Kill() {
	_ = p.cmd.Process.Kill()
	<-p.done
}

// Exited reports whether the process has ended.
func (p *Process) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// PID is the process ID (for reading /proc: RSS, CPU time).
func (p *Process) PID() int { return p.cmd.Process.Pid }

// Done is closed when the process ends.
func (p *Process) Done() <-chan struct{} { return p.done }

// Err is the process's exit error once it has ended.
func (p *Process) Err() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.err
}

// Logs returns what the process has logged so far.
func (p *Process) Logs() string {
	b, err := os.ReadFile(p.LogPath)
	if err != nil {
		return fmt.Sprintf("(no log: %v)", err)
	}
	return string(b)
}

// FreeAddr returns a loopback address with a port free at the time of the
// call, for a process the test starts. The port is one no outgoing connection
// can take in the meantime (see controlplane.FreePorts).
func FreeAddr(t testing.TB) string {
	t.Helper()
	ports, err := controlplane.FreePorts(1)
	if err != nil {
		t.Fatal(err)
	}
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[0]))
}
