// Package goldentest checks a converter of kubectl ipledger (metallb,
// cilium, kubevip) against golden files: each testdata/<name>.yaml is
// converted and printed as its migrate-* command prints it — the IPPools,
// then the warnings, as comments — and compared with testdata/<name>.golden.
// Run the test with -update to rewrite the golden files, then review the
// diff.
package goldentest

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/ipledger/ipledger/plugin/internal/metallb"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden from the converter's output")

// Run compares convert's output for every testdata/*.yaml with its golden
// file.
func Run(t *testing.T, convert func([]*unstructured.Unstructured) metallb.Result) {
	t.Helper()
	inputs, err := filepath.Glob("testdata/*.yaml")
	if err != nil || len(inputs) == 0 {
		t.Fatalf("no testdata: %v", err)
	}
	for _, in := range inputs {
		t.Run(filepath.Base(in), func(t *testing.T) {
			Compare(t, strings.TrimSuffix(in, ".yaml")+".golden", render(t, in, convert))
		})
	}
}

// Compare compares got with the golden file golden (-update rewrites it).
func Compare(t *testing.T, golden string, got []byte) {
	t.Helper()
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
}

// render is what the command prints for a file: the IPPools, then the
// warnings as comments.
func render(t *testing.T, path string, convert func([]*unstructured.Unstructured) metallb.Result) []byte {
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
	res := convert(objs)
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
