// Package cluster runs a real single-node Kubernetes on this machine for
// tests and for people: etcd and kube-apiserver (from hack/build-tools.sh),
// containerd and runc (Debian's packages), the kubelet, kube-controller-
// manager, kube-scheduler and kube-proxy (from hack/build-node.sh), a bridge
// CNI network and CoreDNS, with images imported from OCI archives and never
// pulled. Up is idempotent; Down stops every process and removes every piece
// of host state Up made (iptables chains, the bridge, cgroups, mounts,
// network namespaces, sysctls), then checks the machine is as Up found it.
// The node uses host-wide state, so there is one per machine: a lock and a
// marker file guard it. Options.Nodes (IPLEDGER_NODES) adds nodes beside it
// on the same machine, each in a network namespace of its own with its own
// containerd, kubelet and kube-proxy (nodes.go); such a node can fail and
// come back (FailNode, RestoreNode: failnode.go).
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

	"github.com/ipledger/ipledger/lab/controlplane"
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
	// Nodes is how many nodes run: the first, in the host's network
	// namespace with the control plane, and up to MaxNodes-1 more beside it
	// (nodes.go). 0 means $IPLEDGER_NODES, else 1.
	Nodes int
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
	// Nodes are the cluster's nodes, the first (NodeName, the host's) first.
	Nodes []Node

	l     layout
	nodes []node
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
	if o.Nodes == 0 {
		if o.Nodes, err = nodesFromEnv(); err != nil {
			return err
		}
	}
	if o.Nodes < 1 || o.Nodes > MaxNodes {
		return fmt.Errorf("Options.Nodes = %d: want 1 to %d", o.Nodes, MaxNodes)
	}
	return nil
}

