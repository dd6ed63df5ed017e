// Package integration checks the migration from Cilium LB-IPAM against a
// real API server (lab/testenv, with ipledger's CRDs and admission policy
// and Cilium's CiliumLoadBalancerIPPool CRD): every pool the converter writes
// from Cilium's documented examples is accepted, and the steps of
// docs/migrating-from-cilium.md, run with kubectl, the plugin and the real
// watcher and ipam binaries, keep every address Cilium gave.
package integration

import (
	"context"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ipledger/ipledger/lab/testenv"
	"github.com/ipledger/ipledger/plugin/internal/cilium"
	"github.com/ipledger/ipledger/plugin/internal/migratetest"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// TestConvertedPoolsAreValid creates, for real, every IPPool converted from
// the testdata (Cilium's documented examples): the CRD's validation and the
// admission policy accept them all.
func TestConvertedPoolsAreValid(t *testing.T) {
	inputs, err := filepath.Glob("../testdata/*.yaml")
	if err != nil || len(inputs) == 0 {
		t.Fatalf("no testdata: %v", err)
	}
	if created := migratetest.CreateConverted(t, inputs, cilium.Convert); created < 5 {
		t.Errorf("only %d pools created; the testdata should convert to more", created)
	}
}

// TestMigrationKeepsCiliumAddresses runs docs/migrating-from-cilium.md:
// convert the pools with the plugin, run ipam beside Cilium with
// --require-lb-class, switch (Cilium's LB-IPAM turned off, the IPPools
// applied, ipam serving class-less Services), and checks that every Service
// keeps the address Cilium gave it, that Cilium's annotations are honoured,
// and that the rollback leaves every status as it is.
func TestMigrationKeepsCiliumAddresses(t *testing.T) {
	m := migratetest.New(t)
	env := m.Env
	ctx := context.Background()
	sysNS := testenv.SystemNamespace

	// Cilium as installed: its pool CRD and pools, and stand-ins for its
	// operator Deployment and cilium-config (no kubelet: nothing runs).
	m.Kubectl("apply", "--server-side", "-f", "../testdata/crds")
	m.WaitEstablished("crd/ciliumloadbalancerippools.cilium.io")
	m.Kubectl("apply", "-f", m.WriteFile("cilium.yaml", fmt.Sprintf(`apiVersion: cilium.io/v2
kind: CiliumLoadBalancerIPPool
metadata: {name: cil-auto}
spec:
  allowFirstLastIPs: "No"
  blocks: [{cidr: 10.94.0.0/28}]
---
apiVersion: cilium.io/v2
kind: CiliumLoadBalancerIPPool
metadata: {name: cil-tenant}
spec:
  blocks: [{start: 10.94.1.1, stop: 10.94.1.6}]
  serviceSelector:
    matchLabels: {io.kubernetes.service.namespace: %s}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: cilium-config, namespace: kube-system}
data: {enable-lb-ipam: "true", default-lb-service-ipam: lbipam}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: cilium-operator, namespace: kube-system}
spec:
  replicas: 1
  selector: {matchLabels: {app: cilium-operator}}
  template:
    metadata: {labels: {app: cilium-operator}}
    spec:
      containers: [{name: cilium-operator, image: quay.io/cilium/operator-generic:v1.18.0}]
`, m.NS)))
	t.Cleanup(func() {
		_, _ = env.Kubectl(context.Background(), "delete", "--ignore-not-found", "-f", filepath.Join(m.Dir, "cilium.yaml"))
	})
	m.ServedService("held", 80, nil, "10.94.0.1")
	m.ServedService("requested", 80, map[string]string{"lbipam.cilium.io/ips": "10.94.0.5"}, "10.94.0.5")
	m.ServedService("shared-a", 80, map[string]string{"lbipam.cilium.io/sharing-key": "web"}, "10.94.0.2")
	m.ServedService("shared-b", 443, map[string]string{"io.cilium/lb-ipam-sharing-key": "web"}, "10.94.0.2")
	m.ServedService("tenant", 80, nil, "10.94.1.1")
	ciliumIPs := map[string]string{"held": "10.94.0.1", "requested": "10.94.0.5", "shared-a": "10.94.0.2", "shared-b": "10.94.0.2", "tenant": "10.94.1.1"}

	// Step: convert the pools and review them.
	stdout, stderr, err := m.Plugin("", "migrate-cilium")
	if err != nil {
		t.Fatalf("migrate-cilium: %v\n%s", err, stderr)
	}
	for _, want := range []string{"name: cil-auto", "skipFirstLastIPs: true", "name: cil-tenant", "- " + m.NS, "10.94.1.1-10.94.1.6"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("migrate-cilium does not write %q:\n%s", want, stdout)
		}
	}
	m.WriteFile("ippools.yaml", stdout)
	// The same pools from the file, and from what kubectl prints (a List)
	// through stdin.
	if fromFile, _, err := m.Plugin("", "migrate-cilium", "-f", filepath.Join(m.Dir, "cilium.yaml")); err != nil || fromFile != stdout {
		t.Errorf("from the cluster:\n%s\nfrom the file (err %v):\n%s", stdout, err, fromFile)
	}
	listed := m.Kubectl("get", "ciliumloadbalancerippools", "-o", "yaml")
	if fromStdin, stderr, err := m.Plugin(listed, "migrate-cilium", "-f", "-"); err != nil || fromStdin != stdout {
		t.Errorf("from kubectl get -o yaml | migrate-cilium -f - (err %v, %s):\n%s\nwant\n%s", err, stderr, fromStdin, stdout)
	}

	// Step: ipam beside Cilium (components/require-lb-class), with a trial
	// pool of its own.
	m.RunBeside("10.94.9.0/30")
	for name, ip := range ciliumIPs {
		s := m.Service(name)
		if got := migratetest.Ingress(s); !slices.Equal(got, []string{ip}) || migratetest.Condition(s) != nil {
			t.Fatalf("beside Cilium, ipam touched %s: ingress %v, condition %+v", name, got, migratetest.Condition(s))
		}
	}

	// Step: switch. ipam stops, Cilium's LB-IPAM is turned off (its
	// operator restarted with enable-lb-ipam false), the IPPools are
	// applied, ipam serves class-less Services (a new term, which adopts
	// the addresses in status).
	m.Kubectl("-n", sysNS, "scale", "deploy/ipledger-ipam", "--replicas=0")
	m.StopIPAM()
	m.Kubectl("-n", "kube-system", "patch", "configmap", "cilium-config", "--type", "merge", "-p", `{"data":{"enable-lb-ipam":"false"}}`)
	m.Kubectl("-n", "kube-system", "rollout", "restart", "deploy/cilium-operator")
	m.Kubectl("apply", "-f", filepath.Join(m.Dir, "ippools.yaml"))
	m.Kubectl("apply", "--server-side", "-k", filepath.Join(env.Root, "deploy/kustomize/base"))
	if got := m.Kubectl("-n", "kube-system", "get", "configmap", "cilium-config", "-o", "jsonpath={.data.enable-lb-ipam}"); got != "false" {
		t.Fatalf("cilium-config enable-lb-ipam = %q after the switch", got)
	}
	m.IPAMArgs(false)
	m.StartIPAM("ipam-switched", false)
	wantPool := map[string]string{"held": "cil-auto", "requested": "cil-auto", "shared-a": "cil-auto", "shared-b": "cil-auto", "tenant": "cil-tenant"}
	m.WaitKept("Cilium", ciliumIPs, wantPool)
	m.Why("tenant", "Allocated", "10.94.1.1", "cil-tenant")

	// After the switch, Cilium's annotations on a new Service are honoured,
	// and cil-auto skips its first and last address as Cilium did.
	m.Kubectl("apply", "-n", m.NS, "-f", m.WriteFile("after.yaml", `apiVersion: v1
kind: Service
metadata:
  name: after
  annotations: {lbipam.cilium.io/ips: 10.94.0.9}
spec:
  type: LoadBalancer
  selector: {app: after}
  ports: [{port: 80}]
---
apiVersion: v1
kind: Service
metadata:
  name: first
  annotations: {lbipam.cilium.io/ips: 10.94.0.15}
spec:
  type: LoadBalancer
  selector: {app: first}
  ports: [{port: 80}]
`))
	testenv.Eventually(t, migratetest.Wait, func() error {
		after, first := m.Service("after"), m.Service("first")
		if got := migratetest.Ingress(after); !slices.Equal(got, []string{"10.94.0.9"}) {
			return fmt.Errorf("after: ingress %v, want 10.94.0.9 (lbipam.cilium.io/ips)", got)
		}
		if c := migratetest.Condition(first); c == nil || c.Reason != "RequestedIPNotInPool" || !strings.Contains(c.Message, "skipFirstLastIPs") {
			return fmt.Errorf("first: condition %+v, want RequestedIPNotInPool naming skipFirstLastIPs (10.94.0.15 is cil-auto's last address)", c)
		}
		return nil
	})

	// Rollback: ipam stopped, Cilium's LB-IPAM back; every status stays.
	before := m.Statuses(m.NS)
	m.Kubectl("-n", sysNS, "scale", "deploy/ipledger-ipam", "--replicas=0")
	m.StopIPAM()
	m.Kubectl("-n", "kube-system", "patch", "configmap", "cilium-config", "--type", "merge", "-p", `{"data":{"enable-lb-ipam":"true"}}`)
	m.Kubectl("-n", "kube-system", "rollout", "restart", "deploy/cilium-operator")
	m.DeleteConverted("cilium", []string{"cil-auto", "cil-tenant"}, "trial")
	if after := m.Statuses(m.NS); !maps.Equal(before, after) {
		t.Errorf("the rollback changed statuses:\nbefore %v\nafter  %v", before, after)
	}
	for name, ip := range ciliumIPs {
		if got := migratetest.Ingress(m.Service(name)); !slices.Equal(got, []string{ip}) {
			t.Errorf("after the rollback %s has %v, want %s", name, got, ip)
		}
	}
	if _, err := env.Dynamic.Resource(migratetest.PoolsGVR).Get(ctx, "cil-auto", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("IPPool cil-auto after the rollback: %v, want it deleted", err)
	}
	if n := len(m.Kubectl("get", "ciliumloadbalancerippools", "-o", "name")); n == 0 {
		t.Error("the rollback removed Cilium's pools; they stay")
	}
}
