package cluster

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"syscall"
)

// cniBinDir is where Debian's containernetworking-plugins installs.
const cniBinDir = "/usr/lib/cni"

// sysctls are the kernel settings the node's parts may change: the bridge
// plugin turns on forwarding, the kubelet sets its kernel defaults, and
// kube-proxy could size conntrack (its configuration asks it not to).
// Up records them and Down puts them back.
var sysctls = []string{
	"net/ipv4/ip_forward",
	"net/ipv6/conf/all/forwarding",
	"net/ipv4/conf/all/route_localnet",
	"net/bridge/bridge-nf-call-iptables",
	"net/bridge/bridge-nf-call-ip6tables",
	"net/netfilter/nf_conntrack_max",
	"net/netfilter/nf_conntrack_tcp_timeout_established",
	"net/netfilter/nf_conntrack_tcp_timeout_close_wait",
	"vm/overcommit_memory",
	"vm/panic_on_oom",
	"kernel/panic",
	"kernel/panic_on_oops",
	"kernel/keys/root_maxkeys",
	"kernel/keys/root_maxbytes",
}

// hostPaths are fixed paths outside the node's folder that containerd, the
// CNI plugins or the kubelet create whatever they are configured with. Down
// removes those that did not exist before Up.
var hostPaths = []string{
	"/run/containerd",
	"/run/netns",
	"/var/run/netns",
	"/var/lib/cni",
	"/var/log/containers",
	"/var/log/pods",
	"/var/lib/kubelet",
	"/var/lib/containerd",
	"/opt/containerd",
	"/etc/cni",
}

// TestRanges are the addresses test/cluster hands out — IPPools of
// journey.CreatePool (10.<100+n>) and of the scenarios (10.<200+n>), and
// ExternalWorkloads (10.21) — which nothing on this machine owns. A packet to
// one that no kube-proxy rule rewrites (the LoadBalancer address of a Service
// without endpoints, a workload behind an EndpointSlice) would follow the
// default route off the machine. Up gives each an unreachable route before it
// starts anything, so such a packet is refused here; Down removes them. The
// node's own networks stay reachable: the bridge's route to PodCIDR is more
// specific, ServiceCIDR is apart, and the machine's DNS servers are left
// out of the routes (makeTestRangesUnreachable).
var TestRanges = []string{"10.21.0.0/16", "10.100.0.0/14", "10.104.0.0/13", "10.112.0.0/12", "10.128.0.0/9"}

// cgroupName is the cgroup the kubelet puts every pod under, in each
// hierarchy.
const cgroupName = "kubepods"

// HostState is what of the machine the node changes, as Snapshot reads it.
// Down compares the machine with the snapshot Up took before changing
// anything.
type HostState struct {
	Sysctls  map[string]string `json:"sysctls"`
	Paths    []string          `json:"paths"`
	Chains   []string          `json:"chains"`
	NFTables []string          `json:"nftTables"`
	Links    []string          `json:"links"`
	Cgroups  []string          `json:"cgroups"`
	Netns    []string          `json:"netns"`
	Mounts   []string          `json:"mounts"`
	// Unreachable are the destinations of the machine's unreachable routes.
	Unreachable []string `json:"unreachable"`
	// IPSets are the names of the kernel's ip sets: nothing of the node
	// makes one, but a NetworkPolicy enforcer does (kube-router, which
	// test/cluster runs inside one test and must leave none behind). Empty
	// where the ipset command is not installed.
	IPSets []string `json:"ipsets"`
}

