// Package output prints kubectl-ipledger's answers as kubectl does: tables
// through cli-runtime's table printer (wide columns with -o wide), and
// -o json|yaml as the API's own JSON (protojson, the names grpcurl shows).
package output

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/cli-runtime/pkg/printers"
	"sigs.k8s.io/yaml"
)

// Format is the value of -o.
type Format string

// The formats; Table is the default (no -o).
const (
	Table Format = ""
	Wide  Format = "wide"
	JSON  Format = "json"
	YAML  Format = "yaml"
)

// Parse checks -o against the formats a command offers.
func Parse(s string, allowed ...Format) (Format, error) {
	f := Format(s)
	if slices.Contains(allowed, f) {
		return f, nil
	}
	var names []string
	for _, a := range allowed {
		if a != Table {
			names = append(names, string(a))
		}
	}
	return "", fmt.Errorf("-o %s: unknown output format; use one of %s (or none for the default)", s, strings.Join(names, ", "))
}

// Message writes m as JSON or YAML. protojson varies its whitespace from
// build to build on purpose, so its compact output is indented here: the
// same answer prints the same bytes, for scripts that diff it.
func Message(w io.Writer, f Format, m proto.Message) error {
	b, err := protojson.Marshal(m)
	if err != nil {
		return err
	}
	if f == YAML {
		if b, err = yaml.JSONToYAML(b); err != nil {
			return err
		}
		_, err = w.Write(b)
		return err
	}
	var out bytes.Buffer
	if err := json.Indent(&out, b, "", "  "); err != nil {
		return err
	}
	out.WriteByte('\n')
	_, err = out.WriteTo(w)
	return err
}

// PrintTable writes t as kubectl get does; wide shows the columns of
// priority > 0 too.
func PrintTable(w io.Writer, t *metav1.Table, wide bool) error {
	return printers.NewTablePrinter(printers.PrintOptions{Wide: wide}).PrintObj(t, w)
}
