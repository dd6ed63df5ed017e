// Package testenv gives integration tests a real Kubernetes: one etcd +
// kube-apiserver per test binary (started from TestMain), ipledger's CRDs and
// RBAC applied from deploy/kustomize, ServiceAccount tokens, and the real
// ipledger binaries run as processes.
//
//	func TestMain(m *testing.M) { testenv.Main(m) }
//	func TestX(t *testing.T) { env := testenv.Get(t); ... }
package testenv

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/ipledger/ipledger/lab/containerimage"
	"github.com/ipledger/ipledger/lab/controlplane"
	"github.com/ipledger/ipledger/pkg/authz"
	"github.com/ipledger/ipledger/pkg/install"
)

// SystemNamespace is where ipledger's own objects (Leases, ledger) live:
// the install's default namespace.
const SystemNamespace = install.DefaultNamespace

// Env is the shared control plane of one test binary.
type Env struct {
	CP      *controlplane.ControlPlane
	Config  *rest.Config
	Client  kubernetes.Interface
	Dynamic dynamic.Interface
	Root    string

	binMu    sync.Mutex
	binaries map[string]string
	binDir   string
}

var (
	shared   *Env
	startErr error
)

// Main starts the control plane, runs the tests, stops it and exits.
func Main(m *testing.M) { os.Exit(Run(m)) }

// Run is Main without the exit, for a TestMain that has fixtures of its own
// to stop afterwards; it returns the exit code.
func Run(m *testing.M) int {
	return func() int {
		dir, err := os.MkdirTemp("", "ipledger-testenv-")
		if err != nil {
			fmt.Fprintln(os.Stderr, "testenv:", err)
			return 1
		}
		defer os.RemoveAll(dir)
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
		defer cancel()
		shared, startErr = start(ctx, dir)
		if startErr != nil {
			fmt.Fprintln(os.Stderr, "testenv:", startErr)
			return 1
		}
		defer shared.CP.Stop()
		return m.Run()
	}()
}

// Get returns the shared environment; it fails the test if Main did not run.
func Get(t testing.TB) *Env {
	t.Helper()
	if shared == nil {
		t.Fatalf("testenv: no control plane (call testenv.Main from TestMain): %v", startErr)
	}
	return shared
}

func start(ctx context.Context, dir string) (*Env, error) {
	root, err := controlplane.RepoRoot()
	if err != nil {
		return nil, err
	}
	cp, err := controlplane.Start(ctx, controlplane.Options{Dir: dir})
	if err != nil {
		return nil, err
	}
	cfg := cp.RESTConfig()
	env := &Env{CP: cp, Config: cfg, Root: root, binaries: map[string]string{}, binDir: filepath.Join(dir, "bin")}
	if env.Client, err = kubernetes.NewForConfig(cfg); err != nil {
		cp.Stop()
		return nil, err
	}
	if env.Dynamic, err = dynamic.NewForConfig(cfg); err != nil {
		cp.Stop()
		return nil, err
	}
	if err := env.Install(ctx); err != nil {
		cp.Stop()
		return nil, err
	}
	return env, nil
}

// Install applies ipledger's CRDs and RBAC from deploy/kustomize (the base's
// and components/eip's, for the tests that run eipd) and waits
// for the CRDs to be served and the admission policies to be enforced (the
// API server loads policies asynchronously): the IPPool ranges, and the
// fences of what each component and everyone else may write
// (waitForFences).
func (e *Env) Install(ctx context.Context) error {
	for _, dir := range []string{"deploy/kustomize/base/crds", "deploy/kustomize/base/rbac"} {
		if _, err := e.Kubectl(ctx, "apply", "--server-side", "-k", filepath.Join(e.Root, dir)); err != nil {
			return err
		}
	}
	if _, err := e.Kubectl(ctx, "apply", "--server-side", "-f", filepath.Join(e.Root, "deploy/kustomize/components/eip/rbac.yaml")); err != nil {
		return err
	}
	if _, err := WaitEstablished(ctx, e.Kubectl, time.Minute, "crd/ippools.ipledger.io", "crd/externalworkloads.ipledger.io"); err != nil {
		return err
	}
	reversed := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "ipledger.io/v1alpha1", "kind": "IPPool",
		"metadata": map[string]any{"name": "ipledger-policy-probe"},
		"spec":     map[string]any{"addresses": []any{"192.0.2.9-192.0.2.1"}},
	}}
	gvr := schema.GroupVersionResource{Group: "ipledger.io", Version: "v1alpha1", Resource: "ippools"}
	var last error
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
		_, last = e.Dynamic.Resource(gvr).Create(ctx, reversed, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return last != nil && strings.Contains(last.Error(), "ipledger-ippool-ranges"), nil
	})
	if err != nil {
		return fmt.Errorf("the ValidatingAdmissionPolicy ipledger-ippool-ranges is not enforced after 60s (last answer: %v): %w", last, err)
	}
	return e.waitForFences(ctx)
}

