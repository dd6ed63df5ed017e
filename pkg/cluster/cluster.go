// Package cluster runs a real single-node Kubernetes on this machine for
// tests and for people: etcd and kube-apiserver (from hack/build-tools.sh),
// containerd and runc (Debian's packages), the kubelet, kube-controller-
// manager, kube-scheduler and kube-proxy (from hack/build-node.sh), a bridge
// CNI network and CoreDNS, with images imported from OCI archives and never
// pulled. Up is idempotent; Down stops every process and removes every piece
// of host state Up made (iptables chains, the bridge, cgroups, mounts,
// network namespaces, sysctls), then checks the machine is as Up found it.
// The node uses host-wide state, so there is one per machine: a lock and a
// marker file guard it.
package cluster

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"k8s.io/client-go/rest"

	"github.com/ipledger/ipledger/pkg/controlplane"
)

// DefaultDir is the node's folder: every file of the node lives there, and
// Down removes it.
const DefaultDir = "/var/lib/ipledger-node"

// lockFile serialises Up and Down on the machine, markerFile says which
// folder holds the node that is up, and useFile is the lock of Acquire.
const (
	lockFile   = "/run/ipledger-node.lock"
	markerFile = "/run/ipledger-node.dir"
	useFile    = "/run/ipledger-node.use.lock"
)

// AdminToken is the static bearer token of the node's `admin` user (group
// system:masters); the node's own components use it too.
const AdminToken = "ipledger-node-admin"

// Options configure Up and Down.
type Options struct {
	// Dir is the node's folder; empty means DefaultDir.
	Dir string
	// ToolsBin holds etcd, kube-apiserver and kubectl (hack/build-tools.sh);
	// NodeBin the kubelet, kube-controller-manager, kube-scheduler,
	// kube-proxy, coredns and pause (hack/build-node.sh). Empty means run the
	// script (it prints its cached folder).
	ToolsBin, NodeBin string
	// NodeIP is the address kube-apiserver and the kubelet listen on and pods
	// reach the host at; empty means the IPv4 address of the interface of
	// the default route.
	NodeIP string
	// Log receives progress lines; nil discards them.
	Log func(format string, args ...any)
}

// Cluster is a node that is up.
type Cluster struct {
	Dir      string
	NodeIP   string
	ToolsBin string
	NodeBin  string
	// APIServerURL is https://<node address>:6443.
	APIServerURL string
	// KubeconfigPath authenticates as admin and trusts the node's CA.
	KubeconfigPath string
	// CAFile is the node's CA (it signed kube-apiserver's certificate).
	CAFile string

	l layout
}

func (o *Options) defaults() error {
	if o.Dir == "" {
		o.Dir = DefaultDir
	}
	if o.Log == nil {
		o.Log = func(string, ...any) {}
	}
	var err error
	if o.ToolsBin == "" {
		if o.ToolsBin, err = scriptBin("IPLEDGER_TOOLS_BIN", "build-tools.sh"); err != nil {
			return err
		}
	}
	if o.NodeBin == "" {
		if o.NodeBin, err = scriptBin("IPLEDGER_NODE_BIN", "build-node.sh"); err != nil {
			return err
		}
	}
	if o.NodeIP == "" {
		if o.NodeIP, err = defaultRouteIPv4(); err != nil {
			return err
		}
	}
	return nil
}

func (o Options) cluster() *Cluster {
	l := layout{dir: o.Dir}
	return &Cluster{
		Dir: o.Dir, NodeIP: o.NodeIP, ToolsBin: o.ToolsBin, NodeBin: o.NodeBin,
		APIServerURL:   fmt.Sprintf("https://%s", net.JoinHostPort(o.NodeIP, fmt.Sprint(APIServerPort))),
		KubeconfigPath: l.kubeconfig(), CAFile: l.caCert(), l: l,
	}
}

