package reference

import (
	"fmt"
	"sort"
	"strings"
	"testing"

	"github.com/ipledger/ipledger/pkg/convert"
)

// TestAnnotationReference: docs/reference/annotations.md is
// convert.CarriedAnnotations, the only annotations the watcher streams and
// so the only ones ipledger's controllers read.
func TestAnnotationReference(t *testing.T) {
	keys := make([]string, 0, len(convert.CarriedAnnotations))
	for k := range convert.CarriedAnnotations {
		keys = append(keys, k)
	}
	// By kind, then ipledger's own before other projects' spellings.
	sort.Slice(keys, func(i, j int) bool {
		a, b := convert.CarriedAnnotations[keys[i]], convert.CarriedAnnotations[keys[j]]
		if ka, kb := kind(a.On), kind(b.On); ka != kb {
			return ka < kb
		}
		if oi, oj := strings.HasPrefix(keys[i], "ipledger.io/"), strings.HasPrefix(keys[j], "ipledger.io/"); oi != oj {
			return oi
		}
		return keys[i] < keys[j]
	})
	var b strings.Builder
	b.WriteString(header("annotations", "pkg/convert's CarriedAnnotations") + "# Annotations\n\n" +
		"Every annotation ipledger reads. The watcher drops every other annotation before it streams an object, so\n" +
		"nothing else can change what ipam, endpoints or eipd do. MetalLB's, Cilium LB-IPAM's and kube-vip's\n" +
		"spellings are read for migration ([migrating-from-metallb.md](../migrating-from-metallb.md)).\n\n" +
		"| annotation | on | read by | meaning |\n|---|---|---|---|\n")
	for _, k := range keys {
		a := convert.CarriedAnnotations[k]
		fmt.Fprintf(&b, "| `%s` | %s | %s | %s |\n", k, a.On, a.ReadBy, cell(a.Meaning))
	}
	checkPage(t, "annotations.md", b.String())
}

// kind is the first kind an annotation is read on ("Service, GatewayClass":
// Service).
func kind(on string) string {
	k, _, _ := strings.Cut(on, ",")
	return k
}
