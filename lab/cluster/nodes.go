package cluster

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// More nodes on the same machine (Options.Nodes, IPLEDGER_NODES). The first
// node keeps the control plane, the host's network namespace and the pods'
// bridge; node n (n >= 2) is named ipledger-node-n and has, all of its own:
//
//   - a network namespace, bound to <dir>/node-n/netns, joined to the host by
//     a veth: the host's end ipl-node-n, the node's eth0, a /30 of
//     NodeLinkCIDR between them (the node's address is its InternalIP), and
//     the node's default route through the host. The host routes the node's
//     pod CIDR to it: pods on different nodes reach each other through the
//     host, as through a router, with their own addresses (no overlay, no
//     NAT);
//   - a containerd (socket, root, state, runc root under <dir>/node-n) with
//     the node's images imported, a bridge CNI network on a bridge inside
//     its namespace with the pod CIDR 10.244.(n-1).0/24 of ClusterCIDR;
//   - a kubelet (root directory, pod logs, cgroup root /ipledger-node-n) and a
//     kube-proxy, both in its namespace, on the one API server.
//
// They run the binaries of the first node; nothing more is built or
// pulled. Down removes them with the rest.

// MaxNodes is the most nodes Up runs on one machine.
const MaxNodes = 4

// Node is one node of the cluster.
type Node struct {
	// Name is its Node object's name: NodeName for the first, NodeName-<n>
	// for node n.
	Name string
	// IP is its InternalIP: the address of the machine's default route for
	// the first, its end of its link to the host for the others.
	IP string
	// PodCIDR holds its pods' addresses.
	PodCIDR string
	// Netns is the file its network namespace is bound to (nsenter
	// --net=<Netns>); empty for the first, which lives in the host's.
	Netns string
	// HostLink is the host's end of its link; empty for the first.
	HostLink string
}

// node is a Node with the files of its processes.
type node struct {
	Node
	// index is 1 for the first node.
	index int
	// l holds its containerd, kubelet, logs and pid files: the cluster's
	// folder for the first node, <dir>/node-<n> for node n.
	l layout
	// hostAddr is the host's address on the node's link (empty for the
	// first).
	hostAddr string
	// cgroupRoot is the kubelet's cgroup root: "" (/) for the first.
	cgroupRoot string
}

// nodeOf returns node i (from 1) of the cluster in dir whose first node
// has the address nodeIP.
func nodeOf(dir, nodeIP string, i int) node {
	if i == 1 {
		return node{Node: Node{Name: NodeName, IP: nodeIP, PodCIDR: PodCIDR}, index: 1, l: layout{dir: dir}}
	}
	link := netip.MustParsePrefix(NodeLinkCIDR).Addr().As4()
	link[3] = byte(4 * (i - 2))
	base := netip.AddrFrom4(link)
	pods := netip.MustParsePrefix(ClusterCIDR).Addr().As4()
	pods[2] = byte(i - 1)
	name := fmt.Sprintf("%s-%d", NodeName, i)
	nl := layout{dir: filepath.Join(dir, fmt.Sprintf("node-%d", i))}
	return node{
		Node: Node{
			Name:     name,
			IP:       base.Next().Next().String(),
			PodCIDR:  netip.PrefixFrom(netip.AddrFrom4(pods), 24).String(),
			Netns:    nl.path("netns"),
			HostLink: fmt.Sprintf("ipl-node-%d", i),
		},
		index:      i,
		l:          nl,
		hostAddr:   base.Next().String(),
		cgroupRoot: "/" + name,
	}
}

// extraNodes are the nodes beyond the first whose folders exist in dir:
// what Down takes down, however many Up started.
func extraNodes(dir, nodeIP string) []node {
	var out []node
	for i := 2; i <= MaxNodes; i++ {
		n := nodeOf(dir, nodeIP, i)
		if _, err := os.Stat(n.l.dir); err == nil {
			out = append(out, n)
		}
	}
	return out
}

// command is bin with args, run in the node's network namespace.
func (n node) command(bin string, args ...string) (string, []string) {
	if n.Netns == "" {
		return bin, args
	}
	return "nsenter", append([]string{"--net=" + n.Netns, bin}, args...)
}

