package cluster

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// LAN is a network on this machine standing for the LAN the nodes sit on,
// for the tests of an announcer (an ARP/NDP responder on a node, such as
// MetalLB's speaker). Its switch is a Linux bridge in a network namespace of
// its own, as a switch is a box of its own: the nodes' netfilter (kube-proxy's
// rules, and br_netfilter, which would run them on every frame a bridge in a
// node's namespace forwards) never sees the frames it switches between other
// machines — a bridge in the host's namespace would hand the first node's
// kube-proxy the traffic sent to another node's hardware address. On it are:
// the first node, by a veth whose end in the host's namespace (the node's,
// where hostNetwork pods run) is named Bridge and holds HostAddr; each node
// AddNode links, by a veth whose end in that node's namespace is named Bridge
// too (so one L2Advertisement's interfaces name them all); and clients, each
// in a network namespace of its own, as machines on the LAN are. Nothing else
// is on the switch, the machine's uplink least of all, so nothing said on the
// LAN (an announcer's ARP) reaches the real network; and the subnet is inside
// TestRanges, so no address on it is anyone's off this machine. The clients
// have no route but the LAN's.
type LAN struct {
	// Bridge is the name of every node's interface on the LAN (the
	// switch's own bridge is inside its namespace): the interface an
	// announcer must be held to.
	Bridge string
	// Subnet is the LAN's, on-link on every node's link and in every client.
	Subnet netip.Prefix
	// HostAddr is the first node's address on the LAN: the first of
	// Subnet.
	HostAddr netip.Addr

	// switchNetns is the file the switch's namespace is bound to, in
	// lanNetnsDir; its bridge is switchBridge.
	switchNetns string

	mu      sync.Mutex
	clients []*LANClient
	nodes   []Node
}

// switchBridge is the bridge inside a LAN's switch namespace; switchHostPort
// its port to the first node.
const (
	switchBridge   = "br0"
	switchHostPort = "host"
)

// LANClient is a machine on a LAN: a network namespace of its own with one
// interface on the switch.
type LANClient struct {
	// Netns is the file its network namespace is bound to, in lanNetnsDir.
	Netns string
	// Link is its interface inside Netns.
	Link string
	// Addr is its address on the LAN.
	Addr netip.Addr

	hostLink string
}

// lanNetnsDir holds the LAN clients' network namespaces, each bound to a
// file of its own (`unshare --net=FILE`). Not /run/netns, so not `ip netns
// add`: that bind-mounts /run/netns over itself, and a pod whose namespace
// containerd mounted there before can then never be torn down — the
// kubelet's StopPodSandbox fails on the namespace hidden below the bind, and
// the deleted pod stays terminating for as long as the bind lives (an ipam
// leader TestAnnounce deleted did, for minutes).
const lanNetnsDir = "/run/ipledger-lan"

