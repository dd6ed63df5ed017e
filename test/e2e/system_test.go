package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/ipledger/ipledger/lab/controlplane"
	"github.com/ipledger/ipledger/lab/testenv"
	"github.com/ipledger/ipledger/pkg/authz"
)

// System is the four binaries running as processes, each on its own
// ServiceAccount token, so a permission missing from deploy/kustomize's RBAC
// fails the suite.
type System struct {
	t   *testing.T
	env *testenv.Env

	Watchers  []*Service
	IPAM      []*Service
	Endpoints []*Service
	EIPD      []*Service

	// EC2Endpoint is where eipd sends EC2 calls (moto, or a fault proxy).
	EC2Endpoint string

	pprof bool

	// tolerated are time windows in which RBAC denials are expected: an API
	// server that just restarted refuses requests until its RBAC cache is
	// filled.
	tolerated [][2]time.Time
}

// TolerateDenials runs f (which disturbs the API server) and ignores RBAC
// denials logged while it runs and for two seconds after.
func (s *System) TolerateDenials(f func()) {
	start := time.Now()
	f()
	s.tolerated = append(s.tolerated, [2]time.Time{start, time.Now().Add(2 * time.Second)})
}

func (s *System) tolerates(line string) bool {
	var entry struct {
		Time time.Time `json:"time"`
	}
	if err := json.Unmarshal([]byte(line), &entry); err != nil {
		return false
	}
	for _, w := range s.tolerated {
		if !entry.Time.Before(w[0]) && !entry.Time.After(w[1]) {
			return true
		}
	}
	return false
}

// Service is one replica of a binary.
type Service struct {
	*testenv.Process
	Component string
	Replica   int
	GRPCAddr  string
	OpsAddr   string
	args      []string
	env       []string
	path      string
}

// SystemOptions says how many replicas of each to run (0 = none).
type SystemOptions struct {
	Watchers, IPAM, Endpoints, EIPD int
	EC2Endpoint                     string
	ClusterID                       string
	// WatcherArgs are extra flags for every watcher.
	WatcherArgs []string
	// Pprof serves /debug/pprof on every replica's ops port (--enable-pprof),
	// through which a test can make a process collect its garbage.
	Pprof bool
}

// Leader election durations short enough for tests, and said once.
var leaderFlags = []string{
	"--leader-elect-lease-duration=3s",
	"--leader-elect-renew-deadline=2s",
	"--leader-elect-retry-period=250ms",
	"--stop-timeout=20s",
}

// StartSystem starts the requested replicas and waits until each is ready.
func StartSystem(t *testing.T, opts SystemOptions) *System {
	t.Helper()
	s := &System{t: t, env: testenv.Get(t), EC2Endpoint: opts.EC2Endpoint, pprof: opts.Pprof}
	for r := range opts.Watchers {
		s.Watchers = append(s.Watchers, s.start("watcher", r, opts.WatcherArgs))
	}
	for r := range opts.IPAM {
		s.IPAM = append(s.IPAM, s.start("ipam", r, nil))
	}
	for r := range opts.Endpoints {
		s.Endpoints = append(s.Endpoints, s.start("endpoints", r, []string{"--max-endpoints-per-slice=100"}))
	}
	if opts.ClusterID == "" {
		opts.ClusterID = "e2e"
	}
	for r := range opts.EIPD {
		s.EIPD = append(s.EIPD, s.start("eipd", r, []string{
			"--cluster-id=" + opts.ClusterID, "--node-min-reconciliation-interval=1s", "--node-reconciliation-requeue-interval=5s",
		}))
	}
	for _, group := range [][]*Service{s.Watchers, s.IPAM, s.Endpoints, s.EIPD} {
		for _, svc := range group {
			svc.WaitReady(t)
		}
	}
	t.Cleanup(s.checkNoRBACDenials)
	return s
}

// checkNoRBACDenials fails the test when any component was refused by the
// API server's RBAC. client-go hides some missing verbs (a reflector
// without `watch` falls back to relisting), so the suite would otherwise
// pass with a ClusterRole that is missing a rule the component needs.
func (s *System) checkNoRBACDenials() {
	for _, group := range [][]*Service{s.Watchers, s.IPAM, s.Endpoints, s.EIPD} {
		for _, svc := range group {
			for _, line := range strings.Split(svc.Logs(), "\n") {
				if strings.Contains(line, "is forbidden") && !s.tolerates(line) {
					s.t.Errorf("%s-%d was refused by RBAC (deploy/kustomize/base/rbac lacks a rule): %s", svc.Component, svc.Replica, tail(line, 400))
					break
				}
			}
		}
	}
}

