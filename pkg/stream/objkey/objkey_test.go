package objkey

import (
	"strings"
	"testing"

	watcherv1 "github.com/ipledger/ipledger/proto/ipledger/watcher/v1"
)

func TestOf(t *testing.T) {
	for _, tc := range []struct{ ns, name, want string }{
		{"default", "web", "default/web"},
		{"", "blue", "blue"}, // cluster-scoped (IPPool, Node, Namespace)
	} {
		o := &watcherv1.Object{Meta: &watcherv1.ObjectMeta{Namespace: tc.ns, Name: tc.name}}
		if got := Of(o); got != tc.want {
			t.Errorf("Of(%q, %q) = %q, want %q", tc.ns, tc.name, got, tc.want)
		}
	}
}

// Compare orders objects exactly as their keys do, also where a
// namespace is a prefix of another ("a/x" sorts after "a-b/y").
func TestCompare(t *testing.T) {
	obj := func(ns, name string) *watcherv1.Object {
		return &watcherv1.Object{Meta: &watcherv1.ObjectMeta{Namespace: ns, Name: name}}
	}
	for _, tc := range []struct{ a, b *watcherv1.Object }{
		{obj("a", "x"), obj("a-b", "y")},
		{obj("a", "x"), obj("a", "x")},
		{obj("a", "x"), obj("a", "xy")},
		{obj("", "a"), obj("a", "b")},
		{obj("", "a/b"), obj("a", "b")},
		{obj("", "a/c"), obj("a", "b")},
		{obj("ns", ""), obj("ns", "a")},
		{obj("", ""), obj("", "a")},
	} {
		want := strings.Compare(Of(tc.a), Of(tc.b))
		if got := Compare(tc.a, tc.b); got != want {
			t.Errorf("Compare(%q, %q) = %d, want %d", Of(tc.a), Of(tc.b), got, want)
		}
		if got := Compare(tc.b, tc.a); got != -want {
			t.Errorf("Compare(%q, %q) = %d, want %d", Of(tc.b), Of(tc.a), got, -want)
		}
	}
}

func FuzzCompare(f *testing.F) {
	f.Add("a", "x", "a-b", "y")
	f.Add("", "a/b", "a", "b")
	f.Fuzz(func(t *testing.T, ans, an, bns, bn string) {
		a := &watcherv1.Object{Meta: &watcherv1.ObjectMeta{Namespace: ans, Name: an}}
		b := &watcherv1.Object{Meta: &watcherv1.ObjectMeta{Namespace: bns, Name: bn}}
		if got, want := Compare(a, b), strings.Compare(Of(a), Of(b)); got != want {
			t.Fatalf("Compare(%q, %q) = %d, want %d", Of(a), Of(b), got, want)
		}
	})
}
