package cluster_test

import (
	"context"
	"encoding/xml"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/rand"

	"github.com/ipledger/ipledger/lab/cluster"
	"github.com/ipledger/ipledger/lab/testenv"
)

// upstreamSpecs are the specs of Kubernetes' own e2e suite (the binary of
// hack/build-e2e.sh: k8s.io/kubernetes/test/e2e/network at hack/tools' pin)
// that TestUpstreamLoadBalancerSpecs runs: every [Feature:LoadBalancer] spec
// (test/e2e/network/loadbalancer.go, "LoadBalancers" and "LoadBalancers
// ExternalTrafficPolicy: Local") and the Service specs of service.go that
// create a LoadBalancer Service. Each alternative must match at least one
// spec, so a version bump that renames one fails here instead of running less.
var upstreamSpecs = []string{
	`[Feature:LoadBalancer]`,
	`Services should complete a service status lifecycle`, // another class's Service: ipam leaves it alone
	`Services should serve endpoints on same port and different protocol for internal traffic on Type LoadBalancer`,
	`Services should fail health check node port if there are only terminating endpoints`,
	`Services should implement NodePort and HealthCheckNodePort correctly when ExternalTrafficPolicy changes`,
}

// upstreamSkipped are the specs of upstreamSpecs not run, and why; the
// reasons are docs/testing.md's too.
var upstreamSkipped = map[string]string{
	"should handle load balancer cleanup finalizer for service": "ipledger adds no service.kubernetes.io/load-balancer-cleanup " +
		"finalizer, by decision (docs/testing.md): a finalizer would block deleting a Service, and its namespace, " +
		"while ipam is down or uninstalled; MetalLB and Cilium do without one too",
}

// moreNodes is how the framework's skips of specs needing more than this
// single node read (TestMoreNodes has those of Kubernetes v1.37.2). Any
// other skip of a spec this test runs is a failure.
var moreNodes = regexp.MustCompile(`(?i)\b(requires?|need)\b.*(>= ?[2-9]|\bat least ([2-9]|two|three)|\bmultiple)\b.*\bnodes\b`)

// upstreamPool is the IPPool of the specs' namespaces: inside
// cluster.TestRanges (10.128.0.0/9), apart from the journey's 10.<100+n>
// and the scenarios' 10.<200+n> pools.
const upstreamPool = "10.180.0.0/26"

// upstreamLink is the bridge without ports that upstreamPool is routed to
// while the specs run (routeOnTheMachine).
const upstreamLink = "ipl-upstream"

// upstreamClient is the address the specs' own connections to a
// LoadBalancer address come from: "outside the cluster", as the specs
// assume their runner is. This process runs on the first node, and without
// it the kernel would pick the node's InternalIP — which the source-ranges
// spec puts in loadBalancerSourceRanges itself (its accept pod's HostIP),
// so its "not reachable from outside the cluster" check could never pass.
// It is held on upstreamLink, inside cluster.TestRanges, beside
// upstreamPool and apart from every node's and pod's address
// (TestUpstreamClientIsOutsideTheCluster).
const upstreamClient = "10.180.0.64"