// NewLAN creates the bridge name with subnet's first address, up. It
// refuses a subnet outside TestRanges, and a name that is a link of the
// machine's already unless it is a LAN's left by a run that was killed
// (then it is removed first, with its clients' namespaces).
func NewLAN(name string, subnet netip.Prefix) (*LAN, error) {
	subnet = subnet.Masked()
	out, err := exec.Command("ip", "-j", "route", "show").Output()
	if err != nil {
		return nil, fmt.Errorf("LAN %s: ip route show: %w", name, err)
	}
	var routes []struct {
		Dst  string `json:"dst"`
		Type string `json:"type"`
	}
	if err := json.Unmarshal(out, &routes); err != nil {
		return nil, fmt.Errorf("LAN %s: ip route show: %w: %s", name, err, out)
	}
	var onLink []string
	for _, r := range routes {
		if r.Type != "unreachable" && r.Dst != "default" {
			onLink = append(onLink, r.Dst)
		}
	}
	if err := checkLANSubnet(subnet, onLink); err != nil {
		return nil, fmt.Errorf("LAN %s: %w", name, err)
	}
	if len(name) > 10 {
		return nil, fmt.Errorf("LAN %s: the name is longer than 10 characters (its clients' links add 4)", name)
	}
	l := &LAN{Bridge: name, Subnet: subnet, HostAddr: subnet.Addr().Next(), switchNetns: filepath.Join(lanNetnsDir, name+"-sw")}
	if err := l.removeLeftovers(); err != nil {
		return nil, err
	}
	if err := makeNetns(l.switchNetns); err != nil {
		return nil, fmt.Errorf("LAN %s: %w", name, err)
	}
	// A switch runs no netfilter: br_netfilter, on by default in every
	// namespace once loaded, would pass the frames through the switch's
	// (empty) iptables and conntrack.
	for _, f := range []string{"bridge-nf-call-iptables", "bridge-nf-call-ip6tables", "bridge-nf-call-arptables"} {
		_ = l.inSwitch("sh", "-c", "f=/proc/sys/net/bridge/"+f+"; [ ! -e $f ] || echo 0 > $f")
	}
	for _, args := range [][]string{
		{"link", "add", switchBridge, "type", "bridge"},
		{"link", "set", "lo", "up"},
		{"link", "set", switchBridge, "up"},
		// Made inside, the node's end sent out to this process's
		// namespace, the host's.
		{"link", "add", switchHostPort, "type", "veth", "peer", "name", name, "netns", strconv.Itoa(os.Getpid())},
		{"link", "set", switchHostPort, "master", switchBridge, "up"},
	} {
		if err := l.inSwitch("ip", args...); err != nil {
			return nil, errors.Join(err, l.Close())
		}
	}
	for _, args := range [][]string{
		{"addr", "add", netip.PrefixFrom(l.HostAddr, subnet.Bits()).String(), "dev", name},
		{"link", "set", name, "up"},
	} {
		if err := ip(args...); err != nil {
			return nil, errors.Join(err, l.Close())
		}
	}
	return l, nil
}

// makeNetns binds a new network namespace to the file path.
func makeNetns(path string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(path, nil, 0o444); err != nil {
		return err
	}
	if out, err := exec.Command("unshare", "--net="+path, "true").CombinedOutput(); err != nil {
		return fmt.Errorf("unshare --net=%s: %w: %s", path, err, out)
	}
	return nil
}

// inSwitch runs bin with args inside the switch's namespace.
func (l *LAN) inSwitch(bin string, args ...string) error {
	if out, err := exec.Command("nsenter", append([]string{"--net=" + l.switchNetns, bin}, args...)...).CombinedOutput(); err != nil {
		return fmt.Errorf("LAN %s: %s %s in the switch: %w: %s", l.Bridge, bin, strings.Join(args, " "), err, out)
	}
	return nil
}

// checkLANSubnet refuses a LAN subnet that is not IPv4 inside TestRanges
// (an address on it could be someone's off this machine) or that overlaps
// the node's networks or a route of the machine (routes, other than the
// unreachable ones of TestRanges).
func checkLANSubnet(subnet netip.Prefix, routes []string) error {
	if !subnet.Addr().Is4() || !inTestRanges(subnet.String()) {
		return fmt.Errorf("subnet %s is not inside cluster.TestRanges %v: an address on it could be someone's off this machine", subnet, TestRanges)
	}
	for _, r := range append([]string{PodCIDR, ServiceCIDR}, routes...) {
		p, err := netip.ParsePrefix(r)
		if err != nil {
			a, aerr := netip.ParseAddr(r)
			if aerr != nil {
				return fmt.Errorf("route %q: %w", r, err)
			}
			p = netip.PrefixFrom(a, a.BitLen())
		}
		if p.Overlaps(subnet) {
			return fmt.Errorf("subnet %s overlaps %s, which this machine routes already", subnet, r)
		}
	}
	return nil
}

// removeLeftovers deletes the switch, the client namespaces and the first
// node's link of a LAN of the same name that a killed run left (or the
// bridge in the host's namespace of a LAN before the switch had one). The
// links to other nodes go with the switch's namespace.
func (l *LAN) removeLeftovers() error {
	var errs []error
	if entries, err := os.ReadDir(lanNetnsDir); err == nil {
		for _, e := range entries {
			if strings.HasPrefix(e.Name(), l.Bridge+"-") {
				errs = append(errs, removeNetns(filepath.Join(lanNetnsDir, e.Name())))
			}
		}
	}
	if _, err := os.Stat(filepath.Join("/sys/class/net", l.Bridge)); err == nil {
		_, bridgeErr := os.Stat(filepath.Join("/sys/class/net", l.Bridge, "bridge"))
		kind, _ := exec.Command("ip", "-d", "-j", "link", "show", l.Bridge).Output()
		if bridgeErr != nil && !strings.Contains(string(kind), `"info_kind":"veth"`) {
			return fmt.Errorf("LAN %s: the machine has a link of that name that is neither a LAN's veth nor its old bridge; not touching it", l.Bridge)
		}
		errs = append(errs, ip("link", "delete", l.Bridge))
	}
	return errors.Join(errs...)
}

