// Package migratetest runs the migration guides (docs/migrating-from-*.md)
// against a real API server (lab/testenv): kubectl, the plugin in-process,
// and the real watcher and ipam binaries started and stopped as the guides
// switch them. The tests stand in for the controller being replaced (they
// write the statuses it wrote); the test API server has no kubelet, so the
// tests run ipam themselves with the flags each kustomization sets.
package migratetest

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"sigs.k8s.io/yaml"

	"github.com/ipledger/ipledger/lab/testenv"
	"github.com/ipledger/ipledger/plugin/internal/commands"
	"github.com/ipledger/ipledger/plugin/internal/metallb"
)

// Wait bounds every condition the guides wait for.
const Wait = 90 * time.Second

// Migration is one run of a guide.
type Migration struct {
	T   *testing.T
	Env *testenv.Env
	// NS is the namespace of the test's Services; Dir holds its files.
	NS, Dir string

	watcher, ipamToken, kubeconfig string
	// IPAM is the ipam started last; IPAMAddr its gRPC address.
	IPAM     *testenv.Process
	IPAMAddr string
	viewer   string
}

// New starts a run: a namespace for the Services, a directory for the files.
func New(t *testing.T) *Migration {
	env := testenv.Get(t)
	return &Migration{T: t, Env: env, NS: env.Namespace(t, nil), Dir: t.TempDir()}
}

// Kubectl runs kubectl as the cluster admin; a failure fails the test.
func (m *Migration) Kubectl(args ...string) string {
	m.T.Helper()
	out, err := m.Env.Kubectl(context.Background(), args...)
	if err != nil {
		m.T.Fatal(err)
	}
	return string(out)
}

// WaitEstablished waits until the CRDs named (crd/<name>) are served
// (testenv.WaitEstablished); a failure fails the test.
func (m *Migration) WaitEstablished(crds ...string) {
	m.T.Helper()
	if out, err := testenv.WaitEstablished(context.Background(), m.Env.Kubectl, Wait, crds...); err != nil {
		m.T.Fatalf("CRDs %v not Established: %v\n%s", crds, err, out)
	}
}

// Plugin runs kubectl-ipledger with args as the cluster admin.
func (m *Migration) Plugin(stdin string, args ...string) (stdout, stderr string, err error) {
	var out, errOut bytes.Buffer
	root := commands.NewRoot(genericiooptions.IOStreams{In: strings.NewReader(stdin), Out: &out, ErrOut: &errOut})
	root.SetArgs(append(args, "--kubeconfig", m.Env.CP.KubeconfigPath))
	err = root.ExecuteContext(context.Background())
	return out.String(), errOut.String(), err
}

// StartWatcher runs the watcher (ledger in the system namespace) and gets
// ipam's token, and a viewer's for kubectl ipledger why.
func (m *Migration) StartWatcher() {
	t, env, sysNS := m.T, m.Env, testenv.SystemNamespace
	m.watcher = testenv.FreeAddr(t)
	testenv.StartProcess(t, "watcher", env.Binary(t, "watcher"), nil,
		"--kubeconfig", env.CP.KubeconfigPath, "--grpc-addr", m.watcher, "--grpc-plaintext", "--namespace", sysNS,
		"--ops-addr", testenv.FreeAddr(t), "--log-format", "text")
	// ipam writes its ledger from a Pod only (the policy ipledger-ledger-writers).
	m.kubeconfig, m.ipamToken = env.PodKubeconfig(t, sysNS, "ipledger-ipam"), env.TokenFile(t, sysNS, "ipledger-ipam")
	m.viewer = env.TokenFile(t, sysNS, "migration-viewer")
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "migration-viewer"},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "ipledger:viewer"},
		Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Namespace: sysNS, Name: "migration-viewer"}},
	}
	if _, err := env.Client.RbacV1().ClusterRoleBindings().Create(context.Background(), binding, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err) // another test of the package made it: the same binding
	}
}

