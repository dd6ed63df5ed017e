package cluster_test

// The NetworkPolicies of deploy/kustomize/base/networkpolicies.yaml,
// enforced by a real implementation on the node: kube-router's network
// policy controller (iptables and ipset; hack/build-netpol.sh builds it from
// its Go module), run as a host process for this one test and nothing else
// of kube-router (no router, no service proxy). The node of lab/cluster runs
// no NetworkPolicy implementation of its own, so every other test sees the
// policies as objects only. docs/security.md, "NetworkPolicies".

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ipledger/ipledger/lab/cluster"
	"github.com/ipledger/ipledger/lab/testenv"
)

// kubeRouterChains are the prefixes of the iptables chains kube-router's
// network policy controller makes (KUBE-ROUTER-INPUT/FORWARD/OUTPUT, one
// KUBE-NWPLCY- per policy, one KUBE-POD-FW- per selected pod), and
// kubeRouterSets those of its ip sets (the peers and targets of each rule).
var (
	kubeRouterChains = []string{"KUBE-ROUTER-", "KUBE-NWPLCY-", "KUBE-POD-FW-"}
	kubeRouterSets   = []string{"KUBE-SRC-", "KUBE-DST-"}
)

// TestNetworkPoliciesAreEnforced proves, with the policies enforced in the
// node's kernel, that a pod of an unlabelled namespace is refused on the
// watcher's gRPC (:9443) and ops (:8080) ports, that a namespace labelled
// ipledger.io/grpc-access=true reaches :9443 only and one labelled
// ipledger.io/monitoring=true scrapes :8080 only, and that ipledger itself
// keeps working: a watcher restarted under enforcement becomes Ready (the
// kubelet's probes come from the node) and every consumer streams from it
// again (ipledger's own pods). First, without the enforcer, the unlabelled
// pod connects to both: the policies alone refuse nothing.
func TestNetworkPoliciesAreEnforced(t *testing.T) {
	e := get(t)
	bin := filepath.Join(netpolBuild(t), "kube-router")
	watchers := e.pods(t, "ipledger-watcher")
	if len(watchers) == 0 {
		t.Fatal("no watcher pod runs")
	}
	watcher := watchers[0]
	open := e.netpolClient(t, "open", nil)
	grpcNS := e.netpolClient(t, "grpc", map[string]string{"ipledger.io/grpc-access": "true"})
	monitoring := e.netpolClient(t, "monitoring", map[string]string{"ipledger.io/monitoring": "true"})
	grpcAddr := net.JoinHostPort(watcher.Status.PodIP, "9443")
	opsAddr := net.JoinHostPort(watcher.Status.PodIP, "8080")

	// Watch it fail: with no implementation on the node, nothing is refused.
	for _, addr := range []string{grpcAddr, opsAddr} {
		if refusal := e.agnhostConnect(t, open, addr); refusal != "" {
			t.Fatalf("before any enforcer, %s/%s could not connect to the watcher at %s (%s): the node filters on its own, so this test would prove nothing", open.Namespace, open.Name, addr, refusal)
		}
	}
	t.Logf("without an enforcer, %s/%s (unlabelled namespace) connects to the watcher's %s and %s", open.Namespace, open.Name, grpcAddr, opsAddr)

	running := startEnforcer(t, e, bin, watcher.Spec.NodeName)
	waitEnforced(t, running, watcher, grpcNS.Status.PodIP, monitoring.Status.PodIP)

	cases := []struct {
		client corev1.Pod
		addr   string
		allow  bool
	}{
		{open, grpcAddr, false},
		{open, opsAddr, false},
		{grpcNS, grpcAddr, true},
		{grpcNS, opsAddr, false},
		{monitoring, opsAddr, true},
		{monitoring, grpcAddr, false},
	}
	for _, c := range cases {
		refusal := e.agnhostConnect(t, c.client, c.addr)
		switch {
		case c.allow && refusal != "":
			t.Errorf("%s/%s could not connect to %s (%s): the policies allow its namespace", c.client.Namespace, c.client.Name, c.addr, refusal)
		case !c.allow && refusal == "":
			t.Errorf("%s/%s connected to %s: the policies refuse its namespace there", c.client.Namespace, c.client.Name, c.addr)
		default:
			t.Logf("%s/%s -> %s: allowed %v (%s)", c.client.Namespace, c.client.Name, c.addr, c.allow, refusal)
		}
	}
	// What Prometheus does from a monitoring namespace: scrape the metrics
	// (with curl).
	if out, err := e.execIn(t, monitoring, "curl", "-sS", "--max-time", "5", "http://"+opsAddr+"/metrics"); err != nil || !strings.Contains(out, "ipledger_watcher_subscribers") {
		t.Errorf("scrape of http://%s/metrics from %s: %v\n%.300s", opsAddr, monitoring.Namespace, err, out)
	}

	// ipledger under its own policies: a new watcher pod must pass the
	// kubelet's probes and take the consumers' streams.
	e.kubectl(t, "-n", systemNS, "rollout", "restart", "deploy/ipledger-watcher")
	e.rolledOut(t, "ipledger-watcher")
	per := e.subscribersPerWatcher(t)
	t.Logf("watcher restarted under enforcement: streams per watcher pod %v", per)
}