// run runs bin with args in the node's network namespace.
func (n node) run(bin string, args ...string) error {
	name, argv := n.command(bin, args...)
	if out, err := exec.Command(name, argv...).CombinedOutput(); err != nil {
		return fmt.Errorf("node %s: %s %s: %w: %s", n.Name, bin, strings.Join(args, " "), err, out)
	}
	return nil
}

// makeNetwork binds a new network namespace to n.Netns, links it to the
// host (HostLink, eth0 inside) and routes n.PodCIDR to it; inside, the
// default route goes through the host and forwarding is on (the bridge
// plugin turns it on too, at the first pod).
func (n node) makeNetwork() error {
	if err := os.WriteFile(n.Netns, nil, 0o444); err != nil {
		return err
	}
	if out, err := exec.Command("unshare", "--net="+n.Netns, "true").CombinedOutput(); err != nil {
		return fmt.Errorf("node %s: unshare --net=%s: %w: %s", n.Name, n.Netns, err, out)
	}
	bits := netip.MustParsePrefix(NodeLinkCIDR).Bits() + 6 // a /30 each
	for _, args := range [][]string{
		// Made inside, the host's end sent out: a link named eth0 cannot
		// exist in the host's namespace, where the machine's eth0 is.
		{"link", "add", "eth0", "type", "veth", "peer", "name", n.HostLink, "netns", strconv.Itoa(os.Getpid())},
		{"addr", "add", fmt.Sprintf("%s/%d", n.IP, bits), "dev", "eth0"},
		{"link", "set", "lo", "up"},
		{"link", "set", "eth0", "up"},
		{"route", "add", "default", "via", n.hostAddr},
	} {
		if err := n.run("ip", args...); err != nil {
			return err
		}
	}
	if err := n.run("sh", "-c", "echo 1 > /proc/sys/net/ipv4/ip_forward"); err != nil {
		return err
	}
	for _, args := range [][]string{
		{"addr", "add", fmt.Sprintf("%s/%d", n.hostAddr, bits), "dev", n.HostLink},
		{"link", "set", n.HostLink, "up"},
		{"route", "add", n.PodCIDR, "via", n.IP, "dev", n.HostLink},
	} {
		if err := ip(args...); err != nil {
			return fmt.Errorf("node %s: %w", n.Name, err)
		}
	}
	// The host routes between the nodes' pods: forwarding on (Down puts
	// the sysctl back).
	return os.WriteFile("/proc/sys/net/ipv4/ip_forward", []byte("1"), 0o644)
}

// makeCgroupRoot creates the kubelet's cgroup root in every hierarchy (the
// kubelet refuses a root that does not exist), with cpuset's CPUs and
// memory nodes copied from the parent (cgroup v1 leaves them empty, and a
// cpuset without CPUs takes no process).
func (n node) makeCgroupRoot() error {
	for _, h := range cgroupHierarchies() {
		dir := filepath.Join(h, n.cgroupRoot)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
		for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
			if v, err := os.ReadFile(filepath.Join(h, f)); err == nil {
				if err := os.WriteFile(filepath.Join(dir, f), v, 0o644); err != nil {
					return fmt.Errorf("%s: %w", filepath.Join(dir, f), err)
				}
			}
		}
	}
	return nil
}

// cgroupHierarchies are the cgroup hierarchies' roots: each mount below
// /sys/fs/cgroup (v1, and the v2 one of a hybrid host), or /sys/fs/cgroup
// itself on a v2-only host.
func cgroupHierarchies() []string {
	if _, err := os.Stat("/sys/fs/cgroup/cgroup.controllers"); err == nil {
		return []string{"/sys/fs/cgroup"}
	}
	var out []string
	entries, _ := os.ReadDir("/sys/fs/cgroup")
	for _, e := range entries {
		p := filepath.Join("/sys/fs/cgroup", e.Name())
		if fi, err := os.Lstat(p); err != nil || !fi.IsDir() { // cpu -> cpu,cpuacct links
			continue
		}
		out = append(out, p)
	}
	return out
}

