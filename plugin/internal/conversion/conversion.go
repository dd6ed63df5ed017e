// Package conversion holds what the converters of kubectl ipledger
// (packages metallb, cilium, kubevip) share: the IPPool they write, their
// warnings and result, the scaffold each embeds (Converter: collecting and
// sorting what it produces, reading what every source pool object has,
// finding pools that overlap), how an object is named in warnings,
// decoding unstructured data into typed values with errors that name the
// field, the fields nobody reads, and small address and formatting
// helpers. It does no I/O and knows no controller: each converter keeps its
// own mapping.
package conversion

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"regexp"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// Describe names an object as the warnings do: "Kind namespace/name".
func Describe(o *unstructured.Unstructured) string {
	kind := cmp.Or(o.GetKind(), "object")
	name := cmp.Or(o.GetName(), "(no name)")
	if ns := o.GetNamespace(); ns != "" {
		return kind + " " + ns + "/" + name
	}
	return kind + " " + name
}

// Decode converts unstructured data into a typed value through JSON, with
// an error that names the field whose type is wrong. nil decodes to nothing.
func Decode(in any, out any) error {
	if in == nil {
		return nil
	}
	b, err := json.Marshal(in)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(b, out); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) {
			return fmt.Errorf("field %s is a %s, expected %s", te.Field, te.Value, te.Type)
		}
		return err
	}
	return nil
}

// UnknownKeys returns the keys of m not in known, sorted.
func UnknownKeys(m map[string]any, known []string) []string {
	var out []string
	for k := range m {
		if !slices.Contains(known, k) {
			out = append(out, k)
		}
	}
	slices.Sort(out)
	return out
}

// JoinMap renders m as "k=v, k=v", sorted.
func JoinMap(m map[string]string) string {
	var kv []string
	for k, v := range m {
		kv = append(kv, k+"="+v)
	}
	slices.Sort(kv)
	return strings.Join(kv, ", ")
}

var namespaceName = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`)

// IsNamespaceName reports whether s is a valid namespace name (a DNS label).
func IsNamespaceName(s string) bool { return len(s) <= 63 && namespaceName.MatchString(s) }

// Later returns the later of two addresses, Earlier the earlier.
func Later(a, b netip.Addr) netip.Addr {
	if a.Less(b) {
		return b
	}
	return a
}

// Earlier returns the earlier of two addresses.
func Earlier(a, b netip.Addr) netip.Addr {
	if a.Less(b) {
		return a
	}
	return b
}
