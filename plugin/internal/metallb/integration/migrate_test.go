// Package integration checks the MetalLB migration against a real API server
// (lab/testenv, with ipledger's CRDs and admission policy): every pool the
// converter writes from MetalLB's examples is accepted, and the steps of
// docs/migrating-from-metallb.md, run with kubectl, the plugin and the real
// watcher and ipam binaries, keep every address MetalLB gave.
package integration

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ipledger/ipledger/lab/testenv"
	"github.com/ipledger/ipledger/plugin/internal/metallb"
	"github.com/ipledger/ipledger/plugin/internal/migratetest"
)

func TestMain(m *testing.M) { testenv.Main(m) }

const wait = migratetest.Wait

// TestConvertedPoolsAreValid creates, for real, every IPPool converted from
// the testdata (MetalLB's own examples): the CRD's validation and the
// admission policy accept them all.
func TestConvertedPoolsAreValid(t *testing.T) {
	inputs, err := filepath.Glob("../testdata/*.yaml")
	if err != nil || len(inputs) == 0 {
		t.Fatalf("no testdata: %v", err)
	}
	if created := migratetest.CreateConverted(t, inputs, metallb.Convert); created < 10 {
		t.Errorf("only %d pools created; the testdata should convert to more", created)
	}
}

// TestMigrationKeepsMetalLBAddresses runs docs/migrating-from-metallb.md:
// convert the pools with the plugin, run ipam beside MetalLB with
// --require-lb-class, switch (MetalLB's controller stopped, the IPPools
// applied, ipam serving class-less Services), and checks that every Service
// keeps the address MetalLB gave it, that MetalLB's annotations are honoured,
// and that the rollback leaves the statuses as they are.
func TestMigrationKeepsMetalLBAddresses(t *testing.T) {
	env := testenv.Get(t)
	ctx := context.Background()
	m := migratetest.New(t)

	// MetalLB as installed: its CRDs, pools and advertisement, and a stand-in
	// for its controller Deployment (no kubelet here: it never runs a Pod).
	m.Kubectl("apply", "--server-side", "-f", "../testdata/crds")
	m.WaitEstablished("crd/ipaddresspools.metallb.io", "crd/l2advertisements.metallb.io")
	if _, err := env.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "metallb-system"}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	m.WriteFile("metallb.yaml", `apiVersion: metallb.io/v1beta1
kind: IPAddressPool
metadata: {name: mlb-auto, namespace: metallb-system}
spec:
  addresses: [10.93.0.0/29]
---
apiVersion: metallb.io/v1beta1
kind: IPAddressPool
metadata: {name: mlb-named, namespace: metallb-system}
spec:
  addresses: [10.93.1.0-10.93.1.3]
  autoAssign: false
---
apiVersion: metallb.io/v1beta1
kind: L2Advertisement
metadata: {name: l2, namespace: metallb-system}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: controller, namespace: metallb-system}
spec:
  replicas: 1
  selector: {matchLabels: {app: metallb}}
  template:
    metadata: {labels: {app: metallb}}
    spec:
      containers: [{name: controller, image: quay.io/metallb/controller:v0.15.2}]
`)
	m.Kubectl("apply", "-f", filepath.Join(m.Dir, "metallb.yaml"))
	m.ServedService("held", 80, nil, "10.93.0.1")
	m.ServedService("requested", 80, map[string]string{"metallb.universe.tf/loadBalancerIPs": "10.93.0.5"}, "10.93.0.5")
	m.ServedService("named", 80, map[string]string{"metallb.universe.tf/address-pool": "mlb-named"}, "10.93.1.1")
	m.ServedService("shared-a", 80, map[string]string{"metallb.universe.tf/allow-shared-ip": "web"}, "10.93.0.2")
	m.ServedService("shared-b", 443, map[string]string{"metallb.universe.tf/allow-shared-ip": "web"}, "10.93.0.2")
	metallbIPs := map[string]string{"held": "10.93.0.1", "requested": "10.93.0.5", "named": "10.93.1.1", "shared-a": "10.93.0.2", "shared-b": "10.93.0.2"}

	// Step: convert the pools and review them.
	stdout, stderr, err := m.Plugin("", "migrate-metallb")
	if err != nil {
		t.Fatalf("migrate-metallb: %v\n%s", err, stderr)
	}
	if !strings.Contains(stderr, "Warning: L2Advertisement metallb-system/l2: not converted (it announces every IPAddressPool in its namespace)") {
		t.Errorf("stderr does not name the advertisement:\n%s", stderr)
	}
	// The same pools from the file (whose Deployment is only a warning).
	fromFile, _, err := m.Plugin("", "migrate-metallb", "-f", filepath.Join(m.Dir, "metallb.yaml"))
	if err != nil || stdout != fromFile {
		t.Errorf("from the cluster:\n%s\nfrom the file (err %v):\n%s", stdout, err, fromFile)
	}
	m.WriteFile("ippools.yaml", stdout)
	// And from what kubectl prints (a List), through stdin.
	listed := m.Kubectl("get", "ipaddresspools", "-n", "metallb-system", "-o", "yaml")
	if fromStdin, stderr, err := m.Plugin(listed, "migrate-metallb", "-f", "-"); err != nil || fromStdin != stdout {
		t.Errorf("from kubectl get -o yaml | migrate-metallb -f - (err %v, %s):\n%s\nwant\n%s", err, stderr, fromStdin, stdout)
	}

	// Step: ipam beside MetalLB (components/require-lb-class), with a trial
	// pool of its own that overlaps none of MetalLB's addresses.
	sysNS := testenv.SystemNamespace
	m.RunBeside("10.93.9.0/30")
	m.Why("trial", "Allocated", "10.93.9.")
	for name, ip := range metallbIPs {
		s := m.Service(name)
		if got := migratetest.Ingress(s); !slices.Equal(got, []string{ip}) || migratetest.Condition(s) != nil {
			t.Fatalf("beside MetalLB, ipam touched %s: ingress %v, condition %+v", name, got, migratetest.Condition(s))
		}
	}

	// Step: switch. MetalLB's controller stops allocating, the IPPools are
	// applied, ipam serves class-less Services (restarted without
	// --require-lb-class: a new term, which adopts the addresses in status).
	m.Kubectl("-n", sysNS, "scale", "deploy/ipledger-ipam", "--replicas=0")
	if err := m.IPAM.Stop(10 * time.Second); err != nil {
		t.Fatal(err)
	}
	m.Kubectl("-n", "metallb-system", "scale", "deploy/controller", "--replicas=0")
	m.Kubectl("apply", "-f", filepath.Join(m.Dir, "ippools.yaml"))
	m.Kubectl("apply", "--server-side", "-k", filepath.Join(env.Root, "deploy/kustomize/base"))
	m.IPAMArgs(false)
	m.StartIPAM("ipam-switched", false)
	wantPool := map[string]string{"held": "mlb-auto", "requested": "mlb-auto", "named": "mlb-named", "shared-a": "mlb-auto", "shared-b": "mlb-auto"}
	m.WaitKept("MetalLB", metallbIPs, wantPool)

	m.Why("named", "Allocated", "10.93.1.1", "mlb-named")

	// After the switch, MetalLB's annotations on a new Service are honoured.
	m.Kubectl("apply", "-n", m.NS, "-f", m.WriteFile("after.yaml", `apiVersion: v1
kind: Service
metadata:
  name: after
  annotations: {metallb.universe.tf/address-pool: mlb-named}
spec:
  type: LoadBalancer
  selector: {app: after}
  ports: [{port: 80}]
`))
	testenv.Eventually(t, wait, func() error {
		got := migratetest.Ingress(m.Service("after"))
		if len(got) != 1 || !strings.HasPrefix(got[0], "10.93.1.") || got[0] == "10.93.1.1" {
			return fmt.Errorf("after: ingress %v, want a free address of mlb-named (10.93.1.0-10.93.1.3, not 10.93.1.1)", got)
		}
		return nil
	})

	// Rollback: ipam stopped, MetalLB's controller back; the statuses stay.
	m.Kubectl("-n", sysNS, "scale", "deploy/ipledger-ipam", "--replicas=0")
	if err := m.IPAM.Stop(10 * time.Second); err != nil {
		t.Fatal(err)
	}
	m.Kubectl("-n", "metallb-system", "scale", "deploy/controller", "--replicas=1")
	for name, ip := range metallbIPs {
		if got := migratetest.Ingress(m.Service(name)); !slices.Equal(got, []string{ip}) {
			t.Errorf("after the rollback %s has %v, want %s", name, got, ip)
		}
	}
	m.DeleteConverted("metallb", []string{"mlb-auto", "mlb-named"}, "trial")
}
