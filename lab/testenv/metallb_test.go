package testenv_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ipledger/ipledger/lab/controlplane"
	"github.com/ipledger/ipledger/lab/testenv"
)

// TestMetalLBVersionIsTheSpeakers: the CRDs the integration tests install
// are those of the MetalLB release whose speaker test/cluster runs
// (hack/tools/metallb), so both test what one release publishes.
func TestMetalLBVersionIsTheSpeakers(t *testing.T) {
	root, err := controlplane.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	mod, err := os.ReadFile(filepath.Join(root, "hack", "tools", "metallb", "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	if want := "go.universe.tf/metallb " + testenv.MetalLBVersion + "\n"; !strings.Contains(string(mod), want) {
		t.Errorf("hack/tools/metallb/go.mod does not require %q: bump testenv.MetalLBVersion with it", strings.TrimSpace(want))
	}
}
