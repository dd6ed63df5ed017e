// Package integration checks the MetalLB migration against a real API server
// (pkg/testenv, with ipledger's CRDs and admission policy): every pool the
// converter writes from MetalLB's examples is accepted, and the steps of
// docs/migrating-from-metallb.md, run with kubectl, the plugin and the real
// watcher and ipam binaries, keep every address MetalLB gave.
package integration

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"sigs.k8s.io/yaml"

	"github.com/ipledger/ipledger/pkg/testenv"
	"github.com/ipledger/ipledger/plugin/internal/commands"
	"github.com/ipledger/ipledger/plugin/internal/metallb"
)

func TestMain(m *testing.M) { testenv.Main(m) }

var poolsGVR = schema.GroupVersionResource{Group: "ipledger.io", Version: "v1alpha1", Resource: "ippools"}

const wait = 90 * time.Second

// TestConvertedPoolsAreValid creates, for real, every IPPool converted from
// the testdata (MetalLB's own examples): the CRD's validation and the
// admission policy accept them all.
func TestConvertedPoolsAreValid(t *testing.T) {
	env := testenv.Get(t)
	ctx := context.Background()
	inputs, err := filepath.Glob("../testdata/*.yaml")
	if err != nil || len(inputs) == 0 {
		t.Fatalf("no testdata: %v", err)
	}
	created := 0
	for _, in := range inputs {
		f, err := os.Open(in)
		if err != nil {
			t.Fatal(err)
		}
		objs, err := metallb.Decode(f, in)
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range metallb.Convert(objs).Pools {
			u := toUnstructured(t, p)
			if _, err := env.Dynamic.Resource(poolsGVR).Create(ctx, u, metav1.CreateOptions{}); err != nil {
				t.Errorf("%s: IPPool %s refused: %v", in, p.Metadata.Name, err)
				continue
			}
			created++
			if err := env.Dynamic.Resource(poolsGVR).Delete(ctx, p.Metadata.Name, metav1.DeleteOptions{}); err != nil {
				t.Fatal(err)
			}
		}
	}
	if created < 10 {
		t.Errorf("only %d pools created; the testdata should convert to more", created)
	}
}

func toUnstructured(t *testing.T, p metallb.IPPool) *unstructured.Unstructured {
	t.Helper()
	b, err := yaml.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	u := &unstructured.Unstructured{}
	if err := yaml.Unmarshal(b, &u.Object); err != nil {
		t.Fatal(err)
	}
	return u
}

// migration is one run of the guide: MetalLB's objects in metallb-system
// (the test stands in for MetalLB's controller: it writes the statuses
// MetalLB would), a watcher, and ipam started and restarted as the guide
// switches it.
type migration struct {
	t          *testing.T
	env        *testenv.Env
	ns         string
	dir        string
	watcher    string
	ipamToken  string
	kubeconfig string
	ipam       *testenv.Process
	ipamAddr   string // gRPC
	viewer     string // token file of a ServiceAccount bound to ipledger:viewer
}

func (m *migration) kubectl(args ...string) string {
	m.t.Helper()
	out, err := m.env.Kubectl(context.Background(), args...)
	if err != nil {
		m.t.Fatal(err)
	}
	return string(out)
}

// plugin runs kubectl-ipledger with args as the cluster admin.
func (m *migration) plugin(stdin string, args ...string) (stdout, stderr string, err error) {
	var out, errOut bytes.Buffer
	root := commands.NewRoot(genericiooptions.IOStreams{In: strings.NewReader(stdin), Out: &out, ErrOut: &errOut})
	root.SetArgs(append(args, "--kubeconfig", m.env.CP.KubeconfigPath))
	err = root.ExecuteContext(context.Background())
	return out.String(), errOut.String(), err
}

