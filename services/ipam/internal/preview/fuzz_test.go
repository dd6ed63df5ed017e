package preview

import (
	"strings"
	"testing"
)

// FuzzParse: whatever bytes a caller sends, Parse returns an error or a
// named change, never panics; a change without problems carries a pool.
func FuzzParse(f *testing.F) {
	for _, seed := range []string{
		"apiVersion: ipledger.io/v1alpha1\nkind: IPPool\nmetadata: {name: p}\nspec: {addresses: [10.0.0.0/30]}\n",
		`{"apiVersion":"ipledger.io/v1alpha1","kind":"IPPool","metadata":{"name":"q"},"spec":{"addresses":["10.0.1.20-10.0.1.10"],"allocation":{"priority":"x"}}}`,
		"---\n---\napiVersion: ipledger.io/v1alpha1\nkind: IPPool\nmetadata: {name: a}\n---\nkind: List\n",
		"apiVersion: ipledger.io/v1alpha1\nkind: IPPool\nmetadata: {name: Bad_Name}\nspec: {allocation: {namespaceSelectors: [{matchExpressions: [{key: k, operator: In}]}]}}\n",
	} {
		f.Add([]byte(seed), false)
		f.Add([]byte(seed), true)
	}
	f.Fuzz(func(t *testing.T, manifest []byte, del bool) {
		c, err := Parse(manifest, del)
		if err != nil {
			return
		}
		if c.Name == "" || c.Delete != del {
			t.Fatalf("Parse accepted a change without a name or with the wrong delete: %+v", c)
		}
		if !del && len(c.Problems) == 0 && c.Pool == nil {
			t.Fatalf("a valid pool %s without its spec", c.Name)
		}
		for _, p := range c.Problems {
			if strings.TrimSpace(p) == "" {
				t.Fatalf("an empty problem for %s", c.Name)
			}
		}
	})
}
