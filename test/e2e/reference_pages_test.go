package e2e

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/ipledger/ipledger/lab/testenv"
	"github.com/ipledger/ipledger/test/e2e/reference"
)

// TestReferencePages: docs/reference is what the code says — the CRDs'
// fields, the annotations ipledger reads, every binary's flags.
// `go test ./test/e2e -run ReferencePages -update` rewrites the pages.
func TestReferencePages(t *testing.T) {
	env := testenv.Get(t)
	t.Run("crds", func(t *testing.T) {
		page, err := reference.CRDs(env.Root)
		if err != nil {
			t.Fatal(err)
		}
		checkPage(t, env.Root, reference.CRDsPage, page)
	})
	t.Run("annotations", func(t *testing.T) {
		checkPage(t, env.Root, reference.AnnotationsPage, reference.Annotations())
	})
	t.Run("flags", func(t *testing.T) {
		page, err := reference.Flags(func(name string) string {
			return env.Binary(t, strings.TrimPrefix(name, "ipledger-"))
		}, env.Plugin(t))
		if err != nil {
			t.Fatal(err)
		}
		checkPage(t, env.Root, reference.FlagsPage, page)
	})
}

// checkPage compares docs/reference/<name> with want, or writes it with
// -update.
func checkPage(t *testing.T, root, name, want string) {
	t.Helper()
	path := filepath.Join(root, "docs", "reference", name)
	if *update {
		if err := os.WriteFile(path, []byte(want), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (generate it: go test ./test/e2e -run ReferencePages -update)", err)
	}
	if !bytes.Equal(got, []byte(want)) {
		t.Errorf("docs/reference/%s drifted from the code; regenerate it: go test ./test/e2e -run ReferencePages -update\n%s", name, firstDifference(string(got), want))
	}
}

// firstDifference names the first line where got and want differ.
func firstDifference(got, want string) string {
	g, w := strings.Split(got, "\n"), strings.Split(want, "\n")
	for i := range max(len(g), len(w)) {
		var gl, wl string
		if i < len(g) {
			gl = g[i]
		}
		if i < len(w) {
			wl = w[i]
		}
		if gl != wl {
			return "line " + strconv.Itoa(i+1) + ":\n  page: " + gl + "\n  code: " + wl
		}
	}
	return ""
}