// TestUpstreamLoadBalancerSpecs runs Kubernetes' own LoadBalancer e2e specs
// (upstreamSpecs) against ipledger as overlays/e2e installs it on the node:
// ipam allocates each LoadBalancer Service an address of an IPPool that
// serves only this run's namespaces (the e2e-run label the framework puts on
// each, set through hack/tools/e2e's --e2e-run-id), and the specs reach it
// from this process (kube-proxy serves the address from the node). It logs
// every spec — passed, failed, skipped and why — and fails on a failed spec,
// on a spec that was skipped other than for needing more than one node or
// by upstreamSkipped, and on an alternative of upstreamSpecs that matched
// nothing.
func TestUpstreamLoadBalancerSpecs(t *testing.T) {
	e := get(t)
	bin := e2eBinary(t)
	ctx := context.Background()
	runID := "ipledger-" + rand.String(8)
	routeOnTheMachine(t, upstreamLink, upstreamPool, upstreamClient)

	pool := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "ipledger.io/v1alpha1", "kind": "IPPool",
		"metadata": map[string]any{"name": "upstream-" + runID[len("ipledger-"):]},
		"spec": map[string]any{
			"addresses": []any{upstreamPool},
			"allocation": map[string]any{"namespaceSelectors": []any{
				map[string]any{"matchLabels": map[string]any{"e2e-run": runID}},
			}},
		},
	}}
	created, err := e.dynamic.Resource(poolsGVR).Create(ctx, pool, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create IPPool: %v", err)
	}
	t.Cleanup(func() {
		// The framework deletes each spec's namespace without waiting:
		// the pool goes once they are gone, so no Service outlives it.
		testenv.Eventually(t, 5*time.Minute, func() error {
			nss, err := e.client.CoreV1().Namespaces().List(ctx, metav1.ListOptions{LabelSelector: "e2e-run=" + runID})
			if err != nil {
				return err
			}
			if n := len(nss.Items); n > 0 {
				return fmt.Errorf("%d namespaces of the run %s are not deleted yet (%s, ...)", n, runID, nss.Items[0].Name)
			}
			return nil
		})
		if err := e.dynamic.Resource(poolsGVR).Delete(ctx, created.GetName(), metav1.DeleteOptions{}); err != nil {
			t.Errorf("delete IPPool %s: %v", created.GetName(), err)
		}
	})

	focus := make([]string, len(upstreamSpecs))
	for i, s := range upstreamSpecs {
		focus[i] = regexp.QuoteMeta(s)
	}
	// By hand, one spec or a few: IPLEDGER_UPSTREAM_FOCUS narrows the run to
	// the specs of upstreamSpecs whose names it also matches.
	only := os.Getenv("IPLEDGER_UPSTREAM_FOCUS")
	onlyRE, err := regexp.Compile(only)
	if err != nil {
		t.Fatalf("IPLEDGER_UPSTREAM_FOCUS=%q: %v", only, err)
	}
	focusArg := strings.Join(focus, "|")
	if only != "" {
		focusArg = only
	}
	var skip []string
	for s := range upstreamSkipped {
		skip = append(skip, regexp.QuoteMeta(s))
	}
	sort.Strings(skip)
	dir := t.TempDir()
	junit := filepath.Join(dir, "junit.xml")
	// One node: about 3 minutes. Two: about 25 (the two rolling-update
	// specs run ten minutes each), so more room.
	timeout := 30 * time.Minute
	if len(e.node.Nodes) > 1 {
		timeout = 45 * time.Minute
	}
	args := []string{
		"--provider=skeleton",
		"--kubeconfig=" + e.node.KubeconfigPath,
		"--kubectl-path=" + filepath.Join(e.node.ToolsBin, "kubectl"),
		"--e2e-run-id=" + runID,
		"--ginkgo.focus=" + focusArg,
		"--ginkgo.skip=" + strings.Join(skip, "|"),
		"--ginkgo.timeout=" + timeout.String(),
		"--ginkgo.junit-report=" + junit,
		"--ginkgo.no-color",
		"--ginkgo.silence-skips",
		"--ginkgo.v",
	}
	runCtx, cancel := context.WithTimeout(ctx, timeout+2*time.Minute)
	defer cancel()
	logPath := filepath.Join(dir, "e2e.log")
	out, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	cmd := exec.CommandContext(runCtx, bin, args...)
	cmd.Stdout, cmd.Stderr = out, out
	start := time.Now()
	runErr := cmd.Run()
	t.Logf("upstream: %s %s: %v in %s", filepath.Base(bin), strings.Join(args, " "), runErr, time.Since(start).Round(time.Second))

	specs, err := readJUnit(junit)
	if err != nil {
		t.Fatalf("%v (the e2e binary: %v)\n%s", err, runErr, tail(logPath, 80))
	}
	inScope := func(name string) bool {
		if !onlyRE.MatchString(name) {
			return false
		}
		for _, s := range upstreamSpecs {
			if strings.Contains(name, s) {
				return true
			}
		}
		return false
	}
	var rows []string
	matched := map[string]int{}
	var passed, failed, skipped int
	for _, s := range specs {
		if !strings.HasPrefix(s.Name, "[It] ") || !inScope(s.Name) {
			if s.Status == "failed" || s.Status == "panicked" || s.Status == "timedout" || s.Status == "interrupted" || s.Status == "aborted" {
				// A suite node ([SynchronizedBeforeSuite], ...).
				t.Errorf("upstream: %s %s: %s", s.Name, s.Status, s.failure())
			}
			continue
		}
		for _, alt := range upstreamSpecs {
			if strings.Contains(s.Name, alt) {
				matched[alt]++
			}
		}
		name := specName(s.Name)
		why := ""
		switch s.Status {
		case "passed":
			passed++
		case "skipped":
			skipped++
			why = s.skipMessage()
			if reason, ours := skippedByUs(name); ours {
				why = "skipped here: " + reason
			} else if !moreNodes.MatchString(why) {
				t.Errorf("upstream: %q was skipped (%s): only specs needing more than one node may skip", name, why)
			}
		default:
			failed++
			why = s.failure()
			t.Errorf("upstream: %q %s: %s\n%s", name, s.Status, why, lastLines(s.SystemErr, 60))
		}
		rows = append(rows, fmt.Sprintf("%-8s %6.1fs  %s%s", s.Status, s.Time, name, suffix(why)))
	}
	sort.Strings(rows)
	t.Logf("upstream: %d specs of Kubernetes %s's e2e suite: %d passed, %d failed, %d skipped (%s)\n%s",
		len(rows), kubernetesVersion(bin), passed, failed, skipped, time.Since(start).Round(time.Second), strings.Join(rows, "\n"))
	for _, alt := range upstreamSpecs {
		if matched[alt] == 0 && only == "" {
			t.Errorf("upstream: no spec of the binary matches %q", alt)
		}
	}
	if runErr != nil && failed == 0 && !t.Failed() {
		t.Errorf("upstream: the e2e binary failed (%v) with no failed spec in its report\n%s", runErr, tail(logPath, 80))
	}
}