// startExtraNode brings node n up beside the first, which is Ready: its
// network, cgroup root, containerd with the node's images, kubelet and
// kube-proxy; it returns once the node is Ready.
func (c *Cluster) startExtraNode(ctx context.Context, n node) error {
	for _, d := range []string{"logs", "run", "cni/net.d", "containerd", "kubelet", "pod-logs"} {
		if err := os.MkdirAll(n.l.path(d), 0o755); err != nil {
			return err
		}
	}
	if err := n.makeNetwork(); err != nil {
		return err
	}
	if err := n.makeCgroupRoot(); err != nil {
		return err
	}
	if err := c.writeNodeFiles(n); err != nil {
		return err
	}
	if err := c.startContainerd(ctx, n); err != nil {
		return err
	}
	if err := c.importInto(ctx, n, c.l.path("images")); err != nil {
		return err
	}
	if err := c.startNode(n); err != nil {
		return err
	}
	return c.waitNodeReady(ctx, n, 2*time.Minute)
}

// netnsInode is the inode of the network namespace bound to path (0 when
// none is).
func netnsInode(path string) uint64 {
	var fst syscall.Statfs_t
	if err := syscall.Statfs(path, &fst); err != nil || fst.Type != nsfsMagic {
		return 0
	}
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		return 0
	}
	return st.Ino
}

// nsfsMagic is the file system type of a bound namespace (NSFS_MAGIC).
const nsfsMagic = 0x6e736673

// netnsHolders are the processes inside the network namespace of inode
// ino: a namespace lives on, with its links and iptables rules, while one
// process is inside.
func netnsHolders(ino uint64) []string {
	var out []string
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		var st syscall.Stat_t
		if err := syscall.Stat(filepath.Join("/proc", e.Name(), "ns", "net"), &st); err != nil || st.Ino != ino {
			continue
		}
		comm, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "comm"))
		out = append(out, fmt.Sprintf("%s (%s)", e.Name(), strings.TrimSpace(string(comm))))
	}
	return out
}

// removeNodeNetwork deletes node n's link (its peer goes with it, and the
// host's route to its pods) and unbinds its namespace; it returns the
// namespace's inode, for checkNetnsGone.
func removeNodeNetwork(n node) (uint64, error) {
	var errs []error
	if _, err := os.Stat(filepath.Join("/sys/class/net", n.HostLink)); err == nil {
		errs = append(errs, ip("link", "delete", n.HostLink))
	}
	ino := netnsInode(n.Netns)
	if err := syscall.Unmount(n.Netns, syscall.MNT_DETACH); err != nil && !errors.Is(err, syscall.EINVAL) && !errors.Is(err, fs.ErrNotExist) {
		errs = append(errs, fmt.Errorf("unmount %s: %w", n.Netns, err))
	}
	return ino, errors.Join(errs...)
}

// checkNetnsGone fails when a process is still inside node n's network
// namespace (of inode ino) once it is down.
func checkNetnsGone(n node, ino uint64) error {
	if ino == 0 {
		return nil
	}
	if left := netnsHolders(ino); len(left) > 0 {
		return fmt.Errorf("node %s is down but processes are still in its network namespace: %s", n.Name, strings.Join(left, ", "))
	}
	return nil
}

// nodesFromEnv is IPLEDGER_NODES, or 1.
func nodesFromEnv() (int, error) {
	v := os.Getenv("IPLEDGER_NODES")
	if v == "" {
		return 1, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 || n > MaxNodes {
		return 0, fmt.Errorf("IPLEDGER_NODES=%q: want a number of nodes from 1 to %d", v, MaxNodes)
	}
	return n, nil
}

// NodeMemory is the resident memory, in bytes, of each of node name's own
// processes (containerd, kubelet, kube-proxy; for the first node the
// control plane's too), read from /proc: what a node costs the machine
// beside its pods.
func (c *Cluster) NodeMemory(name string) (map[string]int64, error) {
	for _, n := range c.nodes {
		if n.Name != name {
			continue
		}
		names := nodeDaemons
		if n.index == 1 {
			names = daemons
		}
		out := map[string]int64{}
		for _, d := range names {
			p, ok := running(n.l, d)
			if !ok {
				return nil, fmt.Errorf("node %s: %s is not running", name, d)
			}
			status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", p.pid))
			if err != nil {
				return nil, err
			}
			for _, line := range strings.Split(string(status), "\n") {
				if f := strings.Fields(line); len(f) == 3 && f[0] == "VmRSS:" {
					kb, err := strconv.ParseInt(f[1], 10, 64)
					if err != nil {
						return nil, fmt.Errorf("/proc/%d/status: %q: %w", p.pid, line, err)
					}
					out[d] = kb << 10
				}
			}
		}
		return out, nil
	}
	return nil, fmt.Errorf("no node %s in the cluster", name)
}