// Up starts the node, or returns the one already up in opts.Dir when all of
// its processes run and its API server is ready; a node that is half up (a
// process died, a previous Up failed) is taken down first. It returns once
// the node is Ready and CoreDNS serves.
func Up(ctx context.Context, opts Options) (*Cluster, error) {
	if err := opts.defaults(); err != nil {
		return nil, err
	}
	unlock, err := lock()
	if err != nil {
		return nil, err
	}
	defer unlock()
	if other, err := os.ReadFile(markerFile); err == nil && string(other) != opts.Dir {
		return nil, fmt.Errorf("a node is up in %s (one per machine): take it down with `ipledger-cluster down --dir %s`", other, other)
	}
	c := opts.cluster()
	if c.healthy(ctx) {
		opts.Log("cluster: the node in %s is up already", opts.Dir)
		return c, nil
	}
	if _, err := os.Stat(markerFile); err == nil {
		opts.Log("cluster: the node in %s is half up; taking it down first", opts.Dir)
		if err := down(opts); err != nil {
			return nil, err
		}
	}
	if err := c.up(ctx, opts); err != nil {
		return nil, fmt.Errorf("%w (logs in %s; `ipledger-cluster down` cleans up)", err, c.l.path("logs"))
	}
	return c, nil
}

// Down takes the node in opts.Dir down and removes every piece of host
// state Up made; it does nothing when no node is up there. It fails when the
// machine still differs from what Up found, naming each difference.
func Down(opts Options) error {
	if opts.Dir == "" {
		opts.Dir = DefaultDir
	}
	if opts.Log == nil {
		opts.Log = func(string, ...any) {}
	}
	unlock, err := lock()
	if err != nil {
		return err
	}
	defer unlock()
	return down(opts)
}

// Get returns the node that is up in opts.Dir, or an error saying how to
// bring one up.
func Get(ctx context.Context, opts Options) (*Cluster, error) {
	if err := opts.defaults(); err != nil {
		return nil, err
	}
	c := opts.cluster()
	if !c.healthy(ctx) {
		return nil, fmt.Errorf("no node is up in %s: start one with `make cluster-up`", opts.Dir)
	}
	return c, nil
}

func lock() (func(), error) { return flock(lockFile, nil) }

// Acquire takes the machine's node for the caller's exclusive use until
// release: a test run (test/cluster holds it from before Up to after Down)
// or a command of ipledger-cluster. Whoever holds the node waits here, so
// that no one takes it down or reinstalls it under a running test; waiting
// is logged. Up and Down do not take it themselves: the holder calls them.
func Acquire(log func(format string, args ...any)) (release func(), err error) {
	return flock(useFile, func() {
		if log != nil {
			log("cluster: waiting for the node: another test run or ipledger-cluster command uses it (%s)", useFile)
		}
	})
}

// flock takes an exclusive lock on path, calling waiting first when it has
// to wait.
func flock(path string, waiting func()) (func(), error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("the node's lock %s (it needs root): %w", path, err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		if waiting != nil {
			waiting()
		}
		if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
			f.Close()
			return nil, err
		}
	}
	return func() { f.Close() }, nil
}

// daemons in the order Up starts them; Down stops them in reverse.
var daemons = []string{"etcd", "kube-apiserver", "containerd", "kube-controller-manager", "kube-scheduler", "kubelet", "kube-proxy"}

func (c *Cluster) healthy(ctx context.Context) bool {
	for _, name := range daemons {
		if _, ok := running(c.l, name); !ok {
			return false
		}
	}
	return c.apiserverReady(ctx) == nil
}

