package cluster

import (
	"encoding/json"
	"fmt"
	"net"
	"net/netip"
	"os/exec"
	"slices"
)

// AddNode links node n — one beyond the first, in a network namespace of
// its own (Node.Netns) — to the LAN: a veth whose end in n's namespace is
// named l.Bridge, like the first node's, and holds addr on the LAN's
// subnet, and whose other end (n.HostLink) is a port of the switch. An
// announcer on n answers on the LAN with that end's hardware address
// (NodeMAC). Close deletes the link.
func (l *LAN) AddNode(n Node, addr netip.Addr) error {
	if n.Netns == "" {
		return fmt.Errorf("LAN %s: node %s lives in the host's network namespace, on the LAN already", l.Bridge, n.Name)
	}
	if !l.Subnet.Contains(addr) || addr == l.HostAddr {
		return fmt.Errorf("LAN %s: node %s's address %s is not a free address of %s", l.Bridge, n.Name, addr, l.Subnet)
	}
	l.mu.Lock()
	if slices.ContainsFunc(l.nodes, func(o Node) bool { return o.Name == n.Name }) {
		l.mu.Unlock()
		return fmt.Errorf("LAN %s: node %s is on it already", l.Bridge, n.Name)
	}
	l.nodes = append(l.nodes, n)
	l.mu.Unlock()
	for _, args := range [][]string{
		{"link", "add", l.Bridge, "type", "veth", "peer", "name", n.HostLink, "netns", l.switchNetns},
		{"addr", "add", netip.PrefixFrom(addr, l.Subnet.Bits()).String(), "dev", l.Bridge},
		{"link", "set", l.Bridge, "up"},
	} {
		if err := inNode(n, "ip", args...); err != nil {
			return fmt.Errorf("LAN %s: %w", l.Bridge, err)
		}
	}
	return l.inSwitch("ip", "link", "set", n.HostLink, "master", switchBridge, "up")
}

// SetNodeLink puts node n's end of its link to the LAN up or down: down, the
// node neither hears nor says anything on the LAN, as with its cable pulled.
func (l *LAN) SetNodeLink(n Node, up bool) error {
	state := "down"
	if up {
		state = "up"
	}
	return inNode(n, "ip", "link", "set", l.Bridge, state)
}

// NodeMAC is the hardware address of node n's interface on the LAN: what an
// announcer on n answers ARP with.
func (l *LAN) NodeMAC(n Node) (net.HardwareAddr, error) {
	if n.Netns == "" {
		return l.MAC()
	}
	out, err := exec.Command("nsenter", "--net="+n.Netns, "ip", "-j", "link", "show", l.Bridge).Output()
	if err != nil {
		return nil, fmt.Errorf("LAN %s: node %s: ip link show: %w", l.Bridge, n.Name, err)
	}
	var links []struct {
		Address string `json:"address"`
	}
	if err := json.Unmarshal(out, &links); err != nil || len(links) != 1 {
		return nil, fmt.Errorf("LAN %s: node %s: ip link show: %v: %s", l.Bridge, n.Name, err, out)
	}
	return net.ParseMAC(links[0].Address)
}

// deleteNodeLink deletes node n's link to the LAN (both ends), if it is
// still there.
func (l *LAN) deleteNodeLink(n Node) error {
	if err := exec.Command("nsenter", "--net="+n.Netns, "ip", "link", "show", l.Bridge).Run(); err != nil {
		return nil // gone with the node's namespace, or never made
	}
	return inNode(n, "ip", "link", "delete", l.Bridge)
}

// inNode runs bin with args in node n's network namespace.
func inNode(n Node, bin string, args ...string) error {
	return node{Node: n}.run(bin, args...)
}