// StartIPAM starts ipam as the Deployment of deploy/kustomize/base runs it
// (class ipledger.io/lb), with --require-lb-class=requireClass as
// components/require-lb-class sets it, and waits until it leads.
func (m *Migration) StartIPAM(id string, requireClass bool) {
	t := m.T
	ops, grpcAddr := testenv.FreeAddr(t), testenv.FreeAddr(t)
	p := testenv.StartProcess(t, id, m.Env.Binary(t, "ipam"), nil,
		"--kubeconfig", m.kubeconfig, "--namespace", testenv.SystemNamespace, "--lb-class", "ipledger.io/lb",
		fmt.Sprintf("--require-lb-class=%t", requireClass), "--log-format", "text",
		"--watcher-addr", m.watcher, "--watcher-token-file", m.ipamToken, "--watcher-plaintext",
		"--grpc-addr", grpcAddr, "--grpc-plaintext", "--ops-addr", ops,
		"--leader-elect-identity", id, "--leader-elect-lease-duration", "4s", "--leader-elect-renew-deadline", "3s",
		"--leader-elect-retry-period", "500ms")
	testenv.Eventually(t, Wait, func() error {
		if p.Exited() {
			t.Fatalf("%s exited: %v\n%s", id, p.Err(), p.Logs())
		}
		lease, err := m.Env.Client.CoordinationV1().Leases(testenv.SystemNamespace).Get(context.Background(), "ipledger-ipam", metav1.GetOptions{})
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
	m.IPAM, m.IPAMAddr = p, grpcAddr
}

// StopIPAM stops the ipam started last, as scaling its Deployment to 0 does.
func (m *Migration) StopIPAM() {
	m.T.Helper()
	if err := m.IPAM.Stop(10 * time.Second); err != nil {
		m.T.Fatal(err)
	}
}

// IPAMArgs checks that the ipledger-ipam Deployment, as the last kubectl
// apply left it, runs with --require-lb-class=true or without it, and with
// one replica.
func (m *Migration) IPAMArgs(requireClass bool) {
	m.T.Helper()
	out := m.Kubectl("-n", testenv.SystemNamespace, "get", "deploy/ipledger-ipam", "-o", "jsonpath={.spec.replicas} {.spec.template.spec.containers[0].args}")
	if strings.Contains(out, "--require-lb-class=true") != requireClass || !strings.HasPrefix(out, "1 ") {
		m.T.Fatalf("ipledger-ipam Deployment: replicas and args %s, want --require-lb-class=true: %t and 1 replica", out, requireClass)
	}
}

// Why runs kubectl ipledger why svc/name (against the ipam started last)
// and checks its answer says want.
func (m *Migration) Why(name string, want ...string) {
	m.T.Helper()
	out, stderr, err := m.Plugin("", "why", "svc/"+name, "-n", m.NS, "--ipam-address", m.IPAMAddr, "--token-file", m.viewer)
	if err != nil {
		m.T.Fatalf("why svc/%s: %v\n%s", name, err, stderr)
	}
	for _, w := range want {
		if !strings.Contains(out, w) {
			m.T.Errorf("why svc/%s does not say %q:\n%s", name, w, out)
		}
	}
}

// ServedService creates a class-less LoadBalancer Service and writes the
// status the controller being replaced wrote (one ingress per IP).
func (m *Migration) ServedService(name string, port int32, annotations map[string]string, ips ...string) {
	t := m.T
	ctx := context.Background()
	s := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: m.NS, Annotations: annotations},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, Selector: map[string]string{"app": name},
			Ports: []corev1.ServicePort{{Name: "p", Port: port, Protocol: corev1.ProtocolTCP}}},
	}
	s, err := m.Env.Client.CoreV1().Services(m.NS).Create(ctx, s, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = m.Env.Client.CoreV1().Services(m.NS).Delete(context.Background(), name, metav1.DeleteOptions{})
	})
	for _, ip := range ips {
		s.Status.LoadBalancer.Ingress = append(s.Status.LoadBalancer.Ingress, corev1.LoadBalancerIngress{IP: ip})
	}
	if _, err := m.Env.Client.CoreV1().Services(m.NS).UpdateStatus(ctx, s, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// Service gets a Service of the test's namespace.
func (m *Migration) Service(name string) *corev1.Service {
	s, err := m.Env.Client.CoreV1().Services(m.NS).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		m.T.Fatal(err)
	}
	return s
}

// Ingress is the IPs a Service's status shows.
func Ingress(s *corev1.Service) []string {
	var out []string
	for _, in := range s.Status.LoadBalancer.Ingress {
		out = append(out, in.IP)
	}
	return out
}

// Condition is ipam's condition on a Service, nil when it wrote none.
func Condition(s *corev1.Service) *metav1.Condition {
	for i, c := range s.Status.Conditions {
		if c.Type == "ipledger.io/AddressAllocated" {
			return &s.Status.Conditions[i]
		}
	}
	return nil
}

// WriteFile writes a file of the run and returns its path.
func (m *Migration) WriteFile(name, content string) string {
	m.T.Helper()
	path := filepath.Join(m.Dir, name)
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		m.T.Fatal(err)
	}
	return path
}

// PoolsGVR is ipledger's IPPool resource.
var PoolsGVR = schema.GroupVersionResource{Group: "ipledger.io", Version: "v1alpha1", Resource: "ippools"}

// CreateConverted converts each input file with convert and creates every
// resulting IPPool in the real API server (then deletes it): the CRD's
// validation and the admission policies must accept them all. It returns
// how many were created.
func CreateConverted(t *testing.T, inputs []string, convert func([]*unstructured.Unstructured) metallb.Result) int {
	t.Helper()
	env := testenv.Get(t)
	ctx := context.Background()
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
		for _, p := range convert(objs).Pools {
			b, err := yaml.Marshal(p)
			if err != nil {
				t.Fatal(err)
			}
			u := &unstructured.Unstructured{}
			if err := yaml.Unmarshal(b, &u.Object); err != nil {
				t.Fatal(err)
			}
			if _, err := env.Dynamic.Resource(PoolsGVR).Create(ctx, u, metav1.CreateOptions{}); err != nil {
				t.Errorf("%s: IPPool %s refused: %v", in, p.Metadata.Name, err)
				continue
			}
			created++
			if err := env.Dynamic.Resource(PoolsGVR).Delete(ctx, p.Metadata.Name, metav1.DeleteOptions{}); err != nil {
				t.Fatal(err)
			}
		}
	}
	return created
}