// netpolBuild is hack/build-netpol.sh's folder: $IPLEDGER_NETPOL_DIR, else
// the script's output (a cold build takes about three minutes).
func netpolBuild(t *testing.T) string {
	return hackBuild(t, "IPLEDGER_NETPOL_DIR", "build-netpol.sh")
}

// netpolClient runs agnhost (pause) in a new namespace with labels, and
// returns the pod once it runs with an address.
func (e *env) netpolClient(t *testing.T, name string, labels map[string]string) corev1.Pod {
	t.Helper()
	ctx := context.Background()
	ns, err := e.client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "netpol-" + name + "-", Labels: labels},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = e.client.CoreV1().Namespaces().Delete(context.Background(), ns.Name, metav1.DeleteOptions{})
	})
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "client"},
		Spec: corev1.PodSpec{
			TerminationGracePeriodSeconds: new(int64),
			Containers: []corev1.Container{{
				Name: "agnhost", Image: cluster.AgnhostImage, ImagePullPolicy: corev1.PullNever,
				Args: []string{"pause"},
			}},
		},
	}
	if _, err := e.client.CoreV1().Pods(ns.Name).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var running corev1.Pod
	testenv.Eventually(t, 3*time.Minute, func() error {
		p, err := e.client.CoreV1().Pods(ns.Name).Get(ctx, pod.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if p.Status.Phase != corev1.PodRunning || p.Status.PodIP == "" {
			return fmt.Errorf("pod %s/%s is %s with address %q", ns.Name, p.Name, p.Status.Phase, p.Status.PodIP)
		}
		running = *p
		return nil
	})
	return running
}

// execIn runs a command in the client pod (kubectl exec) and returns its
// output; the error carries its standard error.
func (e *env) execIn(t *testing.T, pod corev1.Pod, cmd ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, err := e.node.Kubectl(ctx, nil, append([]string{"-n", pod.Namespace, "exec", pod.Name, "--"}, cmd...)...)
	return string(out), err
}

// agnhostConnect opens a TCP connection from the client pod to addr with agnhost
// connect and returns "" when it connected, else agnhost's reason
// (REFUSED, TIMEOUT, OTHER: …). Anything else failing fails the test.
func (e *env) agnhostConnect(t *testing.T, pod corev1.Pod, addr string) string {
	t.Helper()
	_, err := e.execIn(t, pod, "/agnhost", "connect", addr, "--timeout=5s")
	if err == nil {
		return ""
	}
	for _, reason := range []string{"REFUSED", "TIMEOUT", "OTHER"} {
		if i := strings.Index(err.Error(), reason); i >= 0 {
			return strings.TrimSpace(err.Error()[i:])
		}
	}
	t.Fatalf("agnhost connect %s in %s/%s: %v", addr, pod.Namespace, pod.Name, err)
	return ""
}