func (c *Cluster) up(ctx context.Context, opts Options) error {
	start := time.Now()
	for _, bin := range []string{"containerd", "runc", "ctr", "iptables", "conntrack"} {
		if _, err := exec.LookPath(bin); err != nil {
			return fmt.Errorf("%s not found: apt-get install -y containerd runc containernetworking-plugins iptables conntrack", bin)
		}
	}
	if _, err := os.Stat(filepath.Join(cniBinDir, "bridge")); err != nil {
		return fmt.Errorf("CNI plugins not found in %s: apt-get install -y containernetworking-plugins", cniBinDir)
	}
	// Start from an empty folder (what a failed Up left, Down cleaned; never
	// delete through a mount).
	if err := removeAllUnmounted(c.Dir); err != nil {
		return err
	}
	for _, d := range []string{"logs", "run", "cni/net.d", "containerd", "kubelet", "pod-logs"} {
		if err := os.MkdirAll(c.l.path(d), 0o755); err != nil {
			return err
		}
	}
	before, err := Snapshot(c.Dir)
	if err != nil {
		return err
	}
	state, err := json.Marshal(before)
	if err != nil {
		return err
	}
	if err := os.WriteFile(c.l.hostState(), state, 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(markerFile, []byte(c.Dir), 0o644); err != nil {
		return err
	}
	// Before anything can allocate or send: test addresses stay here.
	if err := makeTestRangesUnreachable(before); err != nil {
		return err
	}
	if err := c.writeFiles(); err != nil {
		return err
	}
	if err := c.startControlPlane(ctx); err != nil {
		return err
	}
	opts.Log("cluster: API server ready at %s after %s", c.APIServerURL, time.Since(start).Round(time.Millisecond))
	if err := c.startContainerd(ctx); err != nil {
		return err
	}
	if err := c.importNodeImages(ctx); err != nil {
		return err
	}
	if err := c.startNode(); err != nil {
		return err
	}
	if _, err := c.Kubectl(ctx, bytes.NewBufferString(coreDNSManifest(CoreDNSImage)), "apply", "--server-side", "-f", "-"); err != nil {
		return err
	}
	if err := c.waitNodeReady(ctx, 2*time.Minute); err != nil {
		return err
	}
	opts.Log("cluster: node %s Ready after %s", NodeName, time.Since(start).Round(time.Millisecond))
	if _, err := c.Kubectl(ctx, nil, "-n", "kube-system", "rollout", "status", "deploy/coredns", "--timeout=120s"); err != nil {
		return err
	}
	opts.Log("cluster: CoreDNS ready after %s", time.Since(start).Round(time.Millisecond))
	return nil
}

func (c *Cluster) writeFiles() error {
	if err := writePKI(c.l, net.ParseIP(c.NodeIP)); err != nil {
		return err
	}
	cni := filepath.Join(c.l.cniConfDir(), "10-ipledger-node.conflist")
	files := map[string]string{
		c.l.path("tokens.csv"):                AdminToken + ",admin,admin-uid,system:masters\n",
		c.l.kubeconfig():                      kubeconfig(c.APIServerURL, c.l.caCert(), AdminToken),
		c.l.path("containerd", "config.toml"): containerdConfig(c.l, mustFullName(PauseImage)),
		cni:                                   cniConfig(c.l),
		c.l.path("kubelet.yaml"):              kubeletConfig(c.l, c.NodeIP),
		c.l.path("kube-proxy.yaml"):           kubeProxyConfig(c.l, c.NodeIP),
	}
	for path, content := range files {
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			return err
		}
	}
	return nil
}

func (c *Cluster) startControlPlane(ctx context.Context) error {
	pki := func(name string) string { return c.l.path("pki", name) }
	if err := launch(c.l, "etcd", filepath.Join(c.ToolsBin, "etcd"),
		"--name=ipledger-node",
		"--data-dir="+c.l.path("etcd"),
		"--listen-client-urls="+etcdClientURL,
		"--advertise-client-urls="+etcdClientURL,
		"--listen-peer-urls="+etcdPeerURL,
		"--initial-advertise-peer-urls="+etcdPeerURL,
		"--initial-cluster=ipledger-node="+etcdPeerURL,
		"--unsafe-no-fsync=true",
		"--log-level=warn",
	); err != nil {
		return err
	}
	if err := controlplane.WaitFor(ctx, 30*time.Second, "etcd", func() error {
		resp, err := http.Get(etcdClientURL + "/health")
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("etcd /health: %s", resp.Status)
		}
		return nil
	}); err != nil {
		return err
	}
	if err := launch(c.l, "kube-apiserver", filepath.Join(c.ToolsBin, "kube-apiserver"),
		"--etcd-servers="+etcdClientURL,
		"--bind-address="+c.NodeIP,
		"--advertise-address="+c.NodeIP,
		fmt.Sprintf("--secure-port=%d", APIServerPort),
		"--tls-cert-file="+pki("apiserver.crt"),
		"--tls-private-key-file="+pki("apiserver.key"),
		"--client-ca-file="+c.l.caCert(),
		"--kubelet-client-certificate="+pki("apiserver-kubelet-client.crt"),
		"--kubelet-client-key="+pki("apiserver-kubelet-client.key"),
		// Logs, exec and port-forward reach the kubelet at the node address:
		// the node's name resolves nowhere.
		"--kubelet-preferred-address-types=InternalIP",
		"--token-auth-file="+c.l.path("tokens.csv"),
		"--authorization-mode=RBAC",
		"--service-account-issuer=https://kubernetes.default.svc."+ClusterDomain,
		"--service-account-key-file="+pki("sa.key"),
		"--service-account-signing-key-file="+pki("sa.key"),
		"--service-cluster-ip-range="+ServiceCIDR,
		// Unlike pkg/controlplane, the endpoint reconciler (kubernetes.default
		// points at this address) and ServiceAccount admission (pods get their
		// tokens) stay on: pods are real here.
		"--endpoint-reconciler-type=lease",
		"--storage-media-type=application/vnd.kubernetes.protobuf",
		"--v=0",
	); err != nil {
		return err
	}
	if err := controlplane.WaitFor(ctx, 90*time.Second, "kube-apiserver", func() error {
		if _, ok := running(c.l, "kube-apiserver"); !ok {
			return fmt.Errorf("kube-apiserver exited (log %s)", c.l.logFile("kube-apiserver"))
		}
		return c.apiserverReady(ctx)
	}); err != nil {
		return err
	}
	if err := launch(c.l, "kube-controller-manager", filepath.Join(c.NodeBin, "kube-controller-manager"),
		"--kubeconfig="+c.l.kubeconfig(),
		"--bind-address=127.0.0.1",
		"--secure-port=10257",
		"--leader-elect=false",
		"--service-account-private-key-file="+pki("sa.key"),
		"--root-ca-file="+c.l.caCert(),
		"--cluster-name=ipledger-node",
		"--v=0",
	); err != nil {
		return err
	}
	return launch(c.l, "kube-scheduler", filepath.Join(c.NodeBin, "kube-scheduler"),
		"--kubeconfig="+c.l.kubeconfig(),
		"--bind-address=127.0.0.1",
		"--secure-port=10259",
		"--leader-elect=false",
		"--v=0",
	)
}