// Snapshot reads the host state that the node may change; mounts are those
// under dir.
func Snapshot(dir string) (HostState, error) {
	s := HostState{Sysctls: map[string]string{}}
	for _, key := range sysctls {
		if v, err := os.ReadFile(filepath.Join("/proc/sys", key)); err == nil {
			s.Sysctls[key] = strings.TrimSpace(string(v))
		}
	}
	for _, p := range hostPaths {
		if _, err := os.Lstat(p); err == nil {
			s.Paths = append(s.Paths, p)
		}
	}
	for _, tool := range []string{"iptables", "ip6tables"} {
		out, err := exec.Command(tool + "-save").Output()
		if err != nil {
			return s, fmt.Errorf("%s-save: %w", tool, err)
		}
		for _, c := range ownChains(string(out)) {
			s.Chains = append(s.Chains, tool+" "+c)
		}
	}
	if out, err := exec.Command("nft", "list", "tables").Output(); err == nil {
		s.NFTables = nftTables(string(out))
	}
	ifaces, err := os.ReadDir("/sys/class/net")
	if err != nil {
		return s, err
	}
	for _, i := range ifaces {
		s.Links = append(s.Links, i.Name())
	}
	s.Cgroups = podCgroups()
	if entries, err := os.ReadDir("/run/netns"); err == nil {
		for _, e := range entries {
			s.Netns = append(s.Netns, e.Name())
		}
	}
	info, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return s, err
	}
	s.Mounts = mountsUnder(string(info), dir)
	out, err := exec.Command("ip", "route", "show", "type", "unreachable").Output()
	if err != nil {
		return s, fmt.Errorf("ip route show type unreachable: %w", err)
	}
	s.Unreachable = routeDestinations(string(out))
	if _, err := exec.LookPath("ipset"); err == nil {
		out, err := exec.Command("ipset", "list", "-n").Output()
		if err != nil {
			return s, fmt.Errorf("ipset list -n: %w", err)
		}
		s.IPSets = ipsetNames(string(out))
	}
	return s, nil
}

// ipsetNames lists the sets of `ipset list -n` output, one name a line.
func ipsetNames(out string) []string {
	var names []string
	for _, line := range strings.Split(out, "\n") {
		if name := strings.TrimSpace(line); name != "" {
			names = append(names, name)
		}
	}
	return names
}

// routeDestinations lists the destinations of `ip route show type X`
// output ("10.21.0.0/16" of "unreachable 10.21.0.0/16 metric 1024").
func routeDestinations(out string) []string {
	var dsts []string
	for _, line := range strings.Split(out, "\n") {
		if f := strings.Fields(line); len(f) >= 2 {
			dsts = append(dsts, f[1])
		}
	}
	return dsts
}

// makeTestRangesUnreachable adds an unreachable route for each of
// TestRanges the machine does not have one for, leaving out the machine's
// DNS servers (this machine's resolver is 10.255.255.53, inside
// 10.128.0.0/9: without it nothing running while the node is up — a module
// download, a package fetch — could resolve a name).
func makeTestRangesUnreachable(before HostState) error {
	for _, r := range unreachableRanges(TestRanges, nameservers()) {
		if slices.Contains(before.Unreachable, r) {
			continue
		}
		if out, err := exec.Command("ip", "route", "add", "unreachable", r).CombinedOutput(); err != nil {
			return fmt.Errorf("ip route add unreachable %s: %w: %s", r, err, out)
		}
	}
	return nil
}

// unreachableRanges are ranges without the addresses in keep, as the fewest
// prefixes: 10.128.0.0/9 without 10.255.255.53 is 23 prefixes, from
// 10.128.0.0/10 down to 10.255.255.52 (a /32 is written as `ip route`
// shows it, a bare address).
func unreachableRanges(ranges []string, keep []netip.Addr) []string {
	var out []string
	for _, r := range ranges {
		parts := []netip.Prefix{netip.MustParsePrefix(r)}
		for _, a := range keep {
			var next []netip.Prefix
			for _, p := range parts {
				next = append(next, without(p, a)...)
			}
			parts = next
		}
		for _, p := range parts {
			if p.IsSingleIP() {
				out = append(out, p.Addr().String()) // as `ip route` shows it
			} else {
				out = append(out, p.String())
			}
		}
	}
	return out
}

// without is p less the address a: p itself when a is outside it, else the
// halves that do not hold a, largest first.
func without(p netip.Prefix, a netip.Addr) []netip.Prefix {
	if !p.Contains(a) {
		return []netip.Prefix{p}
	}
	if p.IsSingleIP() {
		return nil
	}
	lo := netip.PrefixFrom(p.Addr(), p.Bits()+1)
	hi := netip.PrefixFrom(lastAddr(lo).Next(), p.Bits()+1)
	if lo.Contains(a) {
		return append([]netip.Prefix{hi}, without(lo, a)...)
	}
	return append([]netip.Prefix{lo}, without(hi, a)...)
}

