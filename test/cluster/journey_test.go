package cluster_test

import (
	"bufio"
	"bytes"
	"fmt"
	"os/exec"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	"github.com/ipledger/ipledger/test/e2e/journey"
)

// TestUserJourney walks what a user does on day one (package journey) with
// ipledger running as pods: ipam answers grpcurl through `kubectl
// port-forward`, eipd gives a Node an Elastic IP from moto, which it reaches
// from its pod at the node address.
func TestUserJourney(t *testing.T) {
	e := get(t)
	ipam := e.portForward(t, "svc/ipledger-ipam", 9443)
	journey.Run(t, journey.Target{
		Client:    e.client,
		Dynamic:   e.dynamic,
		Grpcurl:   filepath.Join(e.node.ToolsBin, "grpcurl"),
		IPAM:      []string{ipam},
		Moto:      e.moto,
		ClusterID: clusterID,
	}, e.namespace(t))
}

var forwarding = regexp.MustCompile(`^Forwarding from 127\.0\.0\.1:(\d+) -> `)

// portForward runs `kubectl port-forward` to port of target in
// ipledger-system on a free local port until the test ends, and returns
// the local address.
func (e *env) portForward(t *testing.T, target string, port int) string {
	t.Helper()
	cmd := exec.Command(filepath.Join(e.node.ToolsBin, "kubectl"), "--kubeconfig", e.node.KubeconfigPath,
		"-n", journey.SystemNamespace, "port-forward", "--address=127.0.0.1", target, fmt.Sprintf(":%d", port))
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	found := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if m := forwarding.FindStringSubmatch(sc.Text()); m != nil {
				found <- "127.0.0.1:" + m[1]
				break
			}
		}
		for sc.Scan() { // keep draining, so that kubectl never blocks on its output
		}
	}()
	select {
	case addr := <-found:
		return addr
	case <-time.After(30 * time.Second):
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		t.Fatalf("kubectl port-forward %s %d printed no local address in 30s: %s", target, port, stderr.String())
		return ""
	}
}