// startEnforcer runs kube-router's network policy controller on the node
// as a host process, and when the test ends stops it and removes every
// chain, rule and ip set it made, so the node is as before for the rest of
// the suite (and Down's host-state check). The function it returns fails
// once kube-router has exited.
func startEnforcer(t *testing.T, e *env, bin, nodeName string) (running func() error) {
	t.Helper()
	// A run killed before its cleanup left state: it would filter already.
	if err := removeKubeRouterState(); err != nil {
		t.Fatalf("kube-router state of an earlier run: %v", err)
	}
	logPath := filepath.Join(t.TempDir(), "kube-router.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin,
		"--kubeconfig="+e.node.KubeconfigPath,
		"--hostname-override="+nodeName,
		"--run-firewall=true", "--run-router=false", "--run-service-proxy=false",
		"--enable-cni=false",
		"--service-cluster-ip-range="+cluster.ServiceCIDR,
		"--health-port=0",
		"--v=1",
	)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		t.Fatalf("start kube-router: %v", err)
	}
	done := make(chan struct{})
	var waitErr error
	go func() { waitErr = cmd.Wait(); close(done) }()
	t.Logf("kube-router (network policy controller only) started, pid %d, log %s", cmd.Process.Pid, logPath)
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
		logFile.Close()
		if t.Failed() {
			if log, err := os.ReadFile(logPath); err == nil {
				t.Logf("kube-router's log, last lines:\n%s", kubeRouterLogTail(string(log), 40))
			}
		}
		if err := removeKubeRouterState(); err != nil {
			t.Errorf("remove kube-router's rules and sets: %v", err)
		}
		if chains, sets, err := kubeRouterState(); err != nil || len(chains)+len(sets) > 0 {
			t.Errorf("kube-router left chains %v and ip sets %v behind (%v)", chains, sets, err)
		}
	})
	// kube-router exiting early (a flag, the API, a missing command) must
	// not look like a slow sync.
	return func() error {
		select {
		case <-done:
			log, _ := os.ReadFile(logPath)
			return fmt.Errorf("kube-router exited (%v):\n%s", waitErr, kubeRouterLogTail(string(log), 40))
		default:
			return nil
		}
	}
}

// waitEnforced waits until kube-router has programmed the policies for the
// watcher pod: its pod firewall chain is jumped to for traffic destined to
// it, and the allowed peers' addresses are in kube-router's ip sets.
func waitEnforced(t *testing.T, running func() error, watcher corev1.Pod, peers ...string) {
	t.Helper()
	jump := fmt.Sprintf("rule to jump traffic destined to POD name:%s namespace: %s to chain KUBE-POD-FW-", watcher.Name, watcher.Namespace)
	start := time.Now()
	testenv.Eventually(t, 2*time.Minute, func() error {
		if err := running(); err != nil {
			t.Fatal(err)
		}
		save, err := exec.Command("iptables-save", "-t", "filter").Output()
		if err != nil {
			return fmt.Errorf("iptables-save: %w", err)
		}
		if !strings.Contains(string(save), jump) {
			return fmt.Errorf("no iptables rule %q yet", jump)
		}
		members, err := kubeRouterSetMembers()
		if err != nil {
			return err
		}
		for _, p := range peers {
			if !slices.Contains(members, p) {
				return fmt.Errorf("%s is in none of kube-router's ip sets yet", p)
			}
		}
		return nil
	})
	t.Logf("kube-router programmed the policies for %s in %s", watcher.Name, time.Since(start).Round(time.Millisecond))
}