func (c *Cluster) startContainerd(ctx context.Context) error {
	if err := launch(c.l, "containerd", "containerd", "--config", c.l.path("containerd", "config.toml")); err != nil {
		return err
	}
	return controlplane.WaitFor(ctx, 30*time.Second, "containerd", func() error {
		if _, ok := running(c.l, "containerd"); !ok {
			return fmt.Errorf("containerd exited (log %s)", c.l.logFile("containerd"))
		}
		_, err := c.ctr(ctx, "version")
		return err
	})
}

func (c *Cluster) startNode() error {
	if err := launch(c.l, "kubelet", filepath.Join(c.NodeBin, "kubelet"),
		"--config="+c.l.path("kubelet.yaml"),
		"--kubeconfig="+c.l.kubeconfig(),
		"--root-dir="+c.l.kubeletRoot(),
		"--hostname-override="+NodeName,
		"--node-ip="+c.NodeIP,
		"--v=0",
	); err != nil {
		return err
	}
	return launch(c.l, "kube-proxy", filepath.Join(c.NodeBin, "kube-proxy"), "--config="+c.l.path("kube-proxy.yaml"), "--v=0")
}

func (c *Cluster) apiserverReady(ctx context.Context) error {
	pem, err := os.ReadFile(c.l.caCert())
	if err != nil {
		return err
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(pem)
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots}}}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.APIServerURL+"/readyz", nil)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+AdminToken)
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("kube-apiserver /readyz: %s", resp.Status)
	}
	return nil
}

func (c *Cluster) waitNodeReady(ctx context.Context, timeout time.Duration) error {
	return controlplane.WaitFor(ctx, timeout, "node "+NodeName, func() error {
		for _, name := range []string{"kubelet", "kube-proxy", "kube-controller-manager", "kube-scheduler"} {
			if _, ok := running(c.l, name); !ok {
				return fmt.Errorf("%s exited (log %s)", name, c.l.logFile(name))
			}
		}
		out, err := c.Kubectl(ctx, nil, "get", "node", NodeName, "-o", `jsonpath={.status.conditions[?(@.type=="Ready")].status}`)
		if err != nil {
			return err
		}
		if string(out) != "True" {
			return fmt.Errorf("node %s Ready=%q", NodeName, out)
		}
		return nil
	})
}

// RESTConfig is an admin client configuration trusting the node's CA, with
// rate limits raised for tests.
func (c *Cluster) RESTConfig() *rest.Config {
	return &rest.Config{
		Host:            c.APIServerURL,
		BearerToken:     AdminToken,
		TLSClientConfig: rest.TLSClientConfig{CAFile: c.CAFile},
		QPS:             1000,
		Burst:           2000,
	}
}