func (s *System) watcherTarget() string {
	var addrs []string
	for _, w := range s.Watchers {
		addrs = append(addrs, w.GRPCAddr)
	}
	sort.Strings(addrs)
	return "static:///" + strings.Join(addrs, ",")
}

func (s *System) start(component string, replica int, extra []string) *Service {
	t := s.t
	t.Helper()
	// As a Pod's automounted token, bound to the Pod: ipam writes its ledger
	// from a Pod only (the policy ipledger-ledger-writers).
	token, err := s.env.PodToken(context.Background(), testenv.SystemNamespace, "ipledger-"+component)
	if err != nil {
		t.Fatal(err)
	}
	ports, err := controlplane.FreePorts(2)
	if err != nil {
		t.Fatal(err)
	}
	svc := &Service{
		Component: component, Replica: replica,
		GRPCAddr: fmt.Sprintf("127.0.0.1:%d", ports[0]),
		OpsAddr:  fmt.Sprintf("127.0.0.1:%d", ports[1]),
		path:     s.env.Binary(t, component),
	}
	svc.args = []string{"--kubeconfig=" + s.env.KubeconfigFor(t, token), "--ops-addr=" + svc.OpsAddr, "--log-level=debug"}
	if component != "endpoints" {
		svc.args = append(svc.args, "--grpc-addr="+svc.GRPCAddr, "--grpc-plaintext")
	}
	if component != "watcher" {
		svc.args = append(svc.args,
			"--watcher-addr="+s.watcherTarget(), "--watcher-plaintext",
			"--watcher-token-file="+s.env.TokenFileFor(t, testenv.SystemNamespace, "ipledger-"+component, authz.WatcherAudience),
			fmt.Sprintf("--leader-elect-identity=%s-%d", component, replica))
		svc.args = append(svc.args, leaderFlags...)
	}
	if s.pprof {
		svc.args = append(svc.args, "--enable-pprof")
	}
	svc.args = append(svc.args, extra...)
	if component == "eipd" {
		svc.env = []string{"AWS_ENDPOINT_URL_EC2=" + s.EC2Endpoint, "AWS_REGION=us-east-1",
			"AWS_ACCESS_KEY_ID=testing", "AWS_SECRET_ACCESS_KEY=testing", "AWS_EC2_METADATA_DISABLED=true"}
	}
	svc.Restart(t)
	return svc
}

// Restart starts the replica again with the same flags and ports (after a
// Kill or Stop).
func (svc *Service) Restart(t *testing.T) {
	t.Helper()
	svc.Process = testenv.StartProcess(t, fmt.Sprintf("%s-%d", svc.Component, svc.Replica), svc.path, svc.env, svc.args...)
}

// WaitReady polls the replica's /readyz.
func (svc *Service) WaitReady(t *testing.T) {
	t.Helper()
	testenv.Eventually(t, 60*time.Second, func() error {
		if svc.Exited() {
			t.Fatalf("%s-%d exited: %v\n%s", svc.Component, svc.Replica, svc.Err(), tail(svc.Logs(), 4000))
		}
		resp, err := http.Get("http://" + svc.OpsAddr + "/readyz")
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("%s-%d /readyz: %s", svc.Component, svc.Replica, resp.Status)
		}
		return nil
	})
}

// Metric returns the sum of a metric's samples whose label set contains
// every label given, scraped from the replica's /metrics.
func (svc *Service) Metric(t *testing.T, name string, labels ...string) float64 {
	t.Helper()
	resp, err := http.Get("http://" + svc.OpsAddr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var b strings.Builder
	buf := make([]byte, 64<<10)
	for {
		n, err := resp.Body.Read(buf)
		b.WriteString(string(buf[:n]))
		if err != nil {
			break
		}
	}
	var sum float64
	for _, line := range strings.Split(b.String(), "\n") {
		if !strings.HasPrefix(line, name+"{") && !strings.HasPrefix(line, name+" ") {
			continue
		}
		matches := true
		for _, l := range labels {
			matches = matches && strings.Contains(line, l)
		}
		if !matches {
			continue
		}
		var v float64
		if _, err := fmt.Sscan(line[strings.LastIndex(line, " ")+1:], &v); err == nil {
			sum += v
		}
	}
	return sum
}

// Dial opens a gRPC connection to addr authenticated as the given
// ServiceAccount of ipledger-system.
func (s *System) Dial(t *testing.T, addr, serviceAccount string, extra ...grpc.DialOption) *grpc.ClientConn {
	t.Helper()
	return testenv.Dial(t, addr, s.env.TokenFile(t, testenv.SystemNamespace, serviceAccount), extra...)
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}
