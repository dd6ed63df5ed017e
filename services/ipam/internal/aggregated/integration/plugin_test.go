package integration

import (
	"context"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/ipledger/ipledger/pkg/testenv"
)

var (
	pluginOnce sync.Once
	pluginPath string
	pluginErr  error
)

// plugin builds kubectl-ipledger once.
func plugin(t testing.TB, env *testenv.Env) string {
	t.Helper()
	pluginOnce.Do(func() {
		pluginPath = filepath.Join(env.CP.Dir, "kubectl-ipledger")
		cmd := exec.CommandContext(context.Background(), "go", "build", "-o", pluginPath, "./plugin/cmd/kubectl-ipledger")
		cmd.Dir = env.Root
		if out, err := cmd.CombinedOutput(); err != nil {
			pluginErr = &buildError{out: string(out), err: err}
		}
	})
	if pluginErr != nil {
		t.Fatal(pluginErr)
	}
	return pluginPath
}

type buildError struct {
	out string
	err error
}

func (e *buildError) Error() string {
	return "go build kubectl-ipledger: " + e.err.Error() + "\n" + e.out
}

// TestPluginAsThemselves: kubectl ipledger with a person's own kubeconfig
// (a client certificate: no ServiceAccount, no --service-account, no
// token) reads and reserves through the aggregated API, attributed to the
// person, and prints what it prints from gRPC.
func TestPluginAsThemselves(t *testing.T) {
	env := testenv.Get(t)
	fake := serve(t, env)
	bind(t, env, "frank", "ipledger:operator")
	frank, err := env.CP.UserKubeconfig(t.TempDir(), "frank")
	if err != nil {
		t.Fatal(err)
	}
	bin := plugin(t, env)
	run := func(args ...string) (string, error) {
		out, err := exec.Command(bin, append([]string{"--kubeconfig", frank}, args...)...).CombinedOutput()
		return string(out), err
	}
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"allocations", "-A"}, []string{"shop", "web", "192.0.2.10", "bank", "192.0.2.11", "fd00::10"}},
		{[]string{"allocations", "-A", "--pool", "blue6"}, []string{"fd00::10"}},
		{[]string{"pools"}, []string{"blue", "3/256", "True"}},
		{[]string{"why", "svc/web", "-n", "shop"}, []string{"192.0.2.10"}},
		{[]string{"reserve", "192.0.2.60", "--note", "lab switch"}, []string{"192.0.2.60"}},
		{[]string{"release", "192.0.2.60"}, []string{"192.0.2.60"}},
	} {
		out, err := run(tc.args...)
		if err != nil {
			t.Errorf("kubectl ipledger %s: %v\n%s", strings.Join(tc.args, " "), err, out)
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(out, w) {
				t.Errorf("kubectl ipledger %s: no %q in\n%s", strings.Join(tc.args, " "), w, out)
			}
		}
		if slices.Contains(tc.args, "--pool") && strings.Contains(out, "192.0.2.10") {
			t.Errorf("--pool blue6 printed blue's 192.0.2.10:\n%s", out)
		}
	}
	if got := fake.record(); !slices.Equal(got, []string{"reserve 192.0.2.60 by frank", "release 192.0.2.60 by frank"}) {
		t.Errorf("ipam was called %q, want the reservation and release by frank", got)
	}
	// ipam's refusal reaches the person with its fix.
	if out, err := run("why", "svc/gone", "-n", "shop"); err == nil || !strings.Contains(out, "Service shop/gone not found") {
		t.Errorf("why a missing Service: %v\n%s", err, out)
	}
}