// MAC is the hardware address of the first node's interface on the LAN:
// what an announcer on it answers ARP with.
func (l *LAN) MAC() (net.HardwareAddr, error) {
	raw, err := os.ReadFile(filepath.Join("/sys/class/net", l.Bridge, "address"))
	if err != nil {
		return nil, err
	}
	return net.ParseMAC(strings.TrimSpace(string(raw)))
}

// AddClient puts a machine on the LAN at addr: namespace <bridge>-c<n>,
// its interface "lan0" (a veth whose peer <bridge>-c<n> is a port of the
// switch), and no route but the LAN's.
func (l *LAN) AddClient(addr netip.Addr) (*LANClient, error) {
	if !l.Subnet.Contains(addr) || addr == l.HostAddr {
		return nil, fmt.Errorf("LAN %s: client address %s is not a free address of %s", l.Bridge, addr, l.Subnet)
	}
	l.mu.Lock()
	n := len(l.clients) + 1
	name := fmt.Sprintf("%s-c%d", l.Bridge, n)
	c := &LANClient{Netns: filepath.Join(lanNetnsDir, name), Link: "lan0", Addr: addr, hostLink: name}
	l.clients = append(l.clients, c)
	l.mu.Unlock()
	if err := makeNetns(c.Netns); err != nil {
		return nil, err
	}
	// The veth is made inside the client and its peer sent to the switch:
	// `ip link ... netns` opens a name holding a slash as a file.
	for _, args := range [][]string{
		{"link", "add", c.Link, "type", "veth", "peer", "name", c.hostLink, "netns", l.switchNetns},
		{"addr", "add", netip.PrefixFrom(addr, l.Subnet.Bits()).String(), "dev", c.Link},
		{"link", "set", "lo", "up"},
		{"link", "set", c.Link, "up"},
	} {
		if err := c.ip(args...); err != nil {
			return nil, err
		}
	}
	if err := l.inSwitch("ip", "link", "set", c.hostLink, "master", switchBridge, "up"); err != nil {
		return nil, err
	}
	return c, nil
}

