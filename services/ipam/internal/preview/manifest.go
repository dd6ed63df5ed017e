package preview

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/yaml"

	"github.com/ipledger/ipledger/pkg/convert"
	"github.com/ipledger/ipledger/services/ipam/internal/allocator"
	"github.com/ipledger/ipledger/services/ipam/internal/objects"
)

// The IPPool's API version and kind, as a manifest must name them.
const (
	APIVersion = "ipledger.io/v1alpha1"
	Kind       = "IPPool"
)

// Parse reads a manifest: exactly one IPPool, in YAML or JSON, as `kubectl
// apply -f` takes it. The error says why the bytes are not one IPPool;
// Change.Problems lists what the API server would refuse in it (for a
// delete, only metadata.name is read).
func Parse(manifest []byte, del bool) (Change, error) {
	u, err := decodeOne(manifest)
	if err != nil {
		return Change{}, err
	}
	if u.GetAPIVersion() != APIVersion || u.GetKind() != Kind {
		return Change{}, fmt.Errorf("the document is apiVersion %q kind %q; give one IPPool (apiVersion: %s, kind: %s)",
			u.GetAPIVersion(), u.GetKind(), APIVersion, Kind)
	}
	c := Change{Name: u.GetName(), Delete: del}
	if c.Name == "" {
		return Change{}, errors.New("metadata.name: required; name the pool to create, edit or delete")
	}
	for _, msg := range validation.IsDNS1123Subdomain(c.Name) {
		c.Problems = append(c.Problems, fmt.Sprintf("metadata.name: Invalid value: %q: %s", c.Name, msg))
	}
	if del {
		return c, nil
	}
	obj, err := convert.IPPool(u)
	if err != nil {
		// A field of the wrong type, which the CRD's schema refuses too.
		c.Problems = append(c.Problems, fmt.Sprintf("spec: does not match the IPPool schema (a field of the wrong type, such as a quoted number?): %v",
			errors.Unwrap(err)))
		return c, nil
	}
	// The parser ipam serves with: the CRD and the admission policy refuse
	// exactly what it refuses, naming the same field (objects/crdtest).
	if _, err := allocator.ParsePool(c.Name, objects.PoolSpec(obj)); err != nil {
		c.Problems = append(c.Problems, err.Error())
	}
	c.Pool = obj
	return c, nil
}

// decodeOne decodes the one non-empty document of a YAML or JSON stream.
func decodeOne(manifest []byte) (*unstructured.Unstructured, error) {
	if len(bytes.TrimSpace(manifest)) == 0 {
		return nil, errors.New("empty; give one IPPool in YAML or JSON (kubectl ipledger preview -f pool.yaml)")
	}
	dec := yaml.NewYAMLOrJSONDecoder(bytes.NewReader(manifest), 4096)
	var found *unstructured.Unstructured
	for doc := 1; ; doc++ {
		var raw json.RawMessage
		err := dec.Decode(&raw)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("document %d is not YAML or JSON: %v", doc, err)
		}
		if t := bytes.TrimSpace(raw); len(t) == 0 || bytes.Equal(t, []byte("null")) {
			continue // an empty document between two "---"
		}
		if found != nil {
			return nil, fmt.Errorf("document %d is a second object; preview one IPPool at a time", doc)
		}
		u := &unstructured.Unstructured{}
		if err := u.UnmarshalJSON(raw); err != nil {
			return nil, fmt.Errorf("document %d is not a Kubernetes object: %v", doc, err)
		}
		found = u
	}
	if found == nil {
		return nil, errors.New("no object in it; give one IPPool in YAML or JSON")
	}
	return found, nil
}