// lastAddr is the highest address of p (p masked).
func lastAddr(p netip.Prefix) netip.Addr {
	b := p.Addr().AsSlice()
	for i := p.Bits(); i < len(b)*8; i++ {
		b[i/8] |= 0x80 >> (i % 8)
	}
	a, _ := netip.AddrFromSlice(b)
	return a
}

// nameservers are the DNS servers of /etc/resolv.conf.
func nameservers() []netip.Addr {
	data, err := os.ReadFile("/etc/resolv.conf")
	if err != nil {
		return nil
	}
	var out []netip.Addr
	for _, line := range strings.Split(string(data), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "nameserver" {
			if a, err := netip.ParseAddr(f[1]); err == nil {
				out = append(out, a.Unmap())
			}
		}
	}
	return out
}

// removeTestRoutes deletes the unreachable routes inside TestRanges that Up
// added (those before did not have).
func removeTestRoutes(before HostState) error {
	out, err := exec.Command("ip", "route", "show", "type", "unreachable").Output()
	if err != nil {
		return fmt.Errorf("ip route show type unreachable: %w", err)
	}
	var errs []error
	for _, r := range routeDestinations(string(out)) {
		if inTestRanges(r) && !slices.Contains(before.Unreachable, r) {
			if out, err := exec.Command("ip", "route", "del", "unreachable", r).CombinedOutput(); err != nil {
				errs = append(errs, fmt.Errorf("ip route del unreachable %s: %w: %s", r, err, out))
			}
		}
	}
	return errors.Join(errs...)
}

// inTestRanges says whether the route destination dst ("10.128.0.0/10",
// or a bare address for a /32) lies inside one of TestRanges.
func inTestRanges(dst string) bool {
	p, err := netip.ParsePrefix(dst)
	if err != nil {
		a, err := netip.ParseAddr(dst)
		if err != nil {
			return false
		}
		p = netip.PrefixFrom(a, a.BitLen())
	}
	for _, r := range TestRanges {
		tr := netip.MustParsePrefix(r)
		if tr.Bits() <= p.Bits() && tr.Contains(p.Addr()) {
			return true
		}
	}
	return false
}

// Diff says what of after differs from before, one line each; empty when
// the machine is as it was.
func (before HostState) Diff(after HostState) []string {
	var out []string
	keys := make([]string, 0, len(after.Sysctls))
	for k := range after.Sysctls {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if b, ok := before.Sysctls[k]; ok && b != after.Sysctls[k] {
			out = append(out, fmt.Sprintf("sysctl %s is %s, was %s", k, after.Sysctls[k], b))
		}
	}
	list := func(what string, b, a []string) {
		for _, x := range a {
			if !slices.Contains(b, x) {
				out = append(out, what+" "+x+" left behind")
			}
		}
	}
	list("path", before.Paths, after.Paths)
	list("iptables chain", before.Chains, after.Chains)
	list("nftables table", before.NFTables, after.NFTables)
	list("network link", before.Links, after.Links)
	list("cgroup", before.Cgroups, after.Cgroups)
	list("network namespace", before.Netns, after.Netns)
	list("mount", before.Mounts, after.Mounts)
	list("unreachable route", before.Unreachable, after.Unreachable)
	list("ip set", before.IPSets, after.IPSets)
	return out
}

// isOwnChain says whether an iptables chain is the node's: kube-proxy's and
// the kubelet's start with KUBE-, the CNI plugins' with CNI-.
func isOwnChain(name string) bool {
	return strings.HasPrefix(name, "KUBE-") || strings.HasPrefix(name, "CNI-")
}

// ownChains lists the node's chains in iptables-save output, as "table
// chain".
func ownChains(save string) []string {
	var out []string
	table := ""
	for _, line := range strings.Split(save, "\n") {
		switch {
		case strings.HasPrefix(line, "*"):
			table = line[1:]
		case strings.HasPrefix(line, ":"):
			if name, _, _ := strings.Cut(line[1:], " "); isOwnChain(name) {
				out = append(out, table+" "+name)
			}
		}
	}
	return out
}

