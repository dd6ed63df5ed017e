// Package integration checks the migration from kube-vip-cloud-provider
// against a real API server (lab/testenv, with ipledger's CRDs and
// admission policy): every pool the converter writes from
// kube-vip-cloud-provider's documented examples is accepted, and the steps
// of docs/migrating-from-kube-vip.md, run with kubectl, the plugin and the
// real watcher and ipam binaries, keep every address kube-vip gave.
package integration

import (
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ipledger/ipledger/lab/testenv"
	"github.com/ipledger/ipledger/plugin/internal/kubevip"
	"github.com/ipledger/ipledger/plugin/internal/migratetest"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// TestConvertedPoolsAreValid creates, for real, every IPPool converted from
// the testdata (kube-vip-cloud-provider's documented examples): the CRD's
// validation and the admission policy accept them all, the global pool's
// NotIn namespace selector and skip-end-ips' exclusions included.
func TestConvertedPoolsAreValid(t *testing.T) {
	inputs, err := filepath.Glob("../testdata/*.yaml")
	if err != nil || len(inputs) == 0 {
		t.Fatalf("no testdata: %v", err)
	}
	inputs = append(inputs, writeConfigMap(t, "  cidr-a: 10.0.0.8/29,2001:db8::/64\n  skip-end-ips-in-cidr: \"true\"\n  range-global: 10.0.1.1-10.0.1.9\n"))
	if created := migratetest.CreateConverted(t, inputs, kubevip.Convert); created < 10 {
		t.Errorf("only %d pools created; the testdata should convert to more", created)
	}
}

func writeConfigMap(t *testing.T, data string) string {
	p := filepath.Join(t.TempDir(), "kubevip.yaml")
	if err := os.WriteFile(p, []byte("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: kubevip, namespace: kube-system}\ndata:\n"+data), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// servedService creates a class-less LoadBalancer Service as
// kube-vip-cloud-provider leaves it (kube-vip.io/loadbalancerIPs, the copy
// in spec.loadBalancerIP, its implementation label, written under its field
// manager) and the status kube-vip wrote.
func servedService(t *testing.T, env *testenv.Env, ns, name string, port int32, ip string) {
	ctx := context.Background()
	s := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: map[string]string{"implementation": "kube-vip"},
			Annotations: map[string]string{"kube-vip.io/loadbalancerIPs": ip}},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, Selector: map[string]string{"app": name}, LoadBalancerIP: ip,
			Ports: []corev1.ServicePort{{Name: "p", Port: port, Protocol: corev1.ProtocolTCP}}},
	}
	s, err := env.Client.CoreV1().Services(ns).Create(ctx, s, metav1.CreateOptions{FieldManager: "kube-vip-cloud-provider"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = env.Client.CoreV1().Services(ns).Delete(context.Background(), name, metav1.DeleteOptions{})
	})
	s.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: ip}}
	if _, err := env.Client.CoreV1().Services(ns).UpdateStatus(ctx, s, metav1.UpdateOptions{FieldManager: "kube-vip"}); err != nil {
		t.Fatal(err)
	}
}