// removeNetns unbinds a client's namespace and removes its file: with no
// process left inside, the namespace goes, and its veth with it.
func removeNetns(path string) error {
	if err := syscall.Unmount(path, syscall.MNT_DETACH); err != nil && !errors.Is(err, syscall.EINVAL) && !errors.Is(err, syscall.ENOENT) {
		return fmt.Errorf("unmount %s: %w", path, err)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}

// Close removes the clients' namespaces (their veths go with them), the
// switch's (with the links to the nodes) and the first node's link; what
// Snapshot reads is then as before NewLAN.
func (l *LAN) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	var errs []error
	for _, c := range l.clients {
		errs = append(errs, removeNetns(c.Netns))
	}
	l.clients = nil
	// The nodes' links and the first node's are deleted here, at once: a
	// namespace unbound goes later, in the kernel's own time.
	for _, n := range l.nodes {
		errs = append(errs, l.deleteNodeLink(n))
	}
	l.nodes = nil
	if _, err := os.Stat(filepath.Join("/sys/class/net", l.Bridge)); err == nil {
		errs = append(errs, ip("link", "delete", l.Bridge))
	}
	errs = append(errs, removeNetns(l.switchNetns))
	if err := os.Remove(lanNetnsDir); err != nil && !errors.Is(err, fs.ErrNotExist) && !errors.Is(err, syscall.ENOTEMPTY) {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// Command is name with args run inside the client's namespace.
func (c *LANClient) Command(ctx context.Context, name string, args ...string) *exec.Cmd {
	return exec.CommandContext(ctx, "nsenter", append([]string{"--net=" + c.Netns, name}, args...)...)
}

// ip runs ip with args inside the client's namespace.
func (c *LANClient) ip(args ...string) error {
	if out, err := c.Command(context.Background(), "ip", args...).CombinedOutput(); err != nil {
		return fmt.Errorf("ip %s in %s: %w: %s", strings.Join(args, " "), c.Netns, err, out)
	}
	return nil
}

// Neighbour is what the client's neighbour table says of addr: the
// hardware address ARP found (nil when none) and the entry's state
// (REACHABLE, STALE, FAILED, INCOMPLETE…; empty when there is no entry).
func (c *LANClient) Neighbour(addr netip.Addr) (net.HardwareAddr, string, error) {
	out, err := c.Command(context.Background(), "ip", "-j", "neigh", "show", "to", addr.String(), "dev", c.Link).Output()
	if err != nil {
		return nil, "", fmt.Errorf("ip neigh show to %s in %s: %w", addr, c.Netns, err)
	}
	var entries []struct {
		Dst    string   `json:"dst"`
		LLAddr string   `json:"lladdr"`
		State  []string `json:"state"`
	}
	if err := json.Unmarshal(out, &entries); err != nil {
		return nil, "", fmt.Errorf("ip neigh show to %s in %s: %w: %s", addr, c.Netns, err, out)
	}
	for _, e := range entries {
		if e.Dst != addr.String() {
			continue
		}
		var mac net.HardwareAddr
		if e.LLAddr != "" {
			if mac, err = net.ParseMAC(e.LLAddr); err != nil {
				return nil, "", err
			}
		}
		return mac, strings.Join(e.State, ","), nil
	}
	return nil, "", nil
}

// ForgetNeighbour deletes the client's neighbour entry for addr, so that
// its next packet there resolves addr by ARP again.
func (c *LANClient) ForgetNeighbour(addr netip.Addr) error {
	return c.ip("neigh", "flush", "to", addr.String(), "dev", c.Link)
}

// Uplinks are the interfaces of the machine's default routes (IPv4 and
// IPv6): the way to the real network, where no test packet may go.
func Uplinks() ([]string, error) {
	var devs []string
	for _, family := range []string{"-4", "-6"} {
		out, err := exec.Command("ip", family, "-j", "route", "show", "default").Output()
		if err != nil {
			return nil, fmt.Errorf("ip %s route show default: %w", family, err)
		}
		var routes []struct {
			Dev string `json:"dev"`
		}
		if err := json.Unmarshal(out, &routes); err != nil {
			return nil, fmt.Errorf("ip %s route show default: %w: %s", family, err, out)
		}
		for _, r := range routes {
			if r.Dev != "" && !slices.Contains(devs, r.Dev) {
				devs = append(devs, r.Dev)
			}
		}
	}
	return devs, nil
}

// ARPPacket is one ARP packet an ARPCapture saw.
type ARPPacket struct {
	// Reply is an ARP reply (operation 2), else a request.
	Reply bool
	// Outgoing: this machine sent it (else it came in).
	Outgoing           bool
	SenderMAC          net.HardwareAddr
	SenderIP, TargetIP netip.Addr
}

func (p ARPPacket) String() string {
	dir := "in"
	if p.Outgoing {
		dir = "out"
	}
	if p.Reply {
		return fmt.Sprintf("ARP reply (%s): %s is at %s, to %s", dir, p.SenderIP, p.SenderMAC, p.TargetIP)
	}
	return fmt.Sprintf("ARP request (%s): who has %s, tell %s (%s)", dir, p.TargetIP, p.SenderIP, p.SenderMAC)
}

// ARPCapture records the ARP packets an interface of the host's network
// namespace sends and receives, from CaptureARP until Close. It only
// listens (a packet socket bound to the interface): it sends nothing.
type ARPCapture struct {
	Interface string

	fd      int
	stopped atomic.Bool
	done    chan struct{}
	mu      sync.Mutex
	packets []ARPPacket
	err     error
}

const (
	ethPARP = 0x0806
	ethPAll = 0x0003
)

func htons(v uint16) uint16 { return v<<8 | v>>8 }

// arpOnly is a classic BPF program keeping the Ethernet frames of type ARP
// (ldh [12]; jeq #0x806; ret all; ret none).
var arpOnly = []syscall.SockFilter{
	{Code: syscall.BPF_LD | syscall.BPF_H | syscall.BPF_ABS, K: 12},
	{Code: syscall.BPF_JMP | syscall.BPF_JEQ | syscall.BPF_K, Jt: 0, Jf: 1, K: ethPARP},
	{Code: syscall.BPF_RET | syscall.BPF_K, K: 0xffff},
	{Code: syscall.BPF_RET | syscall.BPF_K, K: 0},
}

// CaptureARP starts recording iface's ARP packets. The socket is of every
// protocol (ETH_P_ALL) with a filter keeping ARP: one of the ARP protocol
// would see only what comes in, never what the machine sends.
func CaptureARP(iface string) (*ARPCapture, error) {
	ifi, err := net.InterfaceByName(iface)
	if err != nil {
		return nil, err
	}
	// Protocol 0 until bound, so that nothing arrives before the filter.
	fd, err := syscall.Socket(syscall.AF_PACKET, syscall.SOCK_RAW|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("capture ARP on %s: %w", iface, err)
	}
	fail := func(err error) (*ARPCapture, error) {
		syscall.Close(fd)
		return nil, fmt.Errorf("capture ARP on %s: %w", iface, err)
	}
	if err := syscall.AttachLsf(fd, arpOnly); err != nil {
		return fail(err)
	}
	// A receive timeout, so that the reader sees Close within 200ms.
	tv := syscall.NsecToTimeval((200 * time.Millisecond).Nanoseconds())
	if err := syscall.SetsockoptTimeval(fd, syscall.SOL_SOCKET, syscall.SO_RCVTIMEO, &tv); err != nil {
		return fail(err)
	}
	if err := syscall.Bind(fd, &syscall.SockaddrLinklayer{Protocol: htons(ethPAll), Ifindex: ifi.Index}); err != nil {
		return fail(err)
	}
	c := &ARPCapture{Interface: iface, fd: fd, done: make(chan struct{})}
	go c.read()
	return c, nil
}

func (c *ARPCapture) read() {
	defer close(c.done)
	buf := make([]byte, 1600)
	for !c.stopped.Load() {
		n, from, err := syscall.Recvfrom(c.fd, buf, 0)
		if errors.Is(err, syscall.EAGAIN) || errors.Is(err, syscall.EINTR) {
			continue
		}
		if err != nil {
			c.mu.Lock()
			c.err = err
			c.mu.Unlock()
			return
		}
		p, ok := parseARP(buf[:n])
		if !ok {
			continue
		}
		if ll, isLL := from.(*syscall.SockaddrLinklayer); isLL && ll.Pkttype == syscall.PACKET_OUTGOING {
			p.Outgoing = true
		}
		c.mu.Lock()
		c.packets = append(c.packets, p)
		c.mu.Unlock()
	}
}

// parseARP reads an Ethernet frame carrying IPv4-over-Ethernet ARP.
func parseARP(frame []byte) (ARPPacket, bool) {
	const eth = 14
	if len(frame) < eth+28 || binary.BigEndian.Uint16(frame[12:14]) != ethPARP {
		return ARPPacket{}, false
	}
	a := frame[eth:]
	if binary.BigEndian.Uint16(a[2:4]) != 0x0800 || a[4] != 6 || a[5] != 4 {
		return ARPPacket{}, false
	}
	return ARPPacket{
		Reply:     binary.BigEndian.Uint16(a[6:8]) == 2,
		SenderMAC: slices.Clone(net.HardwareAddr(a[8:14])),
		SenderIP:  netip.AddrFrom4([4]byte(a[14:18])),
		TargetIP:  netip.AddrFrom4([4]byte(a[24:28])),
	}, true
}

// Packets returns what the capture saw so far, and the error that stopped
// it early, if one did.
func (c *ARPCapture) Packets() ([]ARPPacket, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.packets), c.err
}

// Close stops the capture; idempotent.
func (c *ARPCapture) Close() error {
	if c.stopped.Swap(true) {
		return nil
	}
	<-c.done
	return syscall.Close(c.fd)
}

func ip(args ...string) error {
	if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
		return fmt.Errorf("ip %s: %w: %s", strings.Join(args, " "), err, out)
	}
	return nil
}