// startIPAM starts ipam as the Deployment of deploy/kustomize/base runs it
// (class ipledger.io/lb), with --require-lb-class=requireClass as
// components/require-lb-class sets it, and waits until it leads.
func (m *migration) startIPAM(id string, requireClass bool) {
	t := m.t
	ops, grpcAddr := testenv.FreeAddr(t), testenv.FreeAddr(t)
	p := testenv.StartProcess(t, id, m.env.Binary(t, "ipam"), nil,
		"--kubeconfig", m.kubeconfig, "--namespace", testenv.SystemNamespace, "--lb-class", "ipledger.io/lb",
		fmt.Sprintf("--require-lb-class=%t", requireClass), "--log-format", "text",
		"--watcher-addr", m.watcher, "--watcher-token-file", m.ipamToken, "--watcher-plaintext",
		"--grpc-addr", grpcAddr, "--grpc-plaintext", "--ops-addr", ops,
		"--leader-elect-identity", id, "--leader-elect-lease-duration", "4s", "--leader-elect-renew-deadline", "3s",
		"--leader-elect-retry-period", "500ms")
	testenv.Eventually(t, wait, func() error {
		if p.Exited() {
			t.Fatalf("%s exited: %v\n%s", id, p.Err(), p.Logs())
		}
		lease, err := m.env.Client.CoordinationV1().Leases(testenv.SystemNamespace).Get(context.Background(), "ipledger-ipam", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if h := lease.Spec.HolderIdentity; h == nil || *h != id {
			return fmt.Errorf("lease holder %v, want %s", h, id)
		}
		resp, err := http.Get("http://" + ops + "/readyz")
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("%s /readyz: %s", id, resp.Status)
		}
		return nil
	})
	m.ipam, m.ipamAddr = p, grpcAddr
}

// why runs kubectl ipledger why svc/name (against the ipam started last) and
// checks its answer says want.
func (m *migration) why(name string, want ...string) {
	m.t.Helper()
	out, stderr, err := m.plugin("", "why", "svc/"+name, "-n", m.ns, "--ipam-address", m.ipamAddr, "--token-file", m.viewer)
	if err != nil {
		m.t.Fatalf("why svc/%s: %v\n%s", name, err, stderr)
	}
	for _, w := range want {
		if !strings.Contains(out, w) {
			m.t.Errorf("why svc/%s does not say %q:\n%s", name, w, out)
		}
	}
}

// metallbService creates a class-less LoadBalancer Service and writes the
// status and annotations MetalLB's controller would have written.
func (m *migration) metallbService(name, ip string, port int32, annotations map[string]string) {
	t := m.t
	ctx := context.Background()
	s := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: m.ns, Annotations: annotations},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, Selector: map[string]string{"app": name},
			Ports: []corev1.ServicePort{{Name: "p", Port: port, Protocol: corev1.ProtocolTCP}}},
	}
	s, err := m.env.Client.CoreV1().Services(m.ns).Create(ctx, s, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = m.env.Client.CoreV1().Services(m.ns).Delete(context.Background(), name, metav1.DeleteOptions{})
	})
	s.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: ip}}
	if _, err := m.env.Client.CoreV1().Services(m.ns).UpdateStatus(ctx, s, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func (m *migration) service(name string) *corev1.Service {
	s, err := m.env.Client.CoreV1().Services(m.ns).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		m.t.Fatal(err)
	}
	return s
}

func ingress(s *corev1.Service) []string {
	var out []string
	for _, in := range s.Status.LoadBalancer.Ingress {
		out = append(out, in.IP)
	}
	return out
}

