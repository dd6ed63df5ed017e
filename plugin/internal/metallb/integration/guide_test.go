package integration

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/ipledger/ipledger/pkg/testenv"
)

// TestGuideWarnings holds two warnings of docs/migrating-from-metallb.md to
// the real ipam: two Services whose statuses show one address they may not
// share keep it only for the older (the younger gets a new address and an
// IPConflict Event); and ipam restarted with --require-lb-class over a
// ledger that holds class-less Services removes their addresses from their
// status (so a rollback keeps ipam stopped).
func TestGuideWarnings(t *testing.T) {
	env := testenv.Get(t)
	sysNS := testenv.SystemNamespace
	m := &migration{t: t, env: env, ns: env.Namespace(t, nil), dir: t.TempDir()}
	// Created in this order, "old" is never younger: same second, the name decides.
	m.metallbService("old", "10.95.0.1", 80, nil)
	m.metallbService("young", "10.95.0.1", 80, nil)
	m.kubectl("apply", "-f", writeFile(t, m.dir, "pool.yaml", "apiVersion: ipledger.io/v1alpha1\nkind: IPPool\nmetadata: {name: guide-warnings}\nspec:\n  addresses: [\"10.95.0.0/30\"]\n"))
	t.Cleanup(func() {
		// t.Context() is done by now.
		if _, err := env.Kubectl(context.Background(), "patch", "ippool", "guide-warnings", "--type=merge", "-p", `{"metadata":{"finalizers":null}}`); err != nil {
			t.Error(err)
		}
		if _, err := env.Kubectl(context.Background(), "delete", "ippool", "guide-warnings"); err != nil {
			t.Error(err)
		}
	})
	m.watcher = testenv.FreeAddr(t)
	testenv.StartProcess(t, "watcher", env.Binary(t, "watcher"), nil,
		"--kubeconfig", env.CP.KubeconfigPath, "--grpc-addr", m.watcher, "--grpc-plaintext", "--namespace", sysNS,
		"--ops-addr", testenv.FreeAddr(t), "--log-format", "text")
	token, err := env.ServiceAccountToken(t.Context(), sysNS, "ipledger-ipam")
	if err != nil {
		t.Fatal(err)
	}
	m.kubeconfig, m.ipamToken = env.KubeconfigFor(t, token), env.TokenFile(t, sysNS, "ipledger-ipam")

	m.startIPAM("ipam-serving", false)
	testenv.Eventually(t, wait, func() error {
		old, young := ingress(m.service("old")), ingress(m.service("young"))
		if !slices.Equal(old, []string{"10.95.0.1"}) || len(young) != 1 || young[0] == "10.95.0.1" {
			return fmt.Errorf("old %v (want 10.95.0.1), young %v (want another address of the pool)", old, young)
		}
		return nil
	})
	evs := m.kubectl("get", "events", "-n", m.ns, "--field-selector", "involvedObject.name=young,reason=IPConflict", "-o", "name")
	if evs == "" {
		t.Error("no IPConflict Event on the younger Service")
	}

	if err := m.ipam.Stop(10 * time.Second); err != nil {
		t.Fatal(err)
	}
	m.startIPAM("ipam-require-class", true)
	testenv.Eventually(t, wait, func() error {
		for _, name := range []string{"old", "young"} {
			if got := ingress(m.service(name)); len(got) != 0 {
				return fmt.Errorf("%s still shows %v", name, got)
			}
		}
		return nil
	})
}