// Kubectl runs the pinned kubectl against the control plane as admin.
func (e *Env) Kubectl(ctx context.Context, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, filepath.Join(e.CP.BinDir, "kubectl"), append([]string{"--kubeconfig", e.CP.KubeconfigPath}, args...)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return out, fmt.Errorf("kubectl %s: %w: %s", strings.Join(args, " "), err, stderr.String())
	}
	return out, nil
}

// Namespace creates a fresh namespace named after the test (plus labels) and
// returns its name.
func (e *Env) Namespace(t testing.TB, labels map[string]string) string {
	t.Helper()
	name := strings.ToLower(strings.NewReplacer("/", "-", "_", "-").Replace(t.Name()))
	if len(name) > 40 {
		name = name[:40]
	}
	ns, err := e.Client.CoreV1().Namespaces().Create(context.Background(), &corev1.Namespace{
		ObjectMeta: metav1.ObjectMeta{GenerateName: strings.Trim(name, "-") + "-", Labels: labels},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create namespace: %v", err)
	}
	return ns.Name
}

// ServiceAccountToken creates namespace/name (and the namespace) if missing
// and returns a one-hour token for it from the TokenRequest API, with the
// Kubernetes API's own audience: a credential for the API server (see
// KubeconfigFor, ServiceAccountKubeconfig), which ipledger's gRPC servers
// refuse. It is bound to no Pod, as `kubectl create token` gives one: ipam
// needs PodToken to write its ledger. For a token to send to an ipledger
// server use GRPCToken or TokenFile.
func (e *Env) ServiceAccountToken(ctx context.Context, namespace, name string) (string, error) {
	return e.requestToken(ctx, namespace, name, nil)
}

// GRPCToken is ServiceAccountToken with the audiences of all of ipledger's
// gRPC servers (authz.WatcherAudience, IPAMAudience, EIPDAudience), a test's
// convenience that every server accepts and the Kubernetes API server
// refuses. A component's deployed token carries the one audience of the
// server it calls: see GRPCTokenFor and TokenFileFor.
func (e *Env) GRPCToken(ctx context.Context, namespace, name string) (string, error) {
	return e.GRPCTokenFor(ctx, namespace, name, AllGRPCAudiences...)
}

// AllGRPCAudiences are the audiences of every ipledger gRPC server.
var AllGRPCAudiences = []string{authz.WatcherAudience, authz.IPAMAudience, authz.EIPDAudience}

// GRPCTokenFor is ServiceAccountToken with the given audiences, e.g.
// authz.WatcherAudience alone, as a Deployment projects it.
func (e *Env) GRPCTokenFor(ctx context.Context, namespace, name string, audiences ...string) (string, error) {
	return e.requestToken(ctx, namespace, name, audiences)
}

func (e *Env) requestToken(ctx context.Context, namespace, name string, audiences []string) (string, error) {
	_, err := e.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return "", err
	}
	_, err = e.Client.CoreV1().ServiceAccounts(namespace).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return "", err
	}
	expiry := int64(3600)
	tr, err := e.Client.CoreV1().ServiceAccounts(namespace).CreateToken(ctx, name, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &expiry, Audiences: audiences},
	}, metav1.CreateOptions{})
	if err != nil {
		return "", err
	}
	return tr.Status.Token, nil
}

// TokenFile writes a ServiceAccount token for all of ipledger's gRPC
// servers (see GRPCToken) to a file in the test's temp dir and returns its
// path.
func (e *Env) TokenFile(t testing.TB, namespace, name string) string {
	t.Helper()
	return e.TokenFileFor(t, namespace, name, AllGRPCAudiences...)
}

