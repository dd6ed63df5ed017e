package containerimage

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestBinariesKeepMethodElimination fails when a binary, built as GoBuild
// builds it, links text/template again. Its reflective method calls
// (reflect.Value.MethodByName) make the linker keep every exported method of
// every type: the four binaries grow by half to more than double (ipam 34 →
// 52 MB, eipd 36 → 85 MB), and a running ipam has 11–14 MB more of it
// resident (BENCHMARKS.md, ipam's session 7). `go list -deps` with
// GoBuildArgs' tags shows the import; find which package brings it in with
// `go list -deps -f '{{.ImportPath}} {{.Imports}}'`.
func TestBinariesKeepMethodElimination(t *testing.T) {
	forbidden := []string{"text/template", "golang.org/x/net/trace"}
	// ipam links k8s.io/apiserver for its aggregated API (issue 48 §3),
	// whose generic server imports text/template (routes, cel-go, cobra):
	// a cost measured and accepted in docs/architecture.md (+18 MB binary,
	// +16 MB resident) until that server is split out; no other binary may.
	accepted := map[string]string{"ipledger-ipam": "text/template"}
	for _, b := range Binaries {
		deps := binaryDeps(t, b)
		for _, f := range forbidden {
			if slices.Contains(deps, f) && accepted[b.Name] != f {
				t.Errorf("%s links %s", b.Name, f)
			}
		}
	}
}

// lab are the packages of the test and release harness: real API servers
// and nodes, fault proxies, images, releases, the dev environment (the lab
// module, lab/), and the tests of test/. No binary may import them (issue
// 50: the layout says what ships; pkg/ holds only the runtime libraries).
var lab = []string{
	"github.com/ipledger/ipledger/lab/",
	"github.com/ipledger/ipledger/test/",
}

// TestBinariesImportNoLab fails when a shipped binary links a package of
// the lab: test harness code in a release image.
func TestBinariesImportNoLab(t *testing.T) {
	for _, b := range Binaries {
		for _, dep := range binaryDeps(t, b) {
			for _, l := range lab {
				if dep == l || strings.HasPrefix(dep, strings.TrimSuffix(l, "/")+"/") {
					t.Errorf("%s links %s, a package of the lab", b.Name, dep)
				}
			}
		}
	}
}

// binaryDeps lists the packages b links, with GoBuildArgs' tags.
func binaryDeps(t *testing.T, b Binary) []string {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	args := GoBuildArgs(Provenance{})
	i := slices.Index(args, "-tags")
	if i < 0 || i+1 == len(args) {
		t.Fatalf("GoBuildArgs %q set no -tags", args)
	}
	cmd := exec.Command("go", "list", "-deps", "-tags", args[i+1], b.Package)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), GoBuildEnv...)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list -deps %s: %v", b.Package, err)
	}
	return strings.Fields(string(out))
}
