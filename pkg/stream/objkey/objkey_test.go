package objkey

import (
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
