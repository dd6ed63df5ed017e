package integration

import (
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/ipledger/ipledger/pkg/testenv"
)

func TestClaimsTmp(t *testing.T) {
	env := testenv.Get(t)
	m := &migration{t: t, env: env, ns: env.Namespace(t, nil), dir: t.TempDir()}
	m.metallbService("old", "10.95.0.1", 80, nil)
	time.Sleep(1100 * time.Millisecond) // creation timestamps have 1s resolution
	m.metallbService("young", "10.95.0.1", 80, nil)
	m.kubectl("apply", "-f", writeFile(t, m.dir, "p.yaml", "apiVersion: ipledger.io/v1alpha1\nkind: IPPool\nmetadata: {name: claims}\nspec:\n  addresses: [\"10.95.0.0/29\"]\n"))
	_ = filepath.Join
	m.watcher = freePort(t)
	testenv.StartProcess(t, "watcher", env.Binary(t, "watcher"), nil,
		"--kubeconfig", env.CP.KubeconfigPath, "--grpc-addr", m.watcher, "--grpc-plaintext", "--namespace", testenv.SystemNamespace,
		"--ops-addr", freePort(t), "--log-format", "text")
	token, _ := env.ServiceAccountToken(t.Context(), testenv.SystemNamespace, "ipledger-ipam")
	m.kubeconfig, m.ipamToken = env.KubeconfigFor(t, token), env.TokenFile(t, testenv.SystemNamespace, "ipledger-ipam")
	m.startIPAM("ipam-c1", false)
	testenv.Eventually(t, wait, func() error {
		if c := condition(m.service("young")); c == nil || c.Status != "True" {
			return fmt.Errorf("young %v", c)
		}
		return nil
	})
	t.Logf("CLAIM conflict: old=%v young=%v", ingress(m.service("old")), ingress(m.service("young")))
	m.ipam.Stop(10 * time.Second)
	m.startIPAM("ipam-c2", true)
	testenv.Eventually(t, wait, func() error {
		if len(ingress(m.service("old"))) != 0 {
			return fmt.Errorf("old still %v", ingress(m.service("old")))
		}
		return nil
	})
	t.Logf("CLAIM rollback: old=%v young=%v cond=%v", ingress(m.service("old")), ingress(m.service("young")), condition(m.service("old")))
}