// TestMigrationKeepsKubeVIPAddresses runs docs/migrating-from-kube-vip.md:
// convert the kubevip ConfigMap with the plugin, run ipam beside
// kube-vip-cloud-provider with --require-lb-class, give the Services that
// share an address a key, switch (kube-vip-cloud-provider scaled to 0, the
// IPPools applied, ipam serving class-less Services), and checks that every
// Service keeps the address kube-vip gave it, that kube-vip.io/loadbalancerIPs
// is honoured on a new Service, and that the rollback leaves every status
// as it is.
func TestMigrationKeepsKubeVIPAddresses(t *testing.T) {
	m := migratetest.New(t)
	env := m.Env
	ctx := context.Background()
	sysNS := testenv.SystemNamespace
	other := env.Namespace(t, nil)

	// kube-vip-cloud-provider as installed: its ConfigMap and a stand-in
	// for its Deployment (no kubelet: nothing runs).
	m.Kubectl("apply", "-f", m.WriteFile("kube-vip.yaml", fmt.Sprintf(`apiVersion: v1
kind: ConfigMap
metadata: {name: kubevip, namespace: kube-system}
data:
  cidr-%[1]s: 10.95.0.0/28
  range-global: 10.95.1.10-10.95.1.20
  allow-share-%[1]s: "true"
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: kube-vip-cloud-provider, namespace: kube-system}
spec:
  replicas: 1
  selector: {matchLabels: {app: kube-vip}}
  template:
    metadata: {labels: {app: kube-vip}}
    spec:
      containers: [{name: kube-vip-cloud-provider, image: ghcr.io/kube-vip/kube-vip-cloud-provider:v0.0.12}]
`, m.NS)))
	t.Cleanup(func() {
		_, _ = env.Kubectl(context.Background(), "delete", "--ignore-not-found", "-f", filepath.Join(m.Dir, "kube-vip.yaml"))
	})
	servedService(t, env, m.NS, "plain", 80, "10.95.0.1")
	servedService(t, env, m.NS, "shared-a", 80, "10.95.0.2") // allow-share: ports differ
	servedService(t, env, m.NS, "shared-b", 443, "10.95.0.2")
	servedService(t, env, other, "global", 80, "10.95.1.10")
	kubeVIPIPs := map[string]string{m.NS + "/plain": "10.95.0.1", m.NS + "/shared-a": "10.95.0.2", m.NS + "/shared-b": "10.95.0.2", other + "/global": "10.95.1.10"}
	wantPool := map[string]string{m.NS + "/plain": "kube-vip-" + m.NS, m.NS + "/shared-a": "kube-vip-" + m.NS, m.NS + "/shared-b": "kube-vip-" + m.NS,
		other + "/global": "kube-vip-global"}
	each := func(f func(ns, name, ip string)) {
		for key, ip := range kubeVIPIPs {
			ns, name, _ := strings.Cut(key, "/")
			f(ns, name, ip)
		}
	}

	// Step: convert the configuration and review it.
	stdout, stderr, err := m.Plugin("", "migrate-kube-vip")
	if err != nil {
		t.Fatalf("migrate-kube-vip: %v\n%s", err, stderr)
	}
	for _, want := range []string{"name: kube-vip-" + m.NS, "name: kube-vip-global", "10.95.1.10-10.95.1.20", "operator: NotIn", "avoidBuggyIPs: true"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("migrate-kube-vip does not write %q:\n%s", want, stdout)
		}
	}
	if !strings.Contains(stderr, "allow-share-"+m.NS+": not carried over") {
		t.Errorf("migrate-kube-vip does not warn about allow-share:\n%s", stderr)
	}
	m.WriteFile("ippools.yaml", stdout)
	// The same pools from the file (its Deployment warned about), and from
	// what kubectl prints, through stdin.
	fromFile, fileErr, err := m.Plugin("", "migrate-kube-vip", "-f", filepath.Join(m.Dir, "kube-vip.yaml"))
	if err != nil || fromFile != stdout || !strings.Contains(fileErr, "Deployment kube-system/kube-vip-cloud-provider: not converted: not a ConfigMap") {
		t.Errorf("from the cluster:\n%s\nfrom the file (err %v, %s):\n%s", stdout, err, fileErr, fromFile)
	}
	got := m.Kubectl("-n", "kube-system", "get", "configmap", "kubevip", "-o", "yaml")
	if fromStdin, stderr, err := m.Plugin(got, "migrate-kube-vip", "-f", "-"); err != nil || fromStdin != stdout {
		t.Errorf("from kubectl get -o yaml | migrate-kube-vip -f - (err %v, %s):\n%s\nwant\n%s", err, stderr, fromStdin, stdout)
	}

	// Step: ipam beside kube-vip-cloud-provider (components/require-lb-class),
	// with a trial pool of its own.
	m.RunBeside("10.95.9.0/30")
	each(func(ns, name, ip string) {
		s := m.ServiceAt(ns + "/" + name)
		if got := migratetest.Ingress(s); !slices.Equal(got, []string{ip}) || migratetest.Condition(s) != nil {
			t.Fatalf("beside kube-vip, ipam touched %s/%s: ingress %v, condition %+v", ns, name, got, migratetest.Condition(s))
		}
	})

	// Step: the Services kube-vip-cloud-provider put on one address get a
	// common sharing key: listed by address, then annotated.
	listed := m.Kubectl("get", "svc", "-A", "-l", "implementation=kube-vip", "-o",
		`custom-columns=IP:.metadata.annotations.kube-vip\.io/loadbalancerIPs,NAMESPACE:.metadata.namespace,NAME:.metadata.name`,
		`--sort-by=.metadata.annotations.kube-vip\.io/loadbalancerIPs`)
	for _, want := range []string{"10.95.0.2   " + m.NS + "   shared-a", "10.95.0.2   " + m.NS + "   shared-b"} {
		if !strings.Contains(strings.Join(strings.Fields(listed), "   "), strings.Join(strings.Fields(want), "   ")) {
			t.Errorf("the listing by address does not show %q:\n%s", want, listed)
		}
	}
	m.Kubectl("-n", m.NS, "annotate", "svc", "shared-a", "shared-b", "ipledger.io/allow-shared-ip=10.95.0.2")

	// Step: switch.
	m.Kubectl("-n", sysNS, "scale", "deploy/ipledger-ipam", "--replicas=0")
	m.StopIPAM()
	m.Kubectl("-n", "kube-system", "scale", "deploy/kube-vip-cloud-provider", "--replicas=0")
	m.Kubectl("apply", "-f", filepath.Join(m.Dir, "ippools.yaml"))
	m.Kubectl("apply", "--server-side", "-k", filepath.Join(env.Root, "deploy/kustomize/base"))
	m.IPAMArgs(false)
	m.StartIPAM("ipam-switched", false)
	m.WaitKept("kube-vip", kubeVIPIPs, wantPool)
	m.Why("plain", "Allocated", "10.95.0.1", "kube-vip-"+m.NS)

	// After the switch, a new Service that writes kube-vip.io/loadbalancerIPs
	// (so that kube-vip announces it) gets that address.
	m.Kubectl("apply", "-n", m.NS, "-f", m.WriteFile("after.yaml", `apiVersion: v1
kind: Service
metadata:
  name: after
  annotations: {kube-vip.io/loadbalancerIPs: 10.95.0.9}
spec:
  type: LoadBalancer
  selector: {app: after}
  ports: [{port: 80}]
`))
	testenv.Eventually(t, migratetest.Wait, func() error {
		if got := migratetest.Ingress(m.Service("after")); !slices.Equal(got, []string{"10.95.0.9"}) {
			return fmt.Errorf("after: ingress %v, want 10.95.0.9 (kube-vip.io/loadbalancerIPs)", got)
		}
		return nil
	})

	// Rollback: ipam stopped, kube-vip-cloud-provider back; every status stays.
	before := m.Statuses(m.NS, other)
	m.Kubectl("-n", sysNS, "scale", "deploy/ipledger-ipam", "--replicas=0")
	m.StopIPAM()
	m.Kubectl("-n", "kube-system", "scale", "deploy/kube-vip-cloud-provider", "--replicas=1")
	m.DeleteConverted("kube-vip", []string{"kube-vip-" + m.NS, "kube-vip-global"}, "trial")
	if after := m.Statuses(m.NS, other); !maps.Equal(before, after) {
		t.Errorf("the rollback changed statuses:\nbefore %v\nafter  %v", before, after)
	}
	each(func(ns, name, ip string) {
		if got := migratetest.Ingress(m.ServiceAt(ns + "/" + name)); !slices.Equal(got, []string{ip}) {
			t.Errorf("after the rollback %s/%s has %v, want %s", ns, name, got, ip)
		}
	})
	if _, err := env.Dynamic.Resource(migratetest.PoolsGVR).Get(ctx, "kube-vip-global", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("IPPool kube-vip-global after the rollback: %v, want it deleted", err)
	}
}