// Kubectl runs the pinned kubectl as admin, with stdin when not nil, and
// returns its standard output; the error carries its standard error.
func (c *Cluster) Kubectl(ctx context.Context, stdin *bytes.Buffer, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, filepath.Join(c.ToolsBin, "kubectl"), append([]string{"--kubeconfig", c.KubeconfigPath}, args...)...)
	if stdin != nil {
		cmd.Stdin = stdin
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return out, fmt.Errorf("kubectl %s: %w: %s", strings.Join(args, " "), err, stderr.String())
	}
	return out, nil
}

func down(opts Options) error {
	l := layout{dir: opts.Dir}
	marker, err := os.ReadFile(markerFile)
	if errors.Is(err, fs.ErrNotExist) {
		if _, err := os.Stat(opts.Dir); errors.Is(err, fs.ErrNotExist) {
			opts.Log("cluster: no node is up in %s", opts.Dir)
			return nil
		}
	} else if err != nil {
		return err
	} else if string(marker) != opts.Dir {
		return fmt.Errorf("the node that is up lives in %s, not %s", marker, opts.Dir)
	}
	start := time.Now()
	var before HostState
	if data, err := os.ReadFile(l.hostState()); err == nil {
		if err := json.Unmarshal(data, &before); err != nil {
			return fmt.Errorf("%s: %w", l.hostState(), err)
		}
	}
	var errs []error
	step := func(what string, f func() error) {
		t := time.Now()
		errs = append(errs, f())
		opts.Log("cluster: %s in %s", what, time.Since(t).Round(time.Millisecond))
	}
	// The kubelet first, so that it restarts no container, then its
	// containers; the rest at once: every bit of their state is deleted
	// next, so nothing needs an orderly stop, nor more than a short grace.
	const grace = 2 * time.Second
	step("stopped the kubelet", func() error { return stopDaemon(l, "kubelet", grace) })
	step("killed the containers", func() error { return killContainers(l) })
	step("stopped the other processes", func() error {
		rest := []string{"kube-proxy", "kube-scheduler", "kube-controller-manager", "containerd", "kube-apiserver", "etcd"}
		stopped := make(chan error, len(rest))
		for _, name := range rest {
			go func() { stopped <- stopDaemon(l, name, grace) }()
		}
		var errs []error
		for range rest {
			errs = append(errs, <-stopped)
		}
		return errors.Join(errs...)
	})
	step("cleaned the host", func() error { return cleanHost(l, before) })
	if err := errors.Join(errs...); err != nil {
		return err
	}
	after, err := Snapshot(opts.Dir)
	if err != nil {
		return err
	}
	after.Mounts = nil // the folder is gone; Snapshot read mounts under it before
	if diff := before.Diff(after); len(diff) > 0 && before.Sysctls != nil {
		return fmt.Errorf("the node is down but the machine differs from what Up found:\n  %s", strings.Join(diff, "\n  "))
	}
	if err := os.Remove(markerFile); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	opts.Log("cluster: node in %s down after %s", opts.Dir, time.Since(start).Round(time.Millisecond))
	return nil
}

