package conversion

import (
	"net/netip"
	"slices"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

func TestHelpers(t *testing.T) {
	o := &unstructured.Unstructured{}
	o.SetKind("IPAddressPool")
	o.SetNamespace("metallb-system")
	o.SetName("first")
	if got := Describe(o); got != "IPAddressPool metallb-system/first" {
		t.Errorf("Describe = %q", got)
	}
	if got := Describe(&unstructured.Unstructured{}); got != "object (no name)" {
		t.Errorf("Describe(empty) = %q", got)
	}
	var spec struct {
		Priority int `json:"priority"`
	}
	if err := Decode(map[string]any{"priority": "high"}, &spec); err == nil || err.Error() != "field priority is a string, expected int" {
		t.Errorf("Decode of a string into an int: %v", err)
	}
	if err := Decode(nil, &spec); err != nil {
		t.Errorf("Decode(nil): %v", err)
	}
	if got := UnknownKeys(map[string]any{"b": 1, "a": 1, "known": 1}, []string{"known"}); len(got) != 2 || got[0] != "a" {
		t.Errorf("UnknownKeys = %v", got)
	}
	if got := JoinMap(map[string]string{"b": "2", "a": "1"}); got != "a=1, b=2" {
		t.Errorf("JoinMap = %q", got)
	}
	for s, want := range map[string]bool{"prod": true, "Prod": false, "-x": false, "": false} {
		if IsNamespaceName(s) != want {
			t.Errorf("IsNamespaceName(%q) != %v", s, want)
		}
	}
	a, b := netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("10.0.0.2")
	if Later(a, b) != b || Earlier(a, b) != a || Later(b, a) != b || Earlier(b, a) != a {
		t.Error("Later/Earlier")
	}
}

func TestOverlaps(t *testing.T) {
	pool := func(name string, addrs ...string) IPPool {
		p := NewIPPool(name, "test", "object "+name)
		p.Spec.Addresses = addrs
		return p
	}
	tests := []struct {
		name  string
		pools []IPPool
		want  []Overlap
	}{
		{name: "apart", pools: []IPPool{pool("a", "10.0.0.0/24"), pool("b", "10.0.1.0-10.0.1.9")}},
		{name: "adjacent ranges do not overlap", pools: []IPPool{pool("a", "10.0.0.0-10.0.0.9"), pool("b", "10.0.0.10-10.0.0.20")}},
		{name: "families apart", pools: []IPPool{pool("a", "0.0.0.0/0"), pool("b", "::/0")}},
		{name: "range inside a CIDR: the later start is shared", pools: []IPPool{pool("a", "10.0.0.0/24"), pool("b", "10.0.0.5-10.0.0.9")},
			want: []Overlap{{Later: 1, Earlier: 0, Shared: netip.MustParseAddr("10.0.0.5")}}},
		{name: "first shared address found, in the later pool's order", pools: []IPPool{pool("a", "10.0.0.8/29", "10.0.0.0/29"), pool("b", "10.0.0.4-10.0.0.12")},
			want: []Overlap{{Later: 1, Earlier: 0, Shared: netip.MustParseAddr("10.0.0.8")}}},
		{name: "every pair, by later then earlier", pools: []IPPool{pool("a", "10.0.0.0/24"), pool("b", "10.0.0.0/25"), pool("c", "10.0.0.128/25")},
			want: []Overlap{
				{Later: 1, Earlier: 0, Shared: netip.MustParseAddr("10.0.0.0")},
				{Later: 2, Earlier: 0, Shared: netip.MustParseAddr("10.0.0.128")},
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Overlaps(tt.pools); !slices.Equal(got, tt.want) {
				t.Errorf("Overlaps = %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestConverterResultOrder(t *testing.T) {
	var c Converter
	c.Pools = []IPPool{NewIPPool("b", "test", "Kind b"), NewIPPool("a", "test", "Kind a")}
	c.Warn("Kind b", "spec", "first of b")
	c.Warn("Kind a", "", "a")
	c.Warn("Kind b", "", "second of b")
	c.NotConverted = []string{"Kind z", "Kind c"}
	var seen []string
	res := c.Result(func() {
		for _, p := range c.Pools {
			seen = append(seen, p.Metadata.Name)
		}
		c.Warn("Kind a", "", "from the check")
	})
	if !slices.Equal(seen, []string{"a", "b"}) {
		t.Errorf("the check saw the pools %v, want them sorted", seen)
	}
	var got []string
	for _, w := range res.Warnings {
		got = append(got, w.String())
	}
	want := []string{"Kind a: a", "Kind a: from the check", "Kind b: spec: first of b", "Kind b: second of b"}
	if !slices.Equal(got, want) || !slices.Equal(res.NotConverted, []string{"Kind c", "Kind z"}) || res.Pools[0].Metadata.Name != "a" {
		t.Errorf("Result = %v, %v, pools %v; want warnings %v, sorted objects and pools", got, res.NotConverted, res.Pools, want)
	}
}

func TestAddPool(t *testing.T) {
	obj := func(name string) *unstructured.Unstructured {
		o := &unstructured.Unstructured{}
		o.SetKind("Pool")
		o.SetNamespace("ns")
		o.SetName(name)
		return o
	}
	convert := func(o *unstructured.Unstructured) (IPPool, bool) {
		return NewIPPool(o.GetName(), "test", Describe(o)), o.GetName() != "bad"
	}
	var c Converter
	for _, o := range []*unstructured.Unstructured{obj("a"), obj("bad"), obj("a"), obj("bad"), obj("b")} {
		c.AddPool(o, "; rename one", convert)
	}
	var names []string
	for _, p := range c.Pools {
		names = append(names, p.Metadata.Name)
	}
	if !slices.Equal(names, []string{"a", "b"}) {
		t.Errorf("pools %v, want a and b once each", names)
	}
	if !slices.Equal(c.NotConverted, []string{"Pool ns/bad", "Pool ns/a", "Pool ns/bad"}) {
		t.Errorf("not converted %v, want bad twice (it never became a pool) and the second a", c.NotConverted)
	}
	want := []Warning{{Object: "Pool ns/a", Field: "metadata.name", Message: `not converted: Pool ns/a already becomes IPPool "a"; rename one`}}
	if !slices.Equal(c.Warnings, want) {
		t.Errorf("warnings %+v, want %+v", c.Warnings, want)
	}
}
