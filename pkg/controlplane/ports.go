package controlplane

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
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
		l, err := net.Listen("tcp", net.JoinHostPort(host, strconv.Itoa(low+rand.IntN(high-low+1))))
		if err != nil {
			continue
		}
		listeners = append(listeners, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// staticPortRange is the range FreePorts draws from: from 10000 up to just
// below the first ephemeral port (/proc/sys/net/ipv4/ip_local_port_range),
// or 10000-29999 where that file is missing or the range starts too low.
func staticPortRange() (low, high int) {
	const floor, fallbackHigh = 10000, 29999
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return floor, fallbackHigh
	}
	fields := strings.Fields(string(b))
	if len(fields) != 2 {
		return floor, fallbackHigh
	}
	ephemeralLow, err := strconv.Atoi(fields[0])
	if err != nil || ephemeralLow <= floor+1000 {
		return floor, fallbackHigh
	}
	return floor, ephemeralLow - 1
}
