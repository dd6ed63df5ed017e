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

	"github.com/ipledger/ipledger/lab/controlplane"
	"github.com/ipledger/ipledger/pkg/certsigner"
	"github.com/ipledger/ipledger/test/e2e/journey"
)

// TestOverlaysRollOut applies what users apply — components/high-availability
// on the base; overlays/production exactly as docs/install.md says, with no
// command before it (TLS from ipledger-signer, which makes its CA and signs
// each server's CSR); and production's components with components/tls and
// the Secrets `kubectl ipledger tls bootstrap` makes — on top of the e2e
// install, and checks every Deployment rolls out with its replicas, the
// consumers stream (over TLS in both TLS installs), Services get addresses
// and kubectl ipledger verifies ipam with the CA it finds (the bundle
// ConfigMap, or ca.crt of ipledger-ipam-tls). It logs the minutes from the
// apply to rollout and to the addresses. The e2e install is put back at the
// end, and the signer's objects and the plugin's Secrets removed. Neither
// TLS install runs eipd (bare metal): the test first removes the e2e
// install's eipd as docs/upgrading.md says.
func TestOverlaysRollOut(t *testing.T) {
	e := get(t)
	root, err := controlplane.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	plugin := buildPlugin(t)
	t.Cleanup(func() {
		e.apply(t, filepath.Join(root, "deploy", "kustomize", "overlays", "e2e"))
		for _, d := range deployments {
			e.rolledOut(t, d)
		}
		e.kubectl(t, "delete", "--ignore-not-found", "--wait=false", "-f", filepath.Join(root, "deploy", "kustomize", "components", "tls-signer", "signer.yaml"))
		e.kubectl(t, "delete", "csr", "--field-selector", "spec.signerName="+certsigner.SignerName)
	})
	for _, tc := range []struct {
		name string
		// before runs before the apply and after once it rolled out; either
		// returns the CA file the test trusts reading ipam's ledger (none:
		// plaintext).
		before, after func(t *testing.T) string
		signer        bool // ipledger-signer rolls out too
		eipd          bool // the install runs eipd
	}{
		{name: "high-availability", eipd: true},
		{name: "production", after: e.signerBundle, signer: true},
		{name: "production-plugin-tls", before: func(t *testing.T) string { return e.bootstrapTLS(t, plugin) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir, err := filepath.Abs(filepath.Join("testdata", tc.name))
			if err != nil {
				t.Fatal(err)
			}
			ca := ""
			if tc.before != nil {
				ca = tc.before(t)
			}
			if !tc.eipd {
				e.removeEIPD(t)
			}
			start := time.Now()
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
			if tc.signer {
				e.rolledOut(t, "ipledger-signer")
			}
			if tc.after != nil {
				ca = tc.after(t)
			}
			rolled := time.Since(start)
			e.subscribersPerWatcher(t)
			l := e.startLoad(t, 50*time.Millisecond, 20)
			l.waitCreated(t, 20)
			e.ips(t, l.ns, l.stop(t), 2*time.Minute)
			t.Logf("%s: apply to rollout status %.1f min, to 20 Services with addresses %.1f min", tc.name, rolled.Minutes(), time.Since(start).Minutes())
			e.consistent(t, ca)
			if ca != "" {
				// The plugin finds ipam serving TLS and verifies it with the
				// CA its install publishes, its default.
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

// signerBundle writes the CA bundle ipledger-signer published to a file
// and returns its path.
func (e *env) signerBundle(t *testing.T) string {
	t.Helper()
	cm, err := e.client.CoreV1().ConfigMaps(systemNS).Get(context.Background(), "ipledger-grpc-ca-bundle", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "ca.crt")
	if err := os.WriteFile(path, []byte(cm.Data["ca.crt"]), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
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
