package controlplane

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// FreePorts returns n distinct loopback TCP ports that were free a moment ago,
// for servers a test or the dev environment starts as separate processes.
func FreePorts(n int) ([]int, error) { return FreePortsOn("127.0.0.1", n) }

// FreePortsOn is FreePorts for host, an address of this machine.
//
// The ports come from below the kernel's ephemeral range. A port the kernel
// hands out for "127.0.0.1:0" is one it may hand out again, a moment later,
// as the local end of any outgoing connection (a client dialling the
// apiserver, say), and the server given that port then fails with "address
// already in use". Outgoing connections never take a port outside the
// ephemeral range, so only another explicit bind can race for one of these.
func FreePortsOn(host string, n int) ([]int, error) {
	low, high := staticPortRange()
	var ports []int
	var listeners []net.Listener
	defer func() {
		for _, l := range listeners {
			l.Close()
		}
	}()
	for attempts := 0; len(ports) < n; attempts++ {
		if attempts == 1000 {
			return nil, fmt.Errorf("no free port on %s in %d-%d after %d attempts", host, low, high, attempts)
		}
		port := low + rand.IntN(high-low+1)
		if !reserve(port) {
			continue
		}
		l, err := net.Listen("tcp", net.JoinHostPort(host, strconv.Itoa(port)))
		if err != nil {
			continue
		}
		listeners = append(listeners, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// staticPortRange is the range FreePorts draws from: 20000-29999, clear of
// the ports Kubernetes components listen on (102xx, 12379-12380 for
// lab/cluster's etcd) and of the NodePort range (30000-32767), and cut short
// below the first ephemeral port (/proc/sys/net/ipv4/ip_local_port_range)
// where the kernel's range starts lower than usual.
func staticPortRange() (low, high int) {
	low, high = 20000, 29999
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return low, high
	}
	fields := strings.Fields(string(b))
	if len(fields) != 2 {
		return low, high
	}
	if ephemeralLow, err := strconv.Atoi(fields[0]); err == nil && ephemeralLow > low+1000 && ephemeralLow <= high {
		high = ephemeralLow - 1
	}
	return low, high
}

// portReservation is how long a port FreePorts handed out stays reserved
// for its server to bind it, across the processes of this machine.
const portReservation = 10 * time.Minute

// reserve claims port for portReservation with a file created exclusively
// under os.TempDir()/ipledger-ports; an older claim is stale and taken over.
// Where the folder cannot be written, every port is claimed (the listen
// that follows still checks it is free now).
func reserve(port int) bool {
	dir := filepath.Join(os.TempDir(), "ipledger-ports")
	if err := os.MkdirAll(dir, 0o1777); err != nil {
		return true
	}
	path := filepath.Join(dir, strconv.Itoa(port))
	if fi, err := os.Stat(path); err == nil && time.Since(fi.ModTime()) > portReservation {
		_ = os.Remove(path)
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
	if err != nil {
		return !os.IsExist(err)
	}
	_ = f.Close()
	return true
}