func (o Options) cluster() *Cluster {
	l := layout{dir: o.Dir}
	c := &Cluster{
		Dir: o.Dir, NodeIP: o.NodeIP, ToolsBin: o.ToolsBin, NodeBin: o.NodeBin,
		APIServerURL:   fmt.Sprintf("https://%s", net.JoinHostPort(o.NodeIP, fmt.Sprint(APIServerPort))),
		KubeconfigPath: l.kubeconfig(), CAFile: l.caCert(), l: l,
	}
	for i := 1; i <= o.Nodes; i++ {
		n := nodeOf(o.Dir, o.NodeIP, i)
		c.nodes = append(c.nodes, n)
		c.Nodes = append(c.Nodes, n.Node)
	}
	return c
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
// nodeDaemons are those of a node beyond the first.
var (
	daemons     = []string{"etcd", "kube-apiserver", "containerd", "kube-controller-manager", "kube-scheduler", "kubelet", "kube-proxy"}
	nodeDaemons = []string{"containerd", "kubelet", "kube-proxy"}
)

// healthy says whether the cluster runs, with exactly the nodes asked for.
func (c *Cluster) healthy(ctx context.Context) bool {
	for _, name := range daemons {
		if _, ok := running(c.l, name); !ok {
			return false
		}
	}
	if len(extraNodes(c.Dir, c.NodeIP)) != len(c.nodes)-1 {
		return false
	}
	for _, n := range c.nodes[1:] {
		for _, name := range nodeDaemons {
			if _, ok := running(n.l, name); !ok {
				return false
			}
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
	if err := c.startContainerd(ctx, c.nodes[0]); err != nil {
		return err
	}
	if err := c.importNodeImages(ctx); err != nil {
		return err
	}
	if err := c.startNode(c.nodes[0]); err != nil {
		return err
	}
	if _, err := c.Kubectl(ctx, bytes.NewBufferString(coreDNSManifest(CoreDNSImage)), "apply", "--server-side", "-f", "-"); err != nil {
		return err
	}
	if err := c.waitNodeReady(ctx, c.nodes[0], 2*time.Minute); err != nil {
		return err
	}
	opts.Log("cluster: node %s Ready after %s", NodeName, time.Since(start).Round(time.Millisecond))
	if _, err := c.Kubectl(ctx, nil, "-n", "kube-system", "rollout", "status", "deploy/coredns", "--timeout=120s"); err != nil {
		return err
	}
	opts.Log("cluster: CoreDNS ready after %s", time.Since(start).Round(time.Millisecond))
	// The other nodes once CoreDNS runs on the first.
	for _, n := range c.nodes[1:] {
		t := time.Now()
		if err := c.startExtraNode(ctx, n); err != nil {
			return err
		}
		opts.Log("cluster: node %s (%s, pods %s) Ready in %s, after %s", n.Name, n.IP, n.PodCIDR,
			time.Since(t).Round(time.Millisecond), time.Since(start).Round(time.Millisecond))
	}
	return nil
}

func (c *Cluster) writeFiles() error {
	if err := writePKI(c.l, net.ParseIP(c.NodeIP)); err != nil {
		return err
	}
	files := map[string]string{
		c.l.path("tokens.csv"): AdminToken + ",admin,admin-uid,system:masters\n",
		c.l.kubeconfig():       kubeconfig(c.APIServerURL, c.l.caCert(), AdminToken),
	}
	for path, content := range files {
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			return err
		}
	}
	return c.writeNodeFiles(c.nodes[0])
}

// writeNodeFiles writes the configuration of node n's containerd, CNI
// network, kubelet and kube-proxy into its folder.
func (c *Cluster) writeNodeFiles(n node) error {
	files := map[string]string{
		n.l.path("containerd", "config.toml"):                        containerdConfig(n.l, mustFullName(PauseImage)),
		filepath.Join(n.l.cniConfDir(), "10-ipledger-node.conflist"): cniConfig(n.l, Bridge, n.PodCIDR),
		n.l.path("kubelet.yaml"):                                     kubeletConfig(c.l, n),
		n.l.path("kube-proxy.yaml"):                                  kubeProxyConfig(c.l, n),
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
	if err := controlplane.WaitFor(ctx, 30*time.Second, "etcd", func() error { return controlplane.EtcdHealthy(etcdClientURL) }); err != nil {
		return err
	}
	// People's client certificates (UserKubeconfig) and the aggregation
	// layer, made as lab/controlplane makes them, under the node's folder.
	proxyArgs, _, err := controlplane.FrontProxy(c.Dir)
	if err != nil {
		return err
	}
	if err := launch(c.l, "kube-apiserver", filepath.Join(c.ToolsBin, "kube-apiserver"), append([]string{
		"--etcd-servers=" + etcdClientURL,
		"--bind-address=" + c.NodeIP,
		"--advertise-address=" + c.NodeIP,
		fmt.Sprintf("--secure-port=%d", APIServerPort),
		"--tls-cert-file=" + pki("apiserver.crt"),
		"--tls-private-key-file=" + pki("apiserver.key"),
		"--kubelet-client-certificate=" + pki("apiserver-kubelet-client.crt"),
		"--kubelet-client-key=" + pki("apiserver-kubelet-client.key"),
		// Logs, exec and port-forward reach the kubelet at the node address:
		// the node's name resolves nowhere.
		"--kubelet-preferred-address-types=InternalIP",
		"--token-auth-file=" + c.l.path("tokens.csv"),
		"--authorization-mode=RBAC",
		"--service-account-issuer=https://kubernetes.default.svc." + ClusterDomain,
		"--service-account-key-file=" + pki("sa.key"),
		"--service-account-signing-key-file=" + pki("sa.key"),
		"--service-cluster-ip-range=" + ServiceCIDR,
		// Unlike lab/controlplane, the endpoint reconciler (kubernetes.default
		// points at this address) and ServiceAccount admission (pods get their
		// tokens) stay on: pods are real here.
		"--endpoint-reconciler-type=lease",
		"--storage-media-type=application/vnd.kubernetes.protobuf",
		"--v=0",
	}, proxyArgs...)...); err != nil {
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

// startContainerd starts node n's containerd, in its network namespace
// (the CNI plugins run there, and the host-network pods), and waits for it
// to serve.
func (c *Cluster) startContainerd(ctx context.Context, n node) error {
	if err := launchIn(n, "containerd", "containerd", "--config", n.l.path("containerd", "config.toml")); err != nil {
		return err
	}
	return controlplane.WaitFor(ctx, 30*time.Second, "containerd of "+n.Name, func() error {
		if _, ok := running(n.l, "containerd"); !ok {
			return fmt.Errorf("containerd of %s exited (log %s)", n.Name, n.l.logFile("containerd"))
		}
		_, err := ctr(ctx, n, "version")
		return err
	})
}

// startNode starts node n's kubelet and kube-proxy, in its network
// namespace.
func (c *Cluster) startNode(n node) error {
	if err := c.startKubelet(n); err != nil {
		return err
	}
	return launchIn(n, "kube-proxy", filepath.Join(c.NodeBin, "kube-proxy"), "--config="+n.l.path("kube-proxy.yaml"), "--v=0")
}

// startKubelet starts node n's kubelet, in its network namespace.
func (c *Cluster) startKubelet(n node) error {
	return launchIn(n, "kubelet", filepath.Join(c.NodeBin, "kubelet"),
		"--config="+n.l.path("kubelet.yaml"),
		"--kubeconfig="+c.l.kubeconfig(),
		"--root-dir="+n.l.kubeletRoot(),
		"--hostname-override="+n.Name,
		"--node-ip="+n.IP,
		"--v=0",
	)
}

// launchIn launches bin in node n's network namespace, its files in n's
// folder.
func launchIn(n node, name, bin string, args ...string) error {
	cmd, argv := n.command(bin, args...)
	return launch(n.l, name, cmd, argv...)
}

func (c *Cluster) apiserverReady(ctx context.Context) error {
	pem, err := os.ReadFile(c.l.caCert())
	if err != nil {
		return err
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(pem)
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots}}}
	return controlplane.Readyz(ctx, client, c.APIServerURL, AdminToken)
}

func (c *Cluster) waitNodeReady(ctx context.Context, n node, timeout time.Duration) error {
	return controlplane.WaitFor(ctx, timeout, "node "+n.Name, func() error {
		for _, name := range []string{"kube-controller-manager", "kube-scheduler"} {
			if _, ok := running(c.l, name); !ok {
				return fmt.Errorf("%s exited (log %s)", name, c.l.logFile(name))
			}
		}
		for _, name := range []string{"kubelet", "kube-proxy"} {
			if _, ok := running(n.l, name); !ok {
				return fmt.Errorf("%s of %s exited (log %s)", name, n.Name, n.l.logFile(name))
			}
		}
		out, err := c.Kubectl(ctx, nil, "get", "node", n.Name, "-o", `jsonpath={.status.conditions[?(@.type=="Ready")].status}`)
		if err != nil {
			return err
		}
		if string(out) != "True" {
			return fmt.Errorf("node %s Ready=%q", n.Name, out)
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

// UserKubeconfig writes a kubeconfig for user in groups into dir and
// returns its path: a person with a client certificate the node's client
// CA signs (controlplane.ClientAuthority), not a ServiceAccount, no token,
// with no grant but those RBAC gives user or groups.
func (c *Cluster) UserKubeconfig(dir, user string, groups ...string) (string, error) {
	clients, err := controlplane.ClientAuthority(c.Dir)
	if err != nil {
		return "", err
	}
	path := filepath.Join(dir, "kubeconfig-"+user)
	return path, clients.WriteKubeconfig(path, c.APIServerURL, c.CAFile, user, groups...)
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
	// Every node there is, whatever Options.Nodes says: Up may have
	// started more.
	extra := extraNodes(opts.Dir, "")
	layouts := []layout{l}
	for _, n := range extra {
		layouts = append(layouts, n.l)
	}
	// The kubelets first, so that they restart no container, then their
	// containers; the rest at once: every bit of their state is deleted
	// next, so nothing needs an orderly stop, nor more than a short grace.
	const grace = 2 * time.Second
	type proc struct {
		l    layout
		name string
	}
	stopAll := func(procs []proc) error {
		stopped := make(chan error, len(procs))
		for _, p := range procs {
			go func() { stopped <- stopDaemon(p.l, p.name, grace) }()
		}
		var errs []error
		for range procs {
			errs = append(errs, <-stopped)
		}
		return errors.Join(errs...)
	}
	var kubelets, rest []proc
	for _, nl := range layouts {
		kubelets = append(kubelets, proc{nl, "kubelet"})
		rest = append(rest, proc{nl, "kube-proxy"}, proc{nl, "containerd"})
	}
	for _, name := range []string{"kube-scheduler", "kube-controller-manager", "kube-apiserver", "etcd"} {
		rest = append(rest, proc{l, name})
	}
	step("stopped the kubelets", func() error { return stopAll(kubelets) })
	step("killed the containers", func() error { return killContainers(layouts) })
	step("stopped the other processes", func() error { return stopAll(rest) })
	step("cleaned the host", func() error { return cleanHost(l, extra, before) })
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
// the nodes' containerds (one layout each), and waits for them to be gone.
func killContainers(layouts []layout) error {
	left := func() []int {
		var pids []int
		for _, l := range layouts {
			pids = append(pids, shims(l.containerdSocket())...)
		}
		for _, cg := range podCgroups() {
			pids = append(pids, cgroupProcesses(cg)...)
		}
		return pids
	}
	for _, pid := range left() {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	if !waitGone(func() bool { return len(left()) > 0 }, 20*time.Second) {
		return errors.New("containers still run 20s after SIGKILL")
	}
	return nil
}

// cleanHost removes what the node left on the host: mounts (pod volumes,
// container root filesystems, network namespaces), cgroups, the bridge,
// iptables chains, nftables tables, the unreachable routes of TestRanges and
// paths that did not exist before, and restores the sysctls; for each of
// the extra nodes, its link and network namespace, failing when a process
// is still inside the namespace. The nodes' processes are gone by now.
func cleanHost(l layout, extra []node, before HostState) error {
	var errs []error
	netns := map[string]uint64{}
	for _, n := range extra {
		ino, err := removeNodeNetwork(n)
		errs = append(errs, err)
		netns[n.Name] = ino
	}
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
	for _, n := range extra {
		errs = append(errs, checkNetnsGone(n, netns[n.Name]))
	}
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
