package reference

import (
	"testing"
)

// root is the repository's top, from this package's directory.
const root = "../../.."

// TestEveryCRDFieldHasADescription: `kubectl explain` of any field of
// either CRD says what it is.
func TestEveryCRDFieldHasADescription(t *testing.T) {
	for _, name := range CRDFiles {
		c, err := ReadCRD(root, name)
		if err != nil {
			t.Fatal(err)
		}
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
