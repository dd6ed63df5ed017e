package cluster

import (
	"net/netip"
	"strings"
	"testing"
)

func TestNodeOf(t *testing.T) {
	for _, tc := range []struct {
		i                                              int
		name, ip, podCIDR, hostAddr, link, cgroup, dir string
	}{
		{1, "ipledger-node", "192.0.2.2", "10.244.0.0/24", "", "", "", "/d"},
		{2, "ipledger-node-2", "10.244.255.2", "10.244.1.0/24", "10.244.255.1", "ipl-node-2", "/ipledger-node-2", "/d/node-2"},
		{3, "ipledger-node-3", "10.244.255.6", "10.244.2.0/24", "10.244.255.5", "ipl-node-3", "/ipledger-node-3", "/d/node-3"},
		{4, "ipledger-node-4", "10.244.255.10", "10.244.3.0/24", "10.244.255.9", "ipl-node-4", "/ipledger-node-4", "/d/node-4"},
	} {
		n := nodeOf("/d", "192.0.2.2", tc.i)
		if n.Name != tc.name || n.IP != tc.ip || n.PodCIDR != tc.podCIDR || n.hostAddr != tc.hostAddr || n.HostLink != tc.link || n.cgroupRoot != tc.cgroup || n.l.dir != tc.dir {
			t.Errorf("node %d = %+v (host %s, cgroup %q, dir %s), want %s %s pods %s host %s link %s cgroup %q dir %s",
				tc.i, n.Node, n.hostAddr, n.cgroupRoot, n.l.dir, tc.name, tc.ip, tc.podCIDR, tc.hostAddr, tc.link, tc.cgroup, tc.dir)
		}
		if tc.i > 1 {
			if n.Netns != tc.dir+"/netns" {
				t.Errorf("node %d's namespace is bound to %q, want %s/netns (under the folder Down unmounts)", tc.i, n.Netns, tc.dir)
			}
			if len(n.HostLink) > 15 {
				t.Errorf("link name %q is longer than IFNAMSIZ-1", n.HostLink)
			}
			// Its link is a /30 of NodeLinkCIDR, its pods inside ClusterCIDR,
			// and all of it inside TestRanges: nothing leaves the machine.
			link := netip.MustParsePrefix(tc.ip + "/30").Masked()
			if !netip.MustParsePrefix(NodeLinkCIDR).Contains(link.Addr()) || !link.Contains(netip.MustParseAddr(tc.hostAddr)) {
				t.Errorf("node %d's link %s is not a /30 of %s holding the host's %s", tc.i, link, NodeLinkCIDR, tc.hostAddr)
			}
			if netip.MustParsePrefix(ClusterCIDR).Contains(link.Addr()) {
				t.Errorf("node %d's link %s is inside ClusterCIDR %s: kube-proxy would take the node's own traffic for a pod's", tc.i, link, ClusterCIDR)
			}
		}
		if !netip.MustParsePrefix(ClusterCIDR).Contains(netip.MustParsePrefix(n.PodCIDR).Addr()) || !inTestRanges(n.PodCIDR) {
			t.Errorf("node %d's pods %s: want inside ClusterCIDR %s and TestRanges", tc.i, n.PodCIDR, ClusterCIDR)
		}
	}
}

func TestNodeCommand(t *testing.T) {
	bin, args := nodeOf("/d", "192.0.2.2", 1).command("kubelet", "--v=0")
	if bin != "kubelet" || strings.Join(args, " ") != "--v=0" {
		t.Errorf("the first node runs %s %q, want kubelet itself in the host's namespace", bin, args)
	}
	bin, args = nodeOf("/d", "192.0.2.2", 2).command("kubelet", "--v=0")
	if bin != "nsenter" || strings.Join(args, " ") != "--net=/d/node-2/netns kubelet --v=0" {
		t.Errorf("node 2 runs %s %q, want nsenter into its namespace (nsenter execs: the pid file names the kubelet)", bin, args)
	}
}

func TestNodeConfigs(t *testing.T) {
	cl := layout{dir: "/d"}
	first, second := nodeOf("/d", "192.0.2.2", 1), nodeOf("/d", "192.0.2.2", 2)
	if k := kubeletConfig(cl, first); strings.Contains(k, "cgroupRoot") || !strings.Contains(k, "address: 192.0.2.2\n") ||
		!strings.Contains(k, "unix:///d/containerd/containerd.sock") {
		t.Errorf("the first node's kubelet configuration:\n%s", k)
	}
	k := kubeletConfig(cl, second)
	for _, want := range []string{"cgroupRoot: /ipledger-node-2\n", "address: 10.244.255.2\n", "unix:///d/node-2/containerd/containerd.sock",
		`clientCAFile: "/d/pki/ca.crt"`, `podLogsDir: "/d/node-2/pod-logs"`} {
		if !strings.Contains(k, want) {
			t.Errorf("node 2's kubelet configuration lacks %q:\n%s", want, k)
		}
	}
	p := kubeProxyConfig(cl, second)
	for _, want := range []string{"hostnameOverride: ipledger-node-2\n", "bindAddress: 10.244.255.2\n", "clusterCIDR: 10.244.0.0/17\n", `kubeconfig: "/d/kubeconfig"`} {
		if !strings.Contains(p, want) {
			t.Errorf("node 2's kube-proxy configuration lacks %q:\n%s", want, p)
		}
	}
	if c := cniConfig(second.l, Bridge, second.PodCIDR); !strings.Contains(c, `"subnet": "10.244.1.0/24"`) || !strings.Contains(c, `"dataDir": "/d/node-2/cni/ipam"`) {
		t.Errorf("node 2's CNI configuration:\n%s", c)
	}
	if c := containerdConfig(second.l, "pause"); !strings.Contains(c, `address = "/d/node-2/containerd/containerd.sock"`) || !strings.Contains(c, `root = "/d/node-2/containerd/root"`) {
		t.Errorf("node 2's containerd configuration:\n%s", c)
	}
}

func TestNodesFromEnv(t *testing.T) {
	for v, want := range map[string]int{"": 1, "1": 1, "2": 2, "4": 4, "0": 0, "5": 0, "two": 0} {
		t.Setenv("IPLEDGER_NODES", v)
		got, err := nodesFromEnv()
		if want == 0 {
			if err == nil || !strings.Contains(err.Error(), "IPLEDGER_NODES") {
				t.Errorf("IPLEDGER_NODES=%q: %d, %v; want an error naming it", v, got, err)
			}
			continue
		}
		if err != nil || got != want {
			t.Errorf("IPLEDGER_NODES=%q: %d, %v; want %d", v, got, err, want)
		}
	}
}
