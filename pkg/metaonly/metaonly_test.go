package metaonly

import (
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		name, raw string
		rv        string
		ann       map[string]string
		err       string
	}{
		{name: "partial metadata", raw: `{"kind":"PartialObjectMetadata","apiVersion":"meta.k8s.io/v1","metadata":{"name":"a","resourceVersion":"42","annotations":{"k":"v"}}}`,
			rv: "42", ann: map[string]string{"k": "v"}},
		{name: "whole object", raw: `{"kind":"ConfigMap","metadata":{"resourceVersion":"7"},"data":{"x":"y"}}`, rv: "7"},
		{name: "no resourceVersion", raw: `{"metadata":{}}`, err: "no resourceVersion"},
		{name: "not JSON", raw: "\x0a\x03k8s", err: "not an object"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, err := Parse([]byte(tc.raw))
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("Parse = %v, %v; want an error containing %q", m, err, tc.err)
				}
				return
			}
			if err != nil || m.ResourceVersion != tc.rv || len(m.Annotations) != len(tc.ann) || m.Annotations["k"] != tc.ann["k"] {
				t.Fatalf("Parse = %+v, %v; want resourceVersion %q, annotations %v", m, err, tc.rv, tc.ann)
			}
		})
	}
}
