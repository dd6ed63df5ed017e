package containerimage

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestVulncheckScansTheImagesBinaries keeps hack/vulncheck.sh (make
// vulncheck) scanning what the images ship: every binary, built with
// GoBuildEnv and GoBuildArgs, whose build tags decide which vulnerable
// symbols are linked in; and the kubectl plugin beside them.
func TestVulncheckScansTheImagesBinaries(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("..", "..", "hack", "vulncheck.sh"))
	if err != nil {
		t.Fatal(err)
	}
	script := string(data)
	wantBuild := strings.Join(GoBuildEnv, " ") + " go build " + shellJoin(GoBuildArgs(Provenance{Version: "$version", Revision: "$revision"})) + " -o "
	if !strings.Contains(script, wantBuild) {
		t.Errorf("hack/vulncheck.sh has no %q (GoBuildEnv and GoBuildArgs)", wantBuild)
	}
	words := map[string]bool{}
	for _, w := range strings.Fields(script) {
		words[strings.TrimRight(w[strings.LastIndex(w, "(")+1:], ")")] = true // pkgs=(./a ./b)
	}
	for _, pkg := range append(packages(Binaries), "./plugin/cmd/kubectl-ipledger") {
		if !words[pkg] {
			t.Errorf("hack/vulncheck.sh does not scan %s", pkg)
		}
	}
}

func packages(bins []Binary) []string {
	p := make([]string, len(bins))
	for i, b := range bins {
		p[i] = b.Package
	}
	return p
}
