// Package reference generates ipledger's reference pages (docs/reference/)
// from the code they describe — the CRDs' schemas, the binaries' --help, the
// annotation table of pkg/convert — so that a test can fail when a page
// drifts from the code: `go test ./test/e2e -run ReferencePages -update`
// rewrites them. Its own tests are the checks that need nothing built: every
// CRD field described, every alert with a runbook.
package reference

import (
	"fmt"
	"sort"
	"strings"
)

// Field is one field of a CRD's schema, by its path as `kubectl explain`
// takes it (items of an array are the array's path).
type Field struct {
	Path        string
	Type        string
	Required    bool
	Default     string
	Description string
}

// CRDFields walks a CRD version's openAPIV3Schema (as decoded from YAML)
// and returns every field below the root, sorted by path. The items of an
// array and the values of a map are not fields of their own: their
// properties are the array's or map's sub-fields.
func CRDFields(schema map[string]any) []Field {
	var out []Field
	walkProperties("", schema, &out)
	sort.Slice(out, func(i, j int) bool { return out[i].Path < out[j].Path })
	return out
}

func walkProperties(prefix string, schema map[string]any, out *[]Field) {
	props, _ := schema["properties"].(map[string]any)
	required := map[string]bool{}
	if rs, ok := schema["required"].([]any); ok {
		for _, r := range rs {
			required[fmt.Sprint(r)] = true
		}
	}
	for name, v := range props {
		s, _ := v.(map[string]any)
		path := name
		if prefix != "" {
			path = prefix + "." + name
		}
		f := Field{Path: path, Type: typeOf(s), Required: required[name], Description: oneLine(s["description"])}
		if path == "metadata" && f.Description == "" {
			f.Description = "Standard object metadata (ObjectMeta): name, labels, annotations."
		}
		if d, ok := s["default"]; ok {
			f.Default = fmt.Sprint(d)
		}
		*out = append(*out, f)
		walkProperties(path, s, out)
		if items, ok := s["items"].(map[string]any); ok {
			walkProperties(path, items, out)
		}
	}
}

// typeOf is a schema's type as kubectl explain prints it: []T for arrays,
// map[string]T for maps, with an enum's values.
func typeOf(s map[string]any) string {
	t, _ := s["type"].(string)
	switch t {
	case "array":
		items, _ := s["items"].(map[string]any)
		return "[]" + typeOf(items)
	case "object":
		if ap, ok := s["additionalProperties"].(map[string]any); ok {
			return "map[string]" + typeOf(ap)
		}
	}
	if enum, ok := s["enum"].([]any); ok {
		vals := make([]string, len(enum))
		for i, e := range enum {
			vals[i] = fmt.Sprint(e)
		}
		t += " (" + strings.Join(vals, ", ") + ")"
	}
	return t
}

func oneLine(v any) string {
	s, _ := v.(string)
	return strings.Join(strings.Fields(s), " ")
}

// CRDPage is the markdown reference of one CRD's fields.
func CRDPage(kind, group, version string, fields []Field) string {
	var b strings.Builder
	fmt.Fprintf(&b, "## %s (%s/%s)\n\n", kind, group, version)
	fmt.Fprintf(&b, "`kubectl explain %s.<field>` prints the same descriptions.\n\n", strings.ToLower(kind))
	b.WriteString("| field | type | required | default | description |\n|---|---|---|---|---|\n")
	for _, f := range fields {
		req := ""
		if f.Required {
			req = "yes"
		}
		def := ""
		if f.Default != "" {
			def = "`" + f.Default + "`"
		}
		fmt.Fprintf(&b, "| `%s` | %s | %s | %s | %s |\n", f.Path, cell(f.Type), req, def, cell(f.Description))
	}
	return b.String()
}

// cell escapes what would end a markdown table cell.
func cell(s string) string { return strings.ReplaceAll(s, "|", `\|`) }
