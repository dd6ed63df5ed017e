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
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	args := GoBuildArgs(Provenance{})
	i := slices.Index(args, "-tags")
	if i < 0 || i+1 == len(args) {
		t.Fatalf("GoBuildArgs %q set no -tags", args)
	}
	forbidden := []string{"text/template", "golang.org/x/net/trace"}
	// ipam links k8s.io/apiserver for its aggregated API (issue 48 §3),
	// whose generic server imports text/template (routes, cel-go, cobra):
	// a cost measured and accepted in docs/architecture.md (+18 MB binary,
	// +16 MB resident) until that server is split out; no other binary may.
	accepted := map[string]string{"ipledger-ipam": "text/template"}
	for _, b := range Binaries {
		cmd := exec.Command("go", "list", "-deps", "-tags", args[i+1], b.Package)
		cmd.Dir = root
		cmd.Env = append(os.Environ(), GoBuildEnv...)
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("go list -deps %s: %v", b.Package, err)
		}
		deps := strings.Fields(string(out))
		for _, f := range forbidden {
			if slices.Contains(deps, f) && accepted[b.Name] != f {
				t.Errorf("%s links %s", b.Name, f)
			}
		}
	}
}
