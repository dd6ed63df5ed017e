package conversion

import (
	"net/netip"
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
