// Package objdiff compares two renderings of Kubernetes manifests (multi-
// document YAML, as kustomize, kubectl or Helm print them) as objects, not
// as text: the same objects with the same fields are equal however they are
// formatted or ordered. A difference names the object (kind,
// namespace/name) and the field, with both values, so that a drift between
// two ways of installing the same thing (the Helm chart and kustomize) says
// what to change.
package objdiff

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"reflect"
	"slices"
	"strconv"
	"strings"

	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
)

// Object is one parsed document.
type Object = map[string]any

// Parse decodes every non-empty document of a multi-document YAML (or JSON)
// rendering, keyed by ID. Two documents with one ID are an error.
func Parse(rendered []byte) (map[string]Object, error) {
	out := map[string]Object{}
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(rendered), 4096)
	for {
		var doc json.RawMessage
		err := dec.Decode(&doc)
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, err
		}
		var obj Object
		if err := json.Unmarshal(doc, &obj); err != nil {
			return nil, err
		}
		if len(obj) == 0 {
			continue
		}
		id := ID(obj)
		if _, dup := out[id]; dup {
			return nil, fmt.Errorf("%s appears twice", id)
		}
		out[id] = obj
	}
}

// ID names an object as the differences do: "Kind namespace/name", or
// "Kind name" for a cluster-scoped one.
func ID(obj Object) string {
	kind, _ := obj["kind"].(string)
	meta, _ := obj["metadata"].(map[string]any)
	name, _ := meta["name"].(string)
	if ns, _ := meta["namespace"].(string); ns != "" {
		return kind + " " + ns + "/" + name
	}
	return kind + " " + name
}

// Diff returns the differences between renderings a and b (named aName and
// bName in the messages), sorted: the objects only one of them has, and for
// each object both have, every field whose values differ (a field set to
// null counts as absent). At most limit differences are listed per object
// (0: all). Nil means the two render the same objects.
func Diff(aName string, a []byte, bName string, b []byte, limit int) ([]string, error) {
	as, err := Parse(a)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", aName, err)
	}
	bs, err := Parse(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", bName, err)
	}
	return Objects(aName, as, bName, bs, limit), nil
}

// Objects is Diff of parsed renderings.
func Objects(aName string, as map[string]Object, bName string, bs map[string]Object, limit int) []string {
	var out []string
	for _, id := range slices.Sorted(maps.Keys(as)) {
		bo, ok := bs[id]
		if !ok {
			out = append(out, fmt.Sprintf("%s: only %s renders it", id, aName))
			continue
		}
		var fields []string
		fieldDiff(&fields, "", as[id], bo, aName, bName)
		if limit > 0 && len(fields) > limit {
			fields = append(fields[:limit], fmt.Sprintf("(%d more)", len(fields)-limit))
		}
		for _, f := range fields {
			out = append(out, id+": "+f)
		}
	}
	for _, id := range slices.Sorted(maps.Keys(bs)) {
		if _, ok := as[id]; !ok {
			out = append(out, fmt.Sprintf("%s: only %s renders it", id, bName))
		}
	}
	return out
}

func fieldDiff(out *[]string, path string, a, b any, aName, bName string) {
	am, aIsMap := a.(map[string]any)
	bm, bIsMap := b.(map[string]any)
	if aIsMap && bIsMap {
		keys := map[string]bool{}
		for k, v := range am {
			if v != nil {
				keys[k] = true
			}
		}
		for k, v := range bm {
			if v != nil {
				keys[k] = true
			}
		}
		for _, k := range slices.Sorted(maps.Keys(keys)) {
			fieldDiff(out, join(path, k), am[k], bm[k], aName, bName)
		}
		return
	}
	al, aIsList := a.([]any)
	bl, bIsList := b.([]any)
	if aIsList && bIsList {
		for i := range max(len(al), len(bl)) {
			p := path + "[" + strconv.Itoa(i) + "]"
			switch {
			case i >= len(al):
				*out = append(*out, fmt.Sprintf("%s: only %s has it: %s", p, bName, show(bl[i])))
			case i >= len(bl):
				*out = append(*out, fmt.Sprintf("%s: only %s has it: %s", p, aName, show(al[i])))
			default:
				fieldDiff(out, p, al[i], bl[i], aName, bName)
			}
		}
		return
	}
	if !reflect.DeepEqual(a, b) {
		if path == "" {
			path = "(the object)"
		}
		*out = append(*out, fmt.Sprintf("%s: %s %s, %s %s", path, aName, show(a), bName, show(b)))
	}
}

// join appends a key to a field path, quoting keys with dots
// (metadata.labels["app.kubernetes.io/name"]).
func join(path, key string) string {
	if strings.ContainsAny(key, "./[]") {
		return path + "[" + strconv.Quote(key) + "]"
	}
	if path == "" {
		return key
	}
	return path + "." + key
}

func show(v any) string {
	if v == nil {
		return "(absent)"
	}
	j, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	const max = 200
	if len(j) > max {
		return string(j[:max]) + "…"
	}
	return string(j)
}
