package probetest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// Blackhole is a network namespace the test made, whose addresses in Prefix
// answer nothing: they are its own (on its loopback), and an iptables rule
// DROPs every TCP packet to them, so a connection to one is neither
// accepted nor refused — its SYNs vanish and the dial hangs until its
// deadline, as to a VM that is switched off behind a firewall. No packet
// leaves the namespace: it has no other link.
type Blackhole struct {
	// Prefix holds the unanswered addresses.
	Prefix netip.Prefix
	netns  string // the file the namespace is bound to
}

// NewBlackhole makes a Blackhole of prefix (a TEST-NET range, say). It
// needs root, unshare, nsenter, ip and iptables, as the e2e and cluster
// tests and CI's machines have; without them the test fails saying which,
// since a skip would pass for green.
func NewBlackhole(t testing.TB, prefix netip.Prefix) *Blackhole {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatalf("probetest.NewBlackhole: needs root to make a network namespace (running as uid %d)", os.Geteuid())
	}
	for _, tool := range []string{"unshare", "nsenter", "ip", "iptables"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("probetest.NewBlackhole: %s not found (%v): install it (CI's .ci/run installs iptables)", tool, err)
		}
	}
	dir, err := os.MkdirTemp("", "ipledger-blackhole-")
	if err != nil {
		t.Fatal(err)
	}
	b := &Blackhole{Prefix: prefix.Masked(), netns: filepath.Join(dir, "netns")}
	t.Cleanup(func() {
		if err := syscall.Unmount(b.netns, syscall.MNT_DETACH); err != nil && !errors.Is(err, syscall.EINVAL) && !errors.Is(err, syscall.ENOENT) {
			t.Errorf("unmount %s: %v", b.netns, err)
		}
		_ = os.RemoveAll(dir)
	})
	if err := os.WriteFile(b.netns, nil, 0o444); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("unshare", "--net="+b.netns, "true").CombinedOutput(); err != nil {
		t.Fatalf("probetest.NewBlackhole: unshare --net=%s: %v: %s", b.netns, err, out)
	}
	for _, args := range [][]string{
		{"ip", "link", "set", "lo", "up"},
		{"ip", "addr", "add", b.Prefix.String(), "dev", "lo"},
		{"iptables", "-w", "-A", "INPUT", "-d", b.Prefix.String(), "-p", "tcp", "-j", "DROP"},
	} {
		if out, err := exec.Command("nsenter", append([]string{"--net=" + b.netns}, args...)...).CombinedOutput(); err != nil {
			t.Fatalf("probetest.NewBlackhole: %s in %s: %v: %s", strings.Join(args, " "), b.netns, err, out)
		}
	}
	return b
}

// Dial connects from inside the namespace: the socket is made by a thread
// that entered it, so the connection is the namespace's (and its SYNs meet
// the DROP rule). The thread never leaves the namespace: it stays locked
// and ends with its goroutine.
func (b *Blackhole) Dial(ctx context.Context, network, address string) (net.Conn, error) {
	type result struct {
		c   net.Conn
		err error
	}
	ch := make(chan result, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread is discarded
		f, err := os.Open(b.netns)
		if err != nil {
			ch <- result{err: err}
			return
		}
		defer f.Close()
		if err := unix.Setns(int(f.Fd()), unix.CLONE_NEWNET); err != nil {
			ch <- result{err: fmt.Errorf("setns %s: %w", b.netns, err)}
			return
		}
		var d net.Dialer
		c, err := d.DialContext(ctx, network, address)
		ch <- result{c, err}
	}()
	r := <-ch
	return r.c, r.err
}