// iptablesCleanup turns iptables-save output into iptables-restore
// --noflush input that removes the node's rules and chains, one COMMIT per
// table: first every rule of another chain that jumps to one of the node's
// (the saved rule, -A made -D, quoting kept), then every own chain flushed
// before any is deleted (they jump to each other). Empty when there is
// nothing of the node's.
func iptablesCleanup(save string) string {
	type table struct{ jumps, flushes, deletes []string }
	var order []string
	tables := map[string]*table{}
	var cur *table
	for _, line := range strings.Split(save, "\n") {
		switch {
		case strings.HasPrefix(line, "*"):
			cur = &table{}
			tables[line[1:]] = cur
			order = append(order, line[1:])
		case cur == nil:
		case strings.HasPrefix(line, ":"):
			if name, _, _ := strings.Cut(line[1:], " "); isOwnChain(name) {
				cur.flushes = append(cur.flushes, "-F "+name)
				cur.deletes = append(cur.deletes, "-X "+name)
			}
		case strings.HasPrefix(line, "-A "):
			fields := strings.Fields(line)
			if len(fields) < 2 || isOwnChain(fields[1]) {
				continue
			}
			for i, f := range fields {
				if (f == "-j" || f == "-g") && i+1 < len(fields) && isOwnChain(fields[i+1]) {
					cur.jumps = append(cur.jumps, "-D "+line[len("-A "):])
					break
				}
			}
		}
	}
	var out strings.Builder
	for _, name := range order {
		t := tables[name]
		if len(t.jumps)+len(t.flushes) == 0 {
			continue
		}
		out.WriteString("*" + name + "\n")
		for _, l := range append(append(t.jumps, t.flushes...), t.deletes...) {
			out.WriteString(l + "\n")
		}
		out.WriteString("COMMIT\n")
	}
	return out.String()
}

// nftTables lists `nft list tables` output as "family name".
func nftTables(out string) []string {
	var tables []string
	for _, line := range strings.Split(out, "\n") {
		if f := strings.Fields(line); len(f) == 3 && f[0] == "table" {
			tables = append(tables, f[1]+" "+f[2])
		}
	}
	return tables
}

// mountsUnder lists the mount points in mountinfo that are dir or below it,
// deepest first (the order to unmount them in). Mount points are octal
// escaped in mountinfo (a space is \040); they are returned as written.
func mountsUnder(mountinfo, dir string) []string {
	var out []string
	for _, line := range strings.Split(mountinfo, "\n") {
		f := strings.Fields(line)
		if len(f) < 5 {
			continue
		}
		if p := f[4]; p == dir || strings.HasPrefix(p, dir+"/") {
			out = append(out, p)
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return strings.Count(out[i], "/") > strings.Count(out[j], "/") })
	return out
}

// podCgroups lists, in each hierarchy, the first kubelet's pod cgroup and
// the cgroup roots of the nodes beyond the first (nodes.go), each with its
// kubelet's pods below it.
func podCgroups() []string {
	var out []string
	hierarchies, _ := filepath.Glob("/sys/fs/cgroup/*")
	hierarchies = append(hierarchies, "/sys/fs/cgroup")
	for _, h := range hierarchies {
		if _, err := os.Stat(filepath.Join(h, cgroupName)); err == nil {
			out = append(out, filepath.Join(h, cgroupName))
		}
		roots, _ := filepath.Glob(filepath.Join(h, NodeName+"-[0-9]*"))
		for _, r := range roots {
			if fi, err := os.Lstat(r); err == nil && fi.IsDir() {
				out = append(out, r)
			}
		}
	}
	return out
}

// cgroupProcesses returns the processes in cgroup dir and below.
func cgroupProcesses(dir string) []int {
	var pids []int
	_ = filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || d.Name() != "cgroup.procs" {
			return nil
		}
		f, err := os.Open(path)
		if err != nil {
			return nil
		}
		defer f.Close()
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			var pid int
			if _, err := fmt.Sscan(sc.Text(), &pid); err == nil {
				pids = append(pids, pid)
			}
		}
		return nil
	})
	return pids
}

// removeCgroup removes dir and every cgroup below it, deepest first; it
// fails while a process is still inside.
func removeCgroup(dir string) error {
	var dirs []string
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			dirs = append(dirs, path)
		}
		return nil
	})
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	for i := len(dirs) - 1; i >= 0; i-- {
		if err := syscall.Rmdir(dirs[i]); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("remove cgroup %s: %w", dirs[i], err)
		}
	}
	return nil
}