// ServiceAt gets a Service by "name" (the test's namespace) or
// "namespace/name".
func (m *Migration) ServiceAt(key string) *corev1.Service {
	ns, name, ok := strings.Cut(key, "/")
	if !ok {
		ns, name = m.NS, key
	}
	s, err := m.Env.Client.CoreV1().Services(ns).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		m.T.Fatal(err)
	}
	return s
}

// WaitKept waits until ipam, switched in for the controller named from,
// serves every Service of ips ("name" or "namespace/name" → the address the
// old controller gave it) as Allocated from the pool pools names, and fails
// at once if one of them moved.
func (m *Migration) WaitKept(from string, ips, pools map[string]string) {
	m.T.Helper()
	testenv.Eventually(m.T, Wait, func() error {
		for key, ip := range ips {
			s := m.ServiceAt(key)
			c := Condition(s)
			switch {
			case !slices.Equal(Ingress(s), []string{ip}):
				m.T.Fatalf("%s moved: ingress %v, %s gave %s", key, Ingress(s), from, ip)
			case c == nil || c.Status != "True" || c.Reason != "Allocated":
				return fmt.Errorf("%s: condition %+v, want True/Allocated", key, c)
			case s.Annotations["ipledger.io/allocated-from-pool"] != pools[key]:
				return fmt.Errorf("%s: allocated-from-pool %q, want %q", key, s.Annotations["ipledger.io/allocated-from-pool"], pools[key])
			}
		}
		return nil
	})
}

// Statuses is every Service's status in namespaces, as YAML, by
// "namespace/name": what a rollback must leave as it was.
func (m *Migration) Statuses(namespaces ...string) map[string]string {
	m.T.Helper()
	out := map[string]string{}
	for _, ns := range namespaces {
		list, err := m.Env.Client.CoreV1().Services(ns).List(context.Background(), metav1.ListOptions{})
		if err != nil {
			m.T.Fatal(err)
		}
		for _, s := range list.Items {
			b, err := yaml.Marshal(s.Status)
			if err != nil {
				m.T.Fatal(err)
			}
			out[ns+"/"+s.Name] = string(b)
		}
	}
	return out
}

// DeleteConverted is the guides' last rollback step: the IPPools labelled
// ipledger.io/converted-from=from must be exactly want; their finalizers
// (and those of the other pools named in also) are removed, as ipam is
// gone, and they are deleted.
func (m *Migration) DeleteConverted(from string, want []string, also ...string) {
	m.T.Helper()
	label := "ipledger.io/converted-from=" + from
	want = slices.Sorted(slices.Values(want))
	var names []string
	for _, p := range want {
		names = append(names, "ippool.ipledger.io/"+p)
	}
	if list := m.Kubectl("get", "ippools.ipledger.io", "-l", label, "-o", "name"); list != strings.Join(names, "\n")+"\n" {
		m.T.Errorf("converted pools by label: %q, want %q", list, names)
	}
	for _, p := range append(want, also...) {
		m.Kubectl("patch", "ippools.ipledger.io", p, "--type=merge", "-p", `{"metadata":{"finalizers":null}}`)
	}
	m.Kubectl("delete", "ippools.ipledger.io", "-l", label)
	for _, p := range also {
		m.Kubectl("delete", "ippools.ipledger.io", p)
	}
}

// RunBeside is every guide's first step: ipam beside the old controller
// (components/require-lb-class, the install the guides name; nothing runs it
// here, the test runs ipam with the flags it sets), with a trial IPPool of
// trialCIDR and a Service of class ipledger.io/lb, which gets an address of
// it.
func (m *Migration) RunBeside(trialCIDR string) {
	m.T.Helper()
	m.StartWatcher()
	m.Kubectl("apply", "-n", m.NS, "-f", m.WriteFile("trial.yaml", fmt.Sprintf(`apiVersion: ipledger.io/v1alpha1
kind: IPPool
metadata: {name: trial}
spec:
  addresses: [%q]
---
apiVersion: v1
kind: Service
metadata: {name: trial}
spec:
  type: LoadBalancer
  loadBalancerClass: ipledger.io/lb
  selector: {app: trial}
  ports: [{port: 80}]
`, trialCIDR)))
	m.Kubectl("apply", "--server-side", "-k", filepath.Join(m.Env.Root, "deploy/kustomize/overlays/cloud"))
	m.IPAMArgs(true)
	m.StartIPAM("ipam-beside", true)
	trial := netip.MustParsePrefix(trialCIDR)
	testenv.Eventually(m.T, Wait, func() error {
		got := Ingress(m.Service("trial"))
		if len(got) != 1 {
			return fmt.Errorf("trial Service has %v, want an address of the trial pool %s", got, trialCIDR)
		}
		if a, err := netip.ParseAddr(got[0]); err != nil || !trial.Contains(a) {
			return fmt.Errorf("trial Service has %v, want an address of the trial pool %s", got, trialCIDR)
		}
		return nil
	})
}
