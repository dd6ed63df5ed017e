package e2e

import (
	"bytes"
	"flag"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ipledger/ipledger/lab/testenv"
)

var update = flag.Bool("update", false, "rewrite the golden files of rendered manifests")

var kustomizations = []string{"base", "overlays/dev", "overlays/production", "overlays/cloud", e2eOverlay}

// e2eOverlay is what make test-cluster installs on a real node: a test
// install, not one for users.
const e2eOverlay = "overlays/e2e"

// TestManifestsMatchGoldenFiles renders every kustomization with the pinned
// kubectl and compares it with testdata/golden, so every change to what users
// install shows up in review. `go test ./test/e2e -run Golden -update` rewrites them.
func TestManifestsMatchGoldenFiles(t *testing.T) {
	for _, k := range kustomizations {
		t.Run(k, func(t *testing.T) {
			out := render(t, k)
			golden := filepath.Join("testdata", "golden", strings.ReplaceAll(k, "/", "-")+".yaml")
			if *update {
				if err := os.MkdirAll(filepath.Dir(golden), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(golden, out, 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (run with -update to create it)", err)
			}
			if !bytes.Equal(out, want) {
				t.Errorf("rendered %s differs from %s; review the change and run with -update", k, golden)
			}
		})
	}
}

// TestManifestsApplyToTheAPIServer applies every kustomization with
// server-side dry-run: schema validation, CRD validation and the restricted
// Pod Security level of ipledger-system (a violation is a warning on
// Deployments, which the test turns into a failure).
func TestManifestsApplyToTheAPIServer(t *testing.T) {
	env := testenv.Get(t)
	for _, k := range kustomizations {
		t.Run(k, func(t *testing.T) {
			cmd := exec.Command(filepath.Join(env.CP.BinDir, "kubectl"), "--kubeconfig", env.CP.KubeconfigPath,
				"apply", "--server-side", "--force-conflicts", "--dry-run=server", "--validate=strict", "-k", filepath.Join(env.Root, "deploy/kustomize", k))
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			out, err := cmd.Output()
			if err != nil {
				t.Fatalf("apply %s: %v\n%s", k, err, stderr.String())
			}
			if strings.Contains(stderr.String(), "PodSecurity") || strings.Contains(stderr.String(), "Warning") {
				t.Errorf("apply %s warned:\n%s", k, stderr.String())
			}
			if n := strings.Count(string(out), "(server dry run)"); n < 30 {
				t.Errorf("expected every object to be dry-run applied, got %d lines:\n%s", n, out)
			}
		})
	}
}
