package commands

import (
	"strings"
	"testing"

	"k8s.io/cli-runtime/pkg/genericiooptions"
)

func TestServiceName(t *testing.T) {
	for _, tc := range []struct{ arg, want, err string }{
		{"svc/web", "web", ""},
		{"service/web", "web", ""},
		{"services/web", "web", ""},
		{"web", "web", ""},
		{"deploy/web", "", "why explains Services"},
		{"svc/", "", "write svc/NAME"},
		{"svc/shop/web", "", "the namespace with -n"},
	} {
		got, err := ServiceName(tc.arg)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%q: error %v, want %q", tc.arg, err, tc.err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("%q = %q, %v; want %q", tc.arg, got, err, tc.want)
		}
	}
}

// Every command explains itself: --help has a description and examples.
func TestEveryCommandHasHelp(t *testing.T) {
	root := NewRoot(genericiooptions.NewTestIOStreamsDiscard())
	for _, c := range root.Commands() {
		if c.Name() == "help" || c.Name() == "completion" {
			continue
		}
		if c.Short == "" || c.Long == "" || !strings.Contains(c.Example, "kubectl ipledger "+c.Name()) {
			t.Errorf("%s: want Short, Long and an Example of kubectl ipledger %s", c.Name(), c.Name())
		}
	}
}
