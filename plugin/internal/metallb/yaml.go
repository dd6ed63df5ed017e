package metallb

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"
)

// Decode reads Kubernetes objects from multi-document YAML or JSON, as
// `kubectl get -o yaml` or a manifest writes them: a List's items are
// returned one by one, empty documents are skipped. source names the input
// in errors ("pools.yaml", "stdin").
func Decode(r io.Reader, source string) ([]*unstructured.Unstructured, error) {
	dec := utilyaml.NewYAMLOrJSONDecoder(r, 4096)
	var out []*unstructured.Unstructured
	for doc := 1; ; doc++ {
		var m map[string]any
		err := dec.Decode(&m)
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, fmt.Errorf("%s: document %d: %w", source, doc, err)
		}
		if len(m) == 0 {
			continue
		}
		u := &unstructured.Unstructured{Object: m}
		if !u.IsList() {
			if u.GetKind() == "" {
				return nil, fmt.Errorf("%s: document %d has no kind; is it a Kubernetes object?", source, doc)
			}
			out = append(out, u)
			continue
		}
		list, err := u.ToList()
		if err != nil {
			return nil, fmt.Errorf("%s: document %d: %w", source, doc, err)
		}
		for i := range list.Items {
			out = append(out, &list.Items[i])
		}
	}
}

// Write writes pools as multi-document YAML, ready for kubectl apply -f.
func Write(w io.Writer, pools []IPPool) error {
	var buf bytes.Buffer
	for i, p := range pools {
		b, err := yaml.Marshal(p)
		if err != nil {
			return fmt.Errorf("IPPool %s: %w", p.Metadata.Name, err)
		}
		if i > 0 {
			buf.WriteString("---\n")
		}
		buf.Write(b)
	}
	_, err := w.Write(buf.Bytes())
	return err
}

// Warnings renders warnings one per line, each starting with "Warning: ",
// as kubectl prints the API server's warnings.
func Warnings(ws []Warning) string {
	var b strings.Builder
	for _, w := range ws {
		b.WriteString("Warning: " + w.String() + "\n")
	}
	return b.String()
}