// killContainers kills every process in the pods' cgroups and the shims of
// the node's containerd, and waits for them to be gone.
func killContainers(l layout) error {
	pids := shims(l.containerdSocket())
	for _, cg := range podCgroups() {
		pids = append(pids, cgroupProcesses(cg)...)
	}
	for _, pid := range pids {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	if !waitGone(func() bool {
		left := len(shims(l.containerdSocket()))
		for _, cg := range podCgroups() {
			left += len(cgroupProcesses(cg))
		}
		return left > 0
	}, 20*time.Second) {
		return errors.New("containers still run 20s after SIGKILL")
	}
	return nil
}

// cleanHost removes what the node left on the host: mounts (pod volumes,
// container root filesystems, network namespaces), cgroups, the bridge,
// iptables chains, nftables tables, the unreachable routes of TestRanges and
// paths that did not exist before, and restores the sysctls. The node's
// processes are gone by now.
func cleanHost(l layout, before HostState) error {
	var errs []error
	info, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return err
	}
	for _, m := range mountsUnder(string(info), l.dir) {
		errs = append(errs, unmount(m))
	}
	// The pods' network namespaces: containerd 1.6 bind-mounts them under
	// /run/netns whatever its state folder.
	for _, m := range mountsUnder(string(info), "/run/netns") {
		if m != "/run/netns" && !slices.Contains(before.Netns, filepath.Base(m)) {
			errs = append(errs, unmount(m), os.Remove(m))
		}
	}
	for _, cg := range podCgroups() {
		if !slices.Contains(before.Cgroups, cg) {
			errs = append(errs, removeCgroup(cg))
		}
	}
	if _, err := os.Stat(filepath.Join("/sys/class/net", Bridge)); err == nil {
		if out, err := exec.Command("ip", "link", "delete", Bridge).CombinedOutput(); err != nil {
			errs = append(errs, fmt.Errorf("ip link delete %s: %w: %s", Bridge, err, out))
		}
	}
	for _, tool := range []string{"iptables", "ip6tables"} {
		errs = append(errs, cleanIPTables(tool))
	}
	errs = append(errs, removeTestRoutes(before))
	if out, err := exec.Command("nft", "list", "tables").Output(); err == nil {
		for _, t := range nftTables(string(out)) {
			if !slices.Contains(before.NFTables, t) {
				family, name, _ := strings.Cut(t, " ")
				if out, err := exec.Command("nft", "delete", "table", family, name).CombinedOutput(); err != nil {
					errs = append(errs, fmt.Errorf("nft delete table %s: %w: %s", t, err, out))
				}
			}
		}
	}
	for key, value := range before.Sysctls {
		path := filepath.Join("/proc/sys", key)
		if now, err := os.ReadFile(path); err == nil && strings.TrimSpace(string(now)) != value {
			errs = append(errs, os.WriteFile(path, []byte(value), 0o644))
		}
	}
	if before.Sysctls != nil {
		for _, p := range hostPaths {
			if !slices.Contains(before.Paths, p) {
				errs = append(errs, removeAllUnmounted(p))
			}
		}
	}
	errs = append(errs, removeAllUnmounted(l.dir))
	return errors.Join(errs...)
}

func cleanIPTables(tool string) error {
	save, err := exec.Command(tool + "-save").Output()
	if err != nil {
		return fmt.Errorf("%s-save: %w", tool, err)
	}
	script := iptablesCleanup(string(save))
	if script == "" {
		return nil
	}
	cmd := exec.Command(tool+"-restore", "--noflush")
	cmd.Stdin = strings.NewReader(script)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("%s-restore --noflush: %w: %s\ninput:\n%s", tool, err, out, script)
	}
	return nil
}

func unmount(path string) error {
	if err := syscall.Unmount(path, syscall.MNT_DETACH); err != nil && !errors.Is(err, syscall.EINVAL) && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("unmount %s: %w", path, err)
	}
	return nil
}

// removeAllUnmounted removes path unless something is still mounted below
// it (RemoveAll would then delete the mounted files).
func removeAllUnmounted(path string) error {
	info, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return err
	}
	if left := mountsUnder(string(info), path); len(left) > 0 {
		return fmt.Errorf("not removing %s: still mounted below it: %s", path, strings.Join(left, ", "))
	}
	return os.RemoveAll(path)
}

// defaultRouteIPv4 is the IPv4 address of the interface of the default
// route (from /proc/net/route: no traffic).
func defaultRouteIPv4() (string, error) {
	routes, err := os.ReadFile("/proc/net/route")
	if err != nil {
		return "", err
	}
	for _, line := range strings.Split(string(routes), "\n")[1:] {
		f := strings.Fields(line)
		if len(f) < 2 || f[1] != "00000000" {
			continue
		}
		iface, err := net.InterfaceByName(f[0])
		if err != nil {
			return "", err
		}
		addrs, err := iface.Addrs()
		if err != nil {
			return "", err
		}
		for _, a := range addrs {
			if ipn, ok := a.(*net.IPNet); ok && ipn.IP.To4() != nil {
				return ipn.IP.String(), nil
			}
		}
	}
	return "", errors.New("no IPv4 default route: pass the node address (--node-ip)")
}

// scriptBin is $env, else the folder hack/<script> prints (it builds and
// caches the binaries on first use).
func scriptBin(env, script string) (string, error) {
	if bin := os.Getenv(env); bin != "" {
		return bin, nil
	}
	root, err := controlplane.RepoRoot()
	if err != nil {
		return "", fmt.Errorf("%w (or set %s)", err, env)
	}
	cmd := exec.Command(filepath.Join(root, "hack", script))
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("hack/%s: %w", script, err)
	}
	return strings.TrimSpace(string(out)), nil
}