// routeOnTheMachine routes prefix to a bridge of its own without ports
// until the test ends, from the address src the bridge holds. The specs
// connect to LoadBalancer addresses from this process, and kube-proxy
// rewrites such a packet in nat OUTPUT — after the kernel has looked up a
// route for it: the unreachable route cluster.TestRanges gives the address
// would refuse the connect before kube-proxy sees it. A packet kube-proxy
// leaves alone (a Service without endpoints, or no longer a LoadBalancer,
// or a source outside its loadBalancerSourceRanges) ends on the bridge,
// which has no port to send it through, so it still never leaves the
// machine. src is what kube-proxy's KUBE-FW chains compare with a
// Service's loadBalancerSourceRanges (upstreamClient).
func routeOnTheMachine(t *testing.T, link, prefix, src string) {
	t.Helper()
	ip := func(args ...string) error {
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			return fmt.Errorf("ip %s: %w: %s", strings.Join(args, " "), err, out)
		}
		return nil
	}
	_ = ip("link", "del", link) // left by a run that was killed
	if err := ip("link", "add", link, "type", "bridge"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := ip("link", "del", link); err != nil { // and its address and route
			t.Error(err)
		}
	})
	for _, args := range [][]string{
		{"addr", "add", src + "/32", "dev", link},
		{"link", "set", link, "up"},
		{"route", "add", prefix, "dev", link, "src", src},
	} {
		if err := ip(args...); err != nil {
			t.Fatal(err)
		}
	}
	// What the specs' connections will come from: the kernel's choice.
	out, err := exec.Command("ip", "-o", "route", "get", netip.MustParsePrefix(prefix).Addr().String()).CombinedOutput()
	if err != nil || !strings.Contains(string(out), " src "+src+" ") {
		t.Fatalf("ip route get %s: want a route from %s on %s, got %v: %s", prefix, src, link, err, out)
	}
}

// TestUpstreamClientIsOutsideTheCluster holds upstreamClient apart from
// upstreamPool and from every address a node or pod of lab/cluster has (or
// the /16 of a node's InternalIP, which the ExternalTrafficPolicy: Local
// specs take for "the nodes' subnet"), and inside cluster.TestRanges, so
// that it stands for a client outside the cluster and a reply to it never
// leaves the machine.
func TestUpstreamClientIsOutsideTheCluster(t *testing.T) {
	client := netip.MustParseAddr(upstreamClient)
	for _, p := range []string{upstreamPool, cluster.ClusterCIDR, cluster.NodeLinkCIDR, cluster.ServiceCIDR, "10.244.0.0/16"} {
		if netip.MustParsePrefix(p).Contains(client) {
			t.Errorf("upstreamClient %s is inside %s: it must stand for a client outside the cluster", client, p)
		}
	}
	inside := false
	for _, r := range cluster.TestRanges {
		inside = inside || netip.MustParsePrefix(r).Contains(client)
	}
	if !inside {
		t.Errorf("upstreamClient %s is outside cluster.TestRanges %v: a reply to it could leave the machine", client, cluster.TestRanges)
	}
}