// TokenFileFor writes a ServiceAccount token for the given audiences to a
// file in the test's temp dir, as the projected volume behind
// --watcher-token-file holds it (audience authz.WatcherAudience), and
// returns its path.
func (e *Env) TokenFileFor(t testing.TB, namespace, name string, audiences ...string) string {
	t.Helper()
	token, err := e.GRPCTokenFor(context.Background(), namespace, name, audiences...)
	if err != nil {
		t.Fatalf("token for %s/%s: %v", namespace, name, err)
	}
	path := filepath.Join(t.TempDir(), name+".token")
	if err := os.WriteFile(path, []byte(token), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// PodToken is ServiceAccountToken bound to a Pod of namespace/name, for
// audiences (none: the Kubernetes API's own), as a Pod's automounted or
// projected token is: the API server puts the Pod's name in the requests'
// userInfo.extra (controlplane.PodNameExtra), which the ledger policy asks
// of ipam's writes and impersonation cannot supply. The Pod,
// <name>-token-holder, is an object only: nothing here runs Pods
// (controlplane.PodToken). It is how anything that runs ipam against this
// API server gets ipam's credential (PodKubeconfig).
func (e *Env) PodToken(ctx context.Context, namespace, name string, audiences ...string) (string, error) {
	return controlplane.PodToken(ctx, e.Client, namespace, name, time.Hour, audiences...)
}

// PodKubeconfig writes a kubeconfig authenticating as ServiceAccount
// namespace/name from its Pod (PodToken, for the Kubernetes API, as the
// automounted token of a Pod) and returns its path: the --kubeconfig of a
// component run under its own RBAC. ipam needs it (ServiceAccountToken's
// tokens, bound to no Pod, may not write the ledger).
func (e *Env) PodKubeconfig(t testing.TB, namespace, name string) string {
	t.Helper()
	token, err := e.PodToken(context.Background(), namespace, name)
	if err != nil {
		t.Fatalf("token for %s/%s: %v", namespace, name, err)
	}
	return e.KubeconfigFor(t, token)
}

// ServiceAccountKubeconfig writes a kubeconfig authenticating as
// ServiceAccount namespace/name with a token bound to no Pod
// (ServiceAccountToken, as `kubectl create token` gives one) and returns
// its path: the --kubeconfig of a tool, or of a component run under its own
// RBAC that writes no ledger; ipam runs with PodKubeconfig.
func (e *Env) ServiceAccountKubeconfig(t testing.TB, namespace, name string) string {
	t.Helper()
	token, err := e.ServiceAccountToken(context.Background(), namespace, name)
	if err != nil {
		t.Fatalf("token for %s/%s: %v", namespace, name, err)
	}
	return e.KubeconfigFor(t, token)
}

// KubeconfigFor writes a kubeconfig authenticating with token and returns
// its path.
func (e *Env) KubeconfigFor(t testing.TB, token string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(path, []byte(controlplane.Kubeconfig(e.CP.APIServerURL, token)), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// Binary builds (once per test binary) cmd/ipledger-<service> of
// services/<service> and returns its path. It is built as the images build
// it (containerimage.GoBuild: static, stripped, the same tags), so that
// what the tests and benchmarks run, and the memory they measure, is what
// ships: a binary linked with cgo maps libc and resolves names another way,
// and was ≈4 MB larger in resident memory.
func (e *Env) Binary(t testing.TB, service string) string {
	t.Helper()
	e.binMu.Lock()
	defer e.binMu.Unlock()
	if path, ok := e.binaries[service]; ok {
		return path
	}
	i := slices.IndexFunc(containerimage.Binaries, func(b containerimage.Binary) bool { return b.Name == "ipledger-"+service })
	if i < 0 {
		t.Fatalf("no binary ipledger-%s (containerimage.Binaries)", service)
	}
	b := containerimage.Binaries[i]
	prov, err := containerimage.ReadProvenance(context.Background(), e.Root)
	if err != nil {
		t.Fatalf("build %s: %v", b.Name, err)
	}
	if err := containerimage.GoBuild(context.Background(), e.Root, e.binDir, runtime.GOARCH, prov, []containerimage.Binary{b}); err != nil {
		t.Fatalf("build %s: %v", b.Name, err)
	}
	path := filepath.Join(e.binDir, b.Name)
	e.binaries[service] = path
	return path
}

// Plugin builds (once per test binary) kubectl-ipledger, the plugin an
// operator runs, and returns its path.
func (e *Env) Plugin(t testing.TB) string {
	t.Helper()
	e.binMu.Lock()
	defer e.binMu.Unlock()
	const name = "kubectl-ipledger"
	if path, ok := e.binaries[name]; ok {
		return path
	}
	path := filepath.Join(e.binDir, name)
	cmd := exec.Command("go", "build", "-o", path, "./plugin/cmd/kubectl-ipledger")
	cmd.Dir = e.Root
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build kubectl-ipledger: %v\n%s", err, out)
	}
	e.binaries[name] = path
	return path
}

// Eventually polls check every 50ms until it returns nil or timeout passes,
// then fails the test with the last error. It is how tests wait: for a
// condition, never for a duration.
func Eventually(t testing.TB, timeout time.Duration, check func() error) {
	t.Helper()
	if err := Poll(timeout, check); err != nil {
		t.Fatalf("condition not met after %s: %v", timeout, err)
	}
}

// Poll calls check until it returns nil or timeout passes, and returns its
// last error: for a test that decides what a condition not met means.
func Poll(timeout time.Duration, check func() error) error {
	deadline := time.Now().Add(timeout)
	for {
		err := check()
		if err == nil || time.Now().After(deadline) {
			return err
		}
		time.Sleep(50 * time.Millisecond)
	}
}
