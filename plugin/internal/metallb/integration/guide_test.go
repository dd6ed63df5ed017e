package integration

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/ipledger/ipledger/lab/testenv"
	"github.com/ipledger/ipledger/plugin/internal/migratetest"
)

// TestGuideWarnings holds two warnings of docs/migrating-from-metallb.md to
// the real ipam: two Services whose statuses show one address they may not
// share keep it only for the older (the younger gets a new address and an
// IPConflict Event); and ipam restarted with --require-lb-class over a
// ledger that holds class-less Services removes their addresses from their
// status (so a rollback keeps ipam stopped).
func TestGuideWarnings(t *testing.T) {
	m := migratetest.New(t)
	env := m.Env
	// Created in this order, "old" is never younger: same second, the name decides.
	m.ServedService("old", 80, nil, "10.95.0.1")
	m.ServedService("young", 80, nil, "10.95.0.1")
	m.Kubectl("apply", "-f", m.WriteFile("pool.yaml", "apiVersion: ipledger.io/v1alpha1\nkind: IPPool\nmetadata: {name: guide-warnings}\nspec:\n  addresses: [\"10.95.0.0/30\"]\n"))
	t.Cleanup(func() {
		// t.Context() is done by now.
		if _, err := env.Kubectl(context.Background(), "patch", "ippool", "guide-warnings", "--type=merge", "-p", `{"metadata":{"finalizers":null}}`); err != nil {
			t.Error(err)
		}
		if _, err := env.Kubectl(context.Background(), "delete", "ippool", "guide-warnings"); err != nil {
			t.Error(err)
		}
	})
	m.StartWatcher()

	m.StartIPAM("ipam-serving", false)
	testenv.Eventually(t, wait, func() error {
		old, young := migratetest.Ingress(m.Service("old")), migratetest.Ingress(m.Service("young"))
		if !slices.Equal(old, []string{"10.95.0.1"}) || len(young) != 1 || young[0] == "10.95.0.1" {
			return fmt.Errorf("old %v (want 10.95.0.1), young %v (want another address of the pool)", old, young)
		}
		return nil
	})
	evs := m.Kubectl("get", "events", "-n", m.NS, "--field-selector", "involvedObject.name=young,reason=IPConflict", "-o", "name")
	if evs == "" {
		t.Error("no IPConflict Event on the younger Service")
	}

	if err := m.IPAM.Stop(10 * time.Second); err != nil {
		t.Fatal(err)
	}
	m.StartIPAM("ipam-require-class", true)
	testenv.Eventually(t, wait, func() error {
		for _, name := range []string{"old", "young"} {
			if got := migratetest.Ingress(m.Service(name)); len(got) != 0 {
				return fmt.Errorf("%s still shows %v", name, got)
			}
		}
		return nil
	})
}