// TestMoreNodes holds moreNodes to the skip messages of Kubernetes
// v1.37.2's specs that need more than one node, and to the ones it must not
// take for them.
func TestMoreNodes(t *testing.T) {
	for msg, want := range map[string]bool{
		"Test requires >= 2 Ready nodes, but there are only 1 nodes":                                  true,
		"Test requires multiple schedulable nodes":                                                    true,
		"load-balancer rolling update test requires at least 2 schedulable nodes for the DaemonSet":   true,
		"The test requires at least two ready nodes on skeleton, but found 1":                         true,
		"Need at least 3 schedulable nodes for this test":                                             true,
		"Requires at least 2 nodes (not 1)":                                                           true,
		"Only supported for providers [gce gke] (not skeleton)":                                       false,
		"Requires at least 1 nodes (not 0)":                                                           false,
		"no loadbalancer controller for nodes":                                                        false,
		"Couldn't find the required version of the server, requires v1.30 for nodes with ip families": false,
	} {
		if got := moreNodes.MatchString(msg); got != want {
			t.Errorf("moreNodes.MatchString(%q) = %v, want %v", msg, got, want)
		}
	}
}

// skippedByUs reports whether name is one of upstreamSkipped, and why.
func skippedByUs(name string) (string, bool) {
	for s, reason := range upstreamSkipped {
		if strings.Contains(name, s) {
			return reason, true
		}
	}
	return "", false
}

// e2eBinary is IPLEDGER_E2E_BIN, or what hack/build-e2e.sh builds (cached).
func e2eBinary(t *testing.T) string {
	return hackBuild(t, "IPLEDGER_E2E_BIN", "build-e2e.sh")
}

func kubernetesVersion(bin string) string {
	out, err := exec.Command(bin, "--version").Output()
	if err != nil {
		return "?"
	}
	return strings.TrimSpace(string(out))
}

// junitCase is a testcase of ginkgo's JUnit report.
type junitCase struct {
	Name    string  `xml:"name,attr"`
	Status  string  `xml:"status,attr"`
	Time    float64 `xml:"time,attr"`
	Skipped *struct {
		Message string `xml:"message,attr"`
	} `xml:"skipped"`
	Failure *struct {
		Message string `xml:"message,attr"`
		Type    string `xml:"type,attr"`
	} `xml:"failure"`
	Error *struct {
		Message string `xml:"message,attr"`
		Type    string `xml:"type,attr"`
	} `xml:"error"`
	SystemErr string `xml:"system-err"`
}

func (c junitCase) skipMessage() string {
	if c.Skipped == nil {
		return ""
	}
	return strings.TrimPrefix(c.Skipped.Message, "skipped - ")
}

func (c junitCase) failure() string {
	switch {
	case c.Failure != nil:
		return c.Failure.Message
	case c.Error != nil:
		return c.Error.Type + ": " + c.Error.Message
	}
	return ""
}

func readJUnit(path string) ([]junitCase, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("the e2e binary's JUnit report: %w", err)
	}
	var report struct {
		Suites []struct {
			Cases []junitCase `xml:"testcase"`
		} `xml:"testsuite"`
	}
	if err := xml.Unmarshal(data, &report); err != nil {
		return nil, fmt.Errorf("the e2e binary's JUnit report %s: %w", path, err)
	}
	var cases []junitCase
	for _, s := range report.Suites {
		cases = append(cases, s.Cases...)
	}
	if len(cases) == 0 {
		return nil, fmt.Errorf("the e2e binary's JUnit report %s has no spec", path)
	}
	return cases, nil
}

// labels is the trailing label list ginkgo appends to a spec's name.
var labels = regexp.MustCompile(` \[[^\[\]]*\]$`)

// specName is a JUnit test case's name without "[It] " and its labels.
func specName(name string) string {
	return labels.ReplaceAllString(strings.TrimPrefix(name, "[It] "), "")
}

func suffix(why string) string {
	if why == "" {
		return ""
	}
	if i := strings.IndexByte(why, '\n'); i >= 0 {
		why = why[:i]
	}
	return " — " + why
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

func tail(path string, n int) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	return lastLines(string(data), n)
}