// kubeRouterState lists kube-router's chains (filter table) and ip sets.
func kubeRouterState() (chains, sets []string, err error) {
	save, err := exec.Command("iptables-save", "-t", "filter").Output()
	if err != nil {
		return nil, nil, fmt.Errorf("iptables-save: %w", err)
	}
	for _, line := range strings.Split(string(save), "\n") {
		if name, ok := strings.CutPrefix(line, ":"); ok {
			if name, _, _ = strings.Cut(name, " "); hasAnyPrefix(name, kubeRouterChains) {
				chains = append(chains, name)
			}
		}
	}
	out, err := exec.Command("ipset", "list", "-n").Output()
	if err != nil {
		return nil, nil, fmt.Errorf("ipset list -n: %w", err)
	}
	for _, name := range strings.Fields(string(out)) {
		if hasAnyPrefix(name, kubeRouterSets) {
			sets = append(sets, name)
		}
	}
	return chains, sets, nil
}

// kubeRouterSetMembers lists the members of kube-router's ip sets.
func kubeRouterSetMembers() ([]string, error) {
	out, err := exec.Command("ipset", "save").Output()
	if err != nil {
		return nil, fmt.Errorf("ipset save: %w", err)
	}
	var members []string
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		// add KUBE-SRC-XXXX 10.244.0.7 timeout 0
		if f := strings.Fields(sc.Text()); len(f) >= 3 && f[0] == "add" && hasAnyPrefix(f[1], kubeRouterSets) {
			members = append(members, f[2])
		}
	}
	return members, sc.Err()
}

// removeKubeRouterState deletes what kube-router's network policy
// controller leaves in the kernel when it stops: the rules of the built-in
// chains that jump to its chains, its chains, then its ip sets (a set
// cannot be destroyed while a rule names it). kube-router v2.1.0's own
// --cleanup-config does not do it: it cleans up a NetworkPolicyController
// it never initialises (no iptables or ipset handlers), so the firewall's
// chains and sets stay; it also flushes every IPVS service of the machine,
// which is not this test's to do.
func removeKubeRouterState() error {
	save, err := exec.Command("iptables-save", "-t", "filter").Output()
	if err != nil {
		return fmt.Errorf("iptables-save: %w", err)
	}
	var jumps, flushes, deletes []string
	for _, line := range strings.Split(string(save), "\n") {
		if name, ok := strings.CutPrefix(line, ":"); ok {
			if name, _, _ = strings.Cut(name, " "); hasAnyPrefix(name, kubeRouterChains) {
				flushes = append(flushes, "-F "+name)
				deletes = append(deletes, "-X "+name)
			}
			continue
		}
		rule, ok := strings.CutPrefix(line, "-A ")
		if !ok {
			continue
		}
		fields := strings.Fields(rule)
		if len(fields) == 0 || hasAnyPrefix(fields[0], kubeRouterChains) {
			continue // flushed with its chain
		}
		if i := slices.Index(fields, "-j"); i >= 0 && i+1 < len(fields) && hasAnyPrefix(fields[i+1], kubeRouterChains) {
			jumps = append(jumps, "-D "+rule)
		}
	}
	if len(jumps)+len(flushes) > 0 {
		script := "*filter\n" + strings.Join(slices.Concat(jumps, flushes, deletes), "\n") + "\nCOMMIT\n"
		cmd := exec.Command("iptables-restore", "--noflush")
		cmd.Stdin = strings.NewReader(script)
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("iptables-restore --noflush: %w: %s\ninput:\n%s", err, out, script)
		}
	}
	_, sets, err := kubeRouterState()
	if err != nil {
		return err
	}
	var errs []error
	for _, s := range sets {
		if out, err := exec.Command("ipset", "destroy", s).CombinedOutput(); err != nil {
			errs = append(errs, fmt.Errorf("ipset destroy %s: %w: %s", s, err, out))
		}
	}
	return errors.Join(errs...)
}

func hasAnyPrefix(name string, prefixes []string) bool {
	return slices.ContainsFunc(prefixes, func(p string) bool { return strings.HasPrefix(name, p) })
}

func kubeRouterLogTail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}
