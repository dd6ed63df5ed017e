package kubevip

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ipledger/ipledger/plugin/internal/metallb"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden from the converter's output")

// TestGolden converts kube-vip-cloud-provider's documented example ConfigMaps
// (testdata/*.yaml, from its README.md and example/, at the commit each file names) and
// compares the IPPools and the warnings with testdata/<name>.golden. Run
// with -update to rewrite them, then review the diff.
func TestGolden(t *testing.T) {
	inputs, err := filepath.Glob("testdata/*.yaml")
	if err != nil || len(inputs) == 0 {
		t.Fatalf("no testdata: %v", err)
	}
	for _, in := range inputs {
		t.Run(filepath.Base(in), func(t *testing.T) {
			got := render(t, in)
			golden := strings.TrimSuffix(in, ".yaml") + ".golden"
			if *update {
				if err := os.WriteFile(golden, got, 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (run go test -update to create it)", err)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("%s differs from the output (go test -update rewrites it):\n%s", golden, got)
			}
		})
	}
}

// render is what migrate-kube-vip prints for a file: the IPPools, then the
// warnings as comments.
func render(t *testing.T, path string) []byte {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	objs, err := metallb.Decode(f, path)
	if err != nil {
		t.Fatal(err)
	}
	res := Convert(objs)
	var buf bytes.Buffer
	if err := metallb.Write(&buf, res.Pools); err != nil {
		t.Fatal(err)
	}
	buf.WriteString("# stderr:\n")
	for _, line := range strings.SplitAfter(metallb.Warnings(res.Warnings), "\n") {
		if line != "" {
			buf.WriteString("# " + line)
		}
	}
	return buf.Bytes()
}
