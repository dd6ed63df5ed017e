package aggregated

import (
	"reflect"
	"strings"

	generatedopenapi "k8s.io/apiextensions-apiserver/pkg/generated/openapi"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	openapicommon "k8s.io/kube-openapi/pkg/common"
	"k8s.io/kube-openapi/pkg/validation/spec"

	"github.com/ipledger/ipledger/pkg/ipamapi"
)

// definitions are the OpenAPI models the generic API server publishes and
// builds its field managers from: meta/v1's (as generated for
// apiextensions-apiserver) and ipamapi's, derived from the Go types' JSON
// fields. With them kubectl validates a Reservation it creates (without,
// it would look for a CRD) and `kubectl explain` lists the fields.
func definitions(ref openapicommon.ReferenceCallback) map[string]openapicommon.OpenAPIDefinition {
	defs := generatedopenapi.GetOpenAPIDefinitions(ref)
	for _, obj := range []any{
		ipamapi.Allocation{}, ipamapi.AllocationList{}, ipamapi.Pool{}, ipamapi.PoolList{},
		ipamapi.Explanation{}, ipamapi.ExplanationList{}, ipamapi.Reservation{}, ipamapi.ReservationList{},
		ipamapi.PoolPreview{}, ipamapi.HistoryQuery{}, ipamapi.LocalHistoryQuery{},
	} {
		t := reflect.TypeOf(obj)
		deps := map[string]bool{}
		s := schemaOf(t, ref, deps)
		def := openapicommon.OpenAPIDefinition{Schema: s}
		for d := range deps {
			def.Dependencies = append(def.Dependencies, d)
		}
		defs[obj.(interface{ OpenAPIModelName() string }).OpenAPIModelName()] = def
	}
	return defs
}

var (
	objectMeta = reflect.TypeOf(metav1.ObjectMeta{})
	listMeta   = reflect.TypeOf(metav1.ListMeta{})
)

// schemaOf is the structural schema of t's JSON form; meta/v1's
// ObjectMeta and ListMeta are referenced (and recorded in deps).
func schemaOf(t reflect.Type, ref openapicommon.ReferenceCallback, deps map[string]bool) spec.Schema {
	switch t {
	case objectMeta, listMeta:
		name := metav1.ObjectMeta{}.OpenAPIModelName()
		if t == listMeta {
			name = metav1.ListMeta{}.OpenAPIModelName()
		}
		deps[name] = true
		return spec.Schema{SchemaProps: spec.SchemaProps{Ref: ref(name)}}
	}
	switch t.Kind() {
	case reflect.Pointer:
		return schemaOf(t.Elem(), ref, deps)
	case reflect.String:
		return typed("string")
	case reflect.Bool:
		return typed("boolean")
	case reflect.Int32, reflect.Int64, reflect.Int:
		s := typed("integer")
		s.Format = "int" + map[reflect.Kind]string{reflect.Int32: "32", reflect.Int64: "64", reflect.Int: "64"}[t.Kind()]
		return s
	case reflect.Slice:
		item := schemaOf(t.Elem(), ref, deps)
		s := typed("array")
		s.Items = &spec.SchemaOrArray{Schema: &item}
		return s
	case reflect.Struct:
		s := typed("object")
		s.Properties = map[string]spec.Schema{}
		addFields(&s, t, ref, deps)
		return s
	}
	return spec.Schema{}
}

func addFields(s *spec.Schema, t reflect.Type, ref openapicommon.ReferenceCallback, deps map[string]bool) {
	for i := range t.NumField() {
		f := t.Field(i)
		name, opts, _ := strings.Cut(f.Tag.Get("json"), ",")
		if f.Anonymous && strings.Contains(opts, "inline") || f.Anonymous && name == "" {
			addFields(s, f.Type, ref, deps) // TypeMeta: apiVersion, kind
			continue
		}
		if name == "" || name == "-" || !f.IsExported() {
			continue
		}
		s.Properties[name] = schemaOf(f.Type, ref, deps)
	}
}

func typed(t string) spec.Schema {
	return spec.Schema{SchemaProps: spec.SchemaProps{Type: []string{t}}}
}
