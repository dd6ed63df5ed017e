package reference

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

var update = flag.Bool("update", false, "rewrite the reference pages of docs/reference from the code")

// root is the repository's top, from this package's directory.
const root = "../../.."

// checkPage compares docs/reference/<name> with want, or writes it with
// -update.
func checkPage(t *testing.T, name, want string) {
	t.Helper()
	path := filepath.Join(root, "docs", "reference", name)
	if *update {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(want), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (generate it: go test ./test/e2e/reference -update)", err)
	}
	if !bytes.Equal(got, []byte(want)) {
		t.Errorf("docs/reference/%s drifted from the code; regenerate it: go test ./test/e2e/reference -update\n%s", name, firstDifference(string(got), want))
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

// crds are the CRDs of the base install.
var crds = []string{"ipledger.io_ippools.yaml", "ipledger.io_externalworkloads.yaml"}

type crd struct {
	Spec struct {
		Group string `json:"group"`
		Names struct {
			Kind string `json:"kind"`
		} `json:"names"`
		Versions []struct {
			Name   string `json:"name"`
			Schema struct {
				OpenAPIV3Schema map[string]any `json:"openAPIV3Schema"`
			} `json:"schema"`
		} `json:"versions"`
	} `json:"spec"`
}

func readCRD(t *testing.T, name string) crd {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(root, "deploy", "kustomize", "base", "crds", name))
	if err != nil {
		t.Fatal(err)
	}
	var c crd
	if err := yaml.Unmarshal(data, &c); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return c
}

// TestEveryCRDFieldHasADescription: `kubectl explain` of any field of
// either CRD says what it is.
func TestEveryCRDFieldHasADescription(t *testing.T) {
	for _, name := range crds {
		c := readCRD(t, name)
		for _, v := range c.Spec.Versions {
			if oneLine(v.Schema.OpenAPIV3Schema["description"]) == "" {
				t.Errorf("%s %s: the schema's root has no description", c.Spec.Names.Kind, v.Name)
			}
			for _, f := range CRDFields(v.Schema.OpenAPIV3Schema) {
				// The API server refuses a CRD that says anything of
				// metadata but its type, and explains it as ObjectMeta.
				if f.Description == "" && f.Path != "metadata" {
					t.Errorf("%s %s: field %s has no description (deploy/kustomize/base/crds/%s)", c.Spec.Names.Kind, v.Name, f.Path, name)
				}
			}
		}
	}
}

// TestCRDReference: docs/reference/crds.md is the CRDs' fields.
func TestCRDReference(t *testing.T) {
	var b strings.Builder
	b.WriteString(header("crds", "deploy/kustomize/base/crds") + "# Custom resources\n\n" +
		"Every field of ipledger's two CRDs, from their schemas. How to use them: [pools.md](../pools.md) (IPPool),\n" +
		"[externalworkloads.md](../externalworkloads.md) (ExternalWorkload).\n")
	for _, name := range crds {
		c := readCRD(t, name)
		for _, v := range c.Spec.Versions {
			b.WriteString("\n" + CRDPage(c.Spec.Names.Kind, c.Spec.Group, v.Name, CRDFields(v.Schema.OpenAPIV3Schema)))
		}
	}
	checkPage(t, "crds.md", b.String())
}

// header is the notice at the top of every generated page.
func header(page, source string) string {
	return "<!-- Generated from " + source + " by `go test ./test/e2e/reference -update`; do not edit (" + page + "). -->\n\n"
}
