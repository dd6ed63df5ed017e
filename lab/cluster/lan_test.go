package cluster

import (
	"net/netip"
	"strings"
	"testing"
)

// TestLANSubnetStaysOnTheMachine: a LAN's subnet must lie inside
// TestRanges (unreachable off this machine) and clear of the node's
// networks and the machine's routes; NewLAN checks it before it touches the
// machine.
func TestLANSubnetStaysOnTheMachine(t *testing.T) {
	routes := []string{"192.0.2.0/24", "10.190.1.0/24", "10.190.2.7"}
	for subnet, want := range map[string]string{
		"10.190.77.0/24": "",
		"192.168.1.0/24": "TestRanges",
		"10.0.0.0/8":     "TestRanges",
		"fd00::/64":      "TestRanges",
		"10.96.0.0/24":   "TestRanges", // ServiceCIDR, outside TestRanges as well
		"10.244.0.0/24":  "overlaps 10.244.0.0/24",
		"10.244.0.0/16":  "overlaps 10.244.0.0/24",
		"10.190.0.0/16":  "overlaps 10.190.1.0/24",
		"10.190.2.0/24":  "overlaps 10.190.2.7",
	} {
		err := checkLANSubnet(netip.MustParsePrefix(subnet), routes)
		if want == "" && err != nil || want != "" && (err == nil || !strings.Contains(err.Error(), want)) {
			t.Errorf("checkLANSubnet(%s) = %v, want %q", subnet, err, want)
		}
	}
}

// TestParseARP reads the fields of an IPv4-over-Ethernet ARP frame and
// skips everything else.
func TestParseARP(t *testing.T) {
	reply := []byte{
		0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02, 0, 0, 0, 0, 1, 0x08, 0x06, // Ethernet: broadcast from 02:00:00:00:00:01, ARP
		0, 1, 0x08, 0, 6, 4, 0, 2, // Ethernet/IPv4, reply
		0x02, 0, 0, 0, 0, 1, 10, 190, 77, 64, // sender
		0x02, 0, 0, 0, 0, 2, 10, 190, 77, 2, // target
	}
	p, ok := parseARP(reply)
	if !ok || !p.Reply || p.SenderMAC.String() != "02:00:00:00:00:01" || p.SenderIP != netip.MustParseAddr("10.190.77.64") || p.TargetIP != netip.MustParseAddr("10.190.77.2") {
		t.Errorf("parseARP(reply) = %v, %v", p, ok)
	}
	request := append([]byte(nil), reply...)
	request[21] = 1
	if p, ok := parseARP(request); !ok || p.Reply {
		t.Errorf("parseARP(request) = %v, %v, want a request", p, ok)
	}
	ipv4 := append([]byte(nil), reply...)
	ipv4[12], ipv4[13] = 0x08, 0x00
	for name, frame := range map[string][]byte{"IPv4": ipv4, "short": reply[:30]} {
		if p, ok := parseARP(frame); ok {
			t.Errorf("parseARP(%s) = %v, want it skipped", name, p)
		}
	}
}
