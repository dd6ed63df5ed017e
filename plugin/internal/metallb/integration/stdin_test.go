package integration

import (
	"strings"
	"testing"

	"github.com/ipledger/ipledger/plugin/internal/migratetest"
)

// TestMigrateMetalLBReportsWhatItLeftOut: a pool that cannot be converted is
// named on stderr and makes the command fail, after the others are printed.
func TestMigrateMetalLBReportsWhatItLeftOut(t *testing.T) {
	m := migratetest.New(t)
	in := `apiVersion: metallb.io/v1beta1
kind: IPAddressPool
metadata: {name: good, namespace: metallb-system}
spec: {addresses: [192.0.2.0/24]}
---
apiVersion: metallb.io/v1beta1
kind: IPAddressPool
metadata: {name: reversed, namespace: metallb-system}
spec: {addresses: [192.0.2.20-192.0.2.10]}
`
	stdout, stderr, err := m.Plugin(in, "migrate-metallb", "-f", "-")
	if err == nil || !strings.Contains(err.Error(), "1 IPAddressPool(s) not converted: IPAddressPool metallb-system/reversed") {
		t.Errorf("err = %v, want it to name the pool left out", err)
	}
	if !strings.Contains(stderr, `Warning: IPAddressPool metallb-system/reversed: spec.addresses[0]: not converted: "192.0.2.20-192.0.2.10" starts after it ends`) {
		t.Errorf("stderr does not say why:\n%s", stderr)
	}
	if !strings.Contains(stdout, "name: good") || strings.Contains(stdout, "reversed") {
		t.Errorf("stdout should hold the good pool only:\n%s", stdout)
	}
	if _, _, err := m.Plugin("", "migrate-metallb", "-f", "missing.yaml"); err == nil || !strings.Contains(err.Error(), "missing.yaml") {
		t.Errorf("a missing file: err = %v", err)
	}
}