func condition(s *corev1.Service) *metav1.Condition {
	for i, c := range s.Status.Conditions {
		if c.Type == "ipledger.io/AddressAllocated" {
			return &s.Status.Conditions[i]
		}
	}
	return nil
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
	m := &migration{t: t, env: env, ns: env.Namespace(t, nil), dir: t.TempDir()}

	// MetalLB as installed: its CRDs, pools and advertisement, and a stand-in
	// for its controller Deployment (no kubelet here: it never runs a Pod).
	m.kubectl("apply", "--server-side", "-f", "../testdata/crds")
	m.kubectl("wait", "--for=condition=Established", "--timeout=60s", "crd/ipaddresspools.metallb.io", "crd/l2advertisements.metallb.io")
	if _, err := env.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "metallb-system"}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	writeFile(t, m.dir, "metallb.yaml", `apiVersion: metallb.io/v1beta1
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
	m.kubectl("apply", "-f", filepath.Join(m.dir, "metallb.yaml"))
	m.metallbService("held", "10.93.0.1", 80, nil)
	m.metallbService("requested", "10.93.0.5", 80, map[string]string{"metallb.universe.tf/loadBalancerIPs": "10.93.0.5"})
	m.metallbService("named", "10.93.1.1", 80, map[string]string{"metallb.universe.tf/address-pool": "mlb-named"})
	m.metallbService("shared-a", "10.93.0.2", 80, map[string]string{"metallb.universe.tf/allow-shared-ip": "web"})
	m.metallbService("shared-b", "10.93.0.2", 443, map[string]string{"metallb.universe.tf/allow-shared-ip": "web"})
	metallbIPs := map[string]string{"held": "10.93.0.1", "requested": "10.93.0.5", "named": "10.93.1.1", "shared-a": "10.93.0.2", "shared-b": "10.93.0.2"}

	// Step: convert the pools and review them.
	stdout, stderr, err := m.plugin("", "migrate-metallb")
	if err != nil {
		t.Fatalf("migrate-metallb: %v\n%s", err, stderr)
	}
	if !strings.Contains(stderr, "Warning: L2Advertisement metallb-system/l2: not converted (it announces every IPAddressPool in its namespace)") {
		t.Errorf("stderr does not name the advertisement:\n%s", stderr)
	}
	// The same pools from the file (whose Deployment is only a warning).
	fromFile, _, err := m.plugin("", "migrate-metallb", "-f", filepath.Join(m.dir, "metallb.yaml"))
	if err != nil || stdout != fromFile {
		t.Errorf("from the cluster:\n%s\nfrom the file (err %v):\n%s", stdout, err, fromFile)
	}
	writeFile(t, m.dir, "ippools.yaml", stdout)
	// And from what kubectl prints (a List), through stdin.
	listed := m.kubectl("get", "ipaddresspools", "-n", "metallb-system", "-o", "yaml")
	if fromStdin, stderr, err := m.plugin(listed, "migrate-metallb", "-f", "-"); err != nil || fromStdin != stdout {
		t.Errorf("from kubectl get -o yaml | migrate-metallb -f - (err %v, %s):\n%s\nwant\n%s", err, stderr, fromStdin, stdout)
	}

	// Step: ipam beside MetalLB (components/require-lb-class), with a trial
	// pool of its own that overlaps none of MetalLB's addresses.
	sysNS := testenv.SystemNamespace
	m.watcher = testenv.FreeAddr(t)
	testenv.StartProcess(t, "watcher", env.Binary(t, "watcher"), nil,
		"--kubeconfig", env.CP.KubeconfigPath, "--grpc-addr", m.watcher, "--grpc-plaintext", "--namespace", sysNS,
		"--ops-addr", testenv.FreeAddr(t), "--log-format", "text")
	token, err := env.ServiceAccountToken(ctx, sysNS, "ipledger-ipam")
	if err != nil {
		t.Fatal(err)
	}
	m.kubeconfig, m.ipamToken = env.KubeconfigFor(t, token), env.TokenFile(t, sysNS, "ipledger-ipam")
	m.viewer = env.TokenFile(t, sysNS, "migration-viewer")
	m.kubectl("create", "clusterrolebinding", "migration-viewer", "--clusterrole=ipledger:viewer", "--serviceaccount="+sysNS+":migration-viewer")
	writeFile(t, m.dir, "trial.yaml", `apiVersion: ipledger.io/v1alpha1
kind: IPPool
metadata: {name: trial}
spec:
  addresses: ["10.93.9.0/30"]
---
apiVersion: v1
kind: Service
metadata: {name: trial}
spec:
  type: LoadBalancer
  loadBalancerClass: ipledger.io/lb
  selector: {app: trial}
  ports: [{port: 80}]
`)
	m.kubectl("apply", "-n", m.ns, "-f", filepath.Join(m.dir, "trial.yaml"))
	// The install the guide names (nothing runs it here: the test runs ipam
	// itself with the flags it sets).
	m.kubectl("apply", "--server-side", "-k", filepath.Join(env.Root, "deploy/kustomize/overlays/cloud"))
	m.ipamArgs(true)
	m.startIPAM("ipam-beside", true)
	testenv.Eventually(t, wait, func() error {
		if got := ingress(m.service("trial")); len(got) != 1 || !strings.HasPrefix(got[0], "10.93.9.") {
			return fmt.Errorf("trial Service has %v, want an address of the trial pool", got)
		}
		return nil
	})
	m.why("trial", "Allocated", "10.93.9.")
	for name, ip := range metallbIPs {
		s := m.service(name)
		if got := ingress(s); !slices.Equal(got, []string{ip}) || condition(s) != nil {
			t.Fatalf("beside MetalLB, ipam touched %s: ingress %v, condition %+v", name, got, condition(s))
		}
	}

	// Step: switch. MetalLB's controller stops allocating, the IPPools are
	// applied, ipam serves class-less Services (restarted without
	// --require-lb-class: a new term, which adopts the addresses in status).
	m.kubectl("-n", sysNS, "scale", "deploy/ipledger-ipam", "--replicas=0")
	if err := m.ipam.Stop(10 * time.Second); err != nil {
		t.Fatal(err)
	}
	m.kubectl("-n", "metallb-system", "scale", "deploy/controller", "--replicas=0")
	m.kubectl("apply", "-f", filepath.Join(m.dir, "ippools.yaml"))
	m.kubectl("apply", "--server-side", "-k", filepath.Join(env.Root, "deploy/kustomize/base"))
	m.ipamArgs(false)
	m.startIPAM("ipam-switched", false)
	wantPool := map[string]string{"held": "mlb-auto", "requested": "mlb-auto", "named": "mlb-named", "shared-a": "mlb-auto", "shared-b": "mlb-auto"}
	testenv.Eventually(t, wait, func() error {
		for name, ip := range metallbIPs {
			s := m.service(name)
			c := condition(s)
			switch {
			case !slices.Equal(ingress(s), []string{ip}):
				t.Fatalf("%s moved: ingress %v, MetalLB gave %s", name, ingress(s), ip)
			case c == nil || c.Status != "True" || c.Reason != "Allocated":
				return fmt.Errorf("%s: condition %+v, want True/Allocated", name, c)
			case s.Annotations["ipledger.io/allocated-from-pool"] != wantPool[name]:
				return fmt.Errorf("%s: allocated-from-pool %q, want %q", name, s.Annotations["ipledger.io/allocated-from-pool"], wantPool[name])
			}
		}
		return nil
	})

	m.why("named", "Allocated", "10.93.1.1", "mlb-named")

	// After the switch, MetalLB's annotations on a new Service are honoured.
	m.kubectl("apply", "-n", m.ns, "-f", writeFile(t, m.dir, "after.yaml", `apiVersion: v1
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
		got := ingress(m.service("after"))
		if len(got) != 1 || !strings.HasPrefix(got[0], "10.93.1.") || got[0] == "10.93.1.1" {
			return fmt.Errorf("after: ingress %v, want a free address of mlb-named (10.93.1.0-10.93.1.3, not 10.93.1.1)", got)
		}
		return nil
	})

	// Rollback: ipam stopped, MetalLB's controller back; the statuses stay.
	m.kubectl("-n", sysNS, "scale", "deploy/ipledger-ipam", "--replicas=0")
	if err := m.ipam.Stop(10 * time.Second); err != nil {
		t.Fatal(err)
	}
	m.kubectl("-n", "metallb-system", "scale", "deploy/controller", "--replicas=1")
	for name, ip := range metallbIPs {
		if got := ingress(m.service(name)); !slices.Equal(got, []string{ip}) {
			t.Errorf("after the rollback %s has %v, want %s", name, got, ip)
		}
	}
	list := m.kubectl("get", "ippools", "-l", "ipledger.io/converted-from=metallb", "-o", "name")
	if list != "ippool.ipledger.io/mlb-auto\nippool.ipledger.io/mlb-named\n" {
		t.Errorf("converted pools by label: %q", list)
	}
	for _, p := range []string{"mlb-auto", "mlb-named", "trial"} {
		m.kubectl("patch", "ippool", p, "--type=merge", "-p", `{"metadata":{"finalizers":null}}`)
	}
	m.kubectl("delete", "ippools", "-l", "ipledger.io/converted-from=metallb")
	m.kubectl("delete", "ippool", "trial")
}

// ipamArgs checks that the ipledger-ipam Deployment, as the last kubectl
// apply left it, runs with --require-lb-class=true or without it, and with
// one replica.
func (m *migration) ipamArgs(requireClass bool) {
	m.t.Helper()
	out := m.kubectl("-n", testenv.SystemNamespace, "get", "deploy/ipledger-ipam", "-o", "jsonpath={.spec.replicas} {.spec.template.spec.containers[0].args}")
	if strings.Contains(out, "--require-lb-class=true") != requireClass || !strings.HasPrefix(out, "1 ") {
		m.t.Fatalf("ipledger-ipam Deployment: replicas and args %s, want --require-lb-class=true: %t and 1 replica", out, requireClass)
	}
}

func writeFile(t *testing.T, dir, name, content string) string {
	t.Helper()
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}
