// Package probetest gives readiness-probe tests a real TCP workload: a
// listener on 127.0.0.1 that records when each probe connected.
package probetest

import (
	"context"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ipledger/ipledger/lab/testenv"
)

// Listener accepts TCP connections on 127.0.0.1, closes them at once and
// records when each arrived. It is closed when the test ends.
type Listener struct {
	ln    net.Listener
	mu    sync.Mutex
	times []time.Time
}

// Listen starts a Listener on a free port of 127.0.0.1.
func Listen(t testing.TB) *Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := &Listener{ln: ln}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			l.mu.Lock()
			l.times = append(l.times, time.Now())
			l.mu.Unlock()
			c.Close()
		}
	}()
	t.Cleanup(func() { ln.Close() })
	return l
}

// Port is the listener's port.
func (l *Listener) Port() int { return l.ln.Addr().(*net.TCPAddr).Port }

// Accepted returns when each connection arrived, oldest first.
func (l *Listener) Accepted() []time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]time.Time(nil), l.times...)
}

// WaitAccepted waits until at least n connections were accepted and returns
// when each arrived. A probe's dial returns once the kernel completed the
// handshake, before this listener's Accept does, so a test that saw the
// probe's result waits here rather than reading Accepted at once.
func (l *Listener) WaitAccepted(t testing.TB, n int) []time.Time {
	t.Helper()
	testenv.Eventually(t, 30*time.Second, func() error {
		if got := l.Count(); got < n {
			return fmt.Errorf("%d probes accepted so far, want %d", got, n)
		}
		return nil
	})
	return l.Accepted()
}

// Count is the number of connections accepted so far.
func (l *Listener) Count() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.times)
}

// Close stops accepting: probes then fail with "connection refused".
func (l *Listener) Close() { l.ln.Close() }

// LoopbackDial sends a probe of 192.0.2.N (TEST-NET-1) to 127.0.0.N. A
// workload cannot have a loopback address (no EndpointSlice may hold one),
// so test workloads have TEST-NET addresses and their probes reach the
// tests' loopback listeners; no probe leaves the machine. Use it as
// prober.Config.Dial.
func LoopbackDial(ctx context.Context, network, address string) (net.Conn, error) {
	host, port, err := net.SplitHostPort(address)
	if err != nil {
		return nil, err
	}
	n, ok := strings.CutPrefix(host, "192.0.2.")
	if !ok {
		return nil, fmt.Errorf("test: %s is not a TEST-NET-1 address, not probed", host)
	}
	var d net.Dialer
	return d.DialContext(ctx, network, net.JoinHostPort("127.0.0."+n, port))
}
