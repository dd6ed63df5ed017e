package cluster_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ipledger/ipledger/pkg/controlplane"
	"github.com/ipledger/ipledger/test/e2e/journey"
)

// TestOverlaysRollOut applies what users apply — components/high-availability
// on the base, then overlays/production with TLS from the Secrets
// `kubectl ipledger tls bootstrap` makes (a certificate with only the .svc
// names components/tls used to list kept every consumer from the watcher;
// now every server has its own, and endpoints only the CA) — on top of the
// e2e install, and checks every Deployment rolls out with its replicas, the
// consumers stream (over TLS in production), Services get addresses and, in
// production, kubectl ipledger verifies ipam with the CA of ipledger-ipam-tls.
// production runs no eipd (bare metal): the test first removes the e2e
// install's eipd as docs/upgrading.md says. The e2e install is put back at
// the end.
func TestOverlaysRollOut(t *testing.T) {
	e := get(t)
	root, err := controlplane.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	plugin := buildPlugin(t)
	ca := e.bootstrapTLS(t, plugin)
	t.Cleanup(func() {
		e.apply(t, filepath.Join(root, "deploy", "kustomize", "overlays", "e2e"))
		for _, d := range deployments {
			e.rolledOut(t, d)
		}
	})
	for _, tc := range []struct {
		name string
		ca   string // the CA the test trusts reading ipam's ledger; empty for plaintext
		eipd bool   // the install runs eipd
	}{
		{"high-availability", "", true},
		{"production", ca, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir, err := filepath.Abs(filepath.Join("testdata", tc.name))
			if err != nil {
				t.Fatal(err)
			}
			if !tc.eipd {
				e.removeEIPD(t)
			}
			e.apply(t, dir)
			for _, d := range deployments {
				if d == "ipledger-eipd" && !tc.eipd {
					continue
				}
				e.rolledOut(t, d)
				if got := len(e.pods(t, d)); got != highAvailability[d] {
					t.Errorf("%s runs %d pods, want %d", d, got, highAvailability[d])
				}
			}
			e.subscribersPerWatcher(t)
			l := e.startLoad(t, 50*time.Millisecond, 20)
			l.waitCreated(t, 20)
			e.ips(t, l.ns, l.stop(t), 2*time.Minute)
			e.consistent(t, tc.ca)
			if tc.ca != "" {
				// The plugin finds ipam serving TLS and verifies it with the
				// ca.crt of ipledger-ipam-tls, its default.
				token := filepath.Join(t.TempDir(), "token")
				if err := os.WriteFile(token, []byte(journey.ViewerToken(t, e.client)), 0o600); err != nil {
					t.Fatal(err)
				}
				out, err := exec.Command(plugin, "pools", "--kubeconfig", e.node.KubeconfigPath, "--token-file", token, "--timeout", "60s").CombinedOutput()
				if err != nil || !strings.Contains(string(out), "READY") {
					t.Errorf("kubectl ipledger pools against ipam over TLS: %v\n%s", err, out)
				}
			}
		})
	}
}

// apply applies a kustomization as TestMain does (server-side), taking
// over the fields `kubectl scale` set.
func (e *env) apply(t testing.TB, dir string) {
	t.Helper()
	e.kubectl(t, "apply", "--server-side", "--force-conflicts", "-k", dir)
}

// bootstrapTLS makes the Secrets components/tls mounts as an operator
// does, with `kubectl ipledger tls bootstrap` (bin, the built plugin), and
// returns the PEM file of the CA it created, which every server's
// certificate chains to.
func (e *env) bootstrapTLS(t *testing.T, bin string) string {
	t.Helper()
	secrets := e.client.CoreV1().Secrets(systemNS)
	t.Cleanup(func() {
		for _, name := range []string{"ipledger-grpc-ca", "ipledger-watcher-tls", "ipledger-ipam-tls", "ipledger-eipd-tls"} {
			if err := secrets.Delete(context.Background(), name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
				t.Error(err)
			}
		}
	})
	out, err := exec.Command(bin, "tls", "bootstrap", "--kubeconfig", e.node.KubeconfigPath, "--ipam-namespace", systemNS).CombinedOutput()
	if err != nil {
		t.Fatalf("kubectl ipledger tls bootstrap: %v\n%s", err, out)
	}
	t.Logf("kubectl ipledger tls bootstrap:\n%s", out)
	ca, err := secrets.Get(context.Background(), "ipledger-grpc-ca", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "ca.crt")
	if err := os.WriteFile(path, ca.Data["ca.crt"], 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}
