package cluster_test

// Home from the release directory (issue 48 §2): TestMain, on the fresh
// node and before anything else is installed on it, takes ipledger home from
// the directory `make release` writes, as docs/install.md ("From a release")
// tells an operator, and nothing else: the images imported from its OCI
// archives into the node's containerd, install/base.yaml (every image
// pinned by digest) applied with kubectl, the plugin from its
// kubectl-ipledger archive for this platform. The release directory is
// built before the node starts (releaseDirectory) by the code `make release`
// runs, for this host's platform only; the previous release's (0.2.0 has no
// `make release`) is its images and its rendered overlays/e2e that
// hack/previous-release.sh builds (previousReleaseDirectory). Two ways
// through, each ended by the uninstall docs/upgrading.md describes, so that
// the node is bare again for the previous-release upgrade and the tests
// after it:
//
//   - fresh: import, apply, `kubectl rollout status`, an IPPool and a
//     LoadBalancer Service gets its address, `kubectl ipledger why` with the
//     release's plugin says so; uninstall;
//   - upgrade: 0.2.0 installed from its directory with a Service holding an
//     address, the release's install applied over it (and eipd, which it no
//     longer has, removed as docs/upgrading.md says), the address the same at
//     every 200ms sample and after, `why` says so; uninstall.
//
// Each uninstall must leave no ipledger-owned object (uninstalled) while the
// Service keeps its status. TestReleaseDirectory reports what was found.

import (
	"bytes"
	"context"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"

	"github.com/ipledger/ipledger/lab/cluster"
	"github.com/ipledger/ipledger/lab/containerimage"
	"github.com/ipledger/ipledger/lab/controlplane"
	"github.com/ipledger/ipledger/lab/testenv"
)

// released is what TestMain's way home from the release directory found;
// TestReleaseDirectory reports it.
var released phaseReport

// TestReleaseDirectory reports the install, allocation, `kubectl ipledger
// why`, upgrade from the previous release and uninstalls that TestMain ran
// from the release directory alone on the fresh node
// (throughReleaseDirectory).
func TestReleaseDirectory(t *testing.T) { released.report(t, "the release directory") }

// releaseOperator is the ServiceAccount the operator runs `kubectl ipledger`
// with, bound to ipledger:viewer by releaseOperatorBinding
// (docs/kubectl-ipledger.md).
const (
	releaseOperator        = "release-operator"
	releaseOperatorBinding = "release-operator-viewer"
)

// releaseDirectory is $IPLEDGER_RELEASE_DIR (a directory `make release`
// wrote), else one built into .dev/test-cluster-release/v<VERSION> by
// lab/cmd/ipledger-release, the code `make release` runs, for linux and this
// host's architecture only (its --arch and --os: RELEASE_FLAGS of `make
// release`), from the work tree as it is (--allow-dirty). It logs the build's
// time and the directory's size.
func releaseDirectory(ctx context.Context, logf func(string, ...any)) (string, error) {
	dir := os.Getenv("IPLEDGER_RELEASE_DIR")
	if dir == "" {
		root, err := controlplane.RepoRoot()
		if err != nil {
			return "", err
		}
		out := filepath.Join(root, ".dev", "test-cluster-release")
		if err := os.RemoveAll(out); err != nil {
			return "", err
		}
		start := time.Now()
		cmd := exec.CommandContext(ctx, "go", "run", "./lab/cmd/ipledger-release",
			"--arch="+runtime.GOARCH, "--os=linux", "--allow-dirty", "--out="+out)
		cmd.Dir = root
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
		if err := cmd.Run(); err != nil {
			return "", fmt.Errorf("the release directory (go run ./lab/cmd/ipledger-release): %w", err)
		}
		dirs, err := filepath.Glob(filepath.Join(out, "v*"))
		if err != nil || len(dirs) != 1 {
			return "", fmt.Errorf("ipledger-release wrote %v into %s, want one v<VERSION> (%v)", dirs, out, err)
		}
		dir = dirs[0]
		logf("test-cluster: release: built %s (linux/%s) in %s", dir, runtime.GOARCH, time.Since(start).Round(time.Second))
	}
	size, err := dirSize(dir)
	if err != nil {
		return "", err
	}
	logf("test-cluster: release: %s holds %.1f MB", dir, float64(size)/1e6)
	return dir, nil
}

// previousReleaseDirectory makes, in a temporary folder, the previous
// release's directory as `make release` would have: images/ (the archives
// hack/previous-release.sh built, linked) and install/e2e.yaml (its
// overlays/e2e with its images, rendered). It returns the folder.
func (e *env) previousReleaseDirectory(ctx context.Context, cache string) (string, error) {
	version, err := os.ReadFile(filepath.Join(cache, "version"))
	if err != nil {
		return "", err
	}
	tmp, err := os.MkdirTemp("", "ipledger-previous-release-")
	if err != nil {
		return "", err
	}
	dir := filepath.Join(tmp, "v"+strings.TrimSpace(string(version)))
	for _, d := range []string{"images", "install"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			return "", err
		}
	}
	tars, err := filepath.Glob(filepath.Join(cache, "images", "*.tar"))
	if err != nil {
		return "", err
	}
	for _, tar := range tars {
		if err := os.Symlink(tar, filepath.Join(dir, "images", filepath.Base(tar))); err != nil {
			return "", err
		}
	}
	rendered, err := e.node.Kubectl(ctx, nil, "kustomize", filepath.Join(cache, "overlay"))
	if err != nil {
		return "", err
	}
	return dir, os.WriteFile(filepath.Join(dir, "install", "e2e.yaml"), rendered, 0o644)
}

// throughReleaseDirectory is the way home (the comment at the top of this
// file). nodeStart is when the node's start began: the first address's time
// is logged from it. It returns an error only when the node is not bare
// again for the rest of TestMain; what it finds otherwise goes to
// TestReleaseDirectory.
func (e *env) throughReleaseDirectory(ctx context.Context, dir string, nodeStart time.Time, logf func(string, ...any)) error {
	released.ran = true
	s := &stage{name: "TestReleaseDirectory", label: "release", logf: logf}
	note := func(format string, args ...any) {
		line := fmt.Sprintf(format, args...)
		s.Logf("%s", line)
		released.summary = append(released.summary, line)
	}
	defer func() { released.findings = append(released.findings, s.findings...) }()
	defer s.run(s.cleanup)

	start := time.Now()
	var ip string
	fresh := s.run(func() {
		e.importRelease(ctx, s, dir, true)
		note("imported %s/images in %s", filepath.Base(dir), time.Since(start).Round(100*time.Millisecond))
		applied := time.Now()
		e.installRelease(s, filepath.Join(dir, "install", "base.yaml"))
		note("install/base.yaml rolled out %s after the apply", time.Since(applied).Round(100*time.Millisecond))
		ns := e.releaseNamespace(ctx, s, "release-fresh")
		pool := e.firstPool(s)
		e.kubectl(s, "-n", ns, "create", "service", "loadbalancer", "web", "--tcp=80:80")
		ip = e.ips(s, ns, []string{"web"}, 3*time.Minute)["web"]
		note("fresh install: web got %s from pool %s, %s after the apply, %s after the node's start began",
			ip, pool, time.Since(applied).Round(100*time.Millisecond), time.Since(nodeStart).Round(time.Second))
		e.releaseWhy(ctx, s, dir, ns, "web", ip, pool)
		e.uninstallRelease(ctx, s, dir, "base.yaml", ns, pool, map[string]string{"web": ip})
		e.deleteNamespace(ctx, s, ns)
	})
	note("fresh install, allocation, why and uninstall: %s", time.Since(start).Round(time.Second))
	if !fresh {
		return fmt.Errorf("the fresh install from %s: %s", dir, strings.Join(s.findings, "; "))
	}

	start = time.Now()
	root, err := controlplane.RepoRoot()
	if err != nil {
		return err
	}
	cache, _, err := previousReleaseCache(ctx, root)
	if err != nil {
		return err
	}
	previous, err := e.previousReleaseDirectory(ctx, cache)
	if err != nil {
		return err
	}
	defer os.RemoveAll(filepath.Dir(previous))
	note("the previous release's directory %s in %s", previous, time.Since(start).Round(100*time.Millisecond))
	start = time.Now()
	upgraded := s.run(func() {
		e.importRelease(ctx, s, previous, false)
		e.installRelease(s, filepath.Join(previous, "install", "e2e.yaml"))
		note("%s installed in %s", filepath.Base(previous), time.Since(start).Round(100*time.Millisecond))
		ns := e.releaseNamespace(ctx, s, "release-upgrade")
		pool := e.firstPool(s)
		e.kubectl(s, "-n", ns, "create", "service", "loadbalancer", "web", "--tcp=80:80")
		ip := e.ips(s, ns, []string{"web"}, 3*time.Minute)["web"]
		e.importRelease(ctx, s, dir, true)
		kept := e.watchAddresses(ns, map[string]string{"web": ip})
		applied := time.Now()
		e.installRelease(s, filepath.Join(dir, "install", "base.yaml"))
		// 0.2.0's eipd is not in the release's base: an apply without
		// prune leaves it, and docs/upgrading.md's commands remove it.
		if _, err := e.client.AppsV1().Deployments(systemNS).Get(ctx, "ipledger-eipd", metav1.GetOptions{}); err != nil {
			s.Errorf("after applying install/base.yaml over %s, deploy/ipledger-eipd: %v; docs/upgrading.md says it keeps running", filepath.Base(previous), err)
		}
		e.removeEIPD(s)
		kept.check(s, "web's address through the upgrade")
		if got := e.ips(s, ns, []string{"web"}, time.Minute)["web"]; got != ip {
			s.Errorf("web had %s under %s and %s after the upgrade", ip, filepath.Base(previous), got)
		}
		note("upgrade %s → %s: rolled out with web keeping %s, %s after the apply",
			filepath.Base(previous), filepath.Base(dir), ip, time.Since(applied).Round(100*time.Millisecond))
		e.releaseWhy(ctx, s, dir, ns, "web", ip, pool)
		e.uninstallRelease(ctx, s, dir, "base.yaml", ns, pool, map[string]string{"web": ip})
		e.deleteNamespace(ctx, s, ns)
	})
	note("upgrade from the previous release, why and uninstall: %s", time.Since(start).Round(time.Second))
	if !upgraded {
		return fmt.Errorf("the upgrade from %s to %s: %s", previous, dir, strings.Join(s.findings, "; "))
	}
	return nil
}

// importRelease imports every image archive of the release directory dir
// into the node's containerd as docs/install.md says: a release's install
// names its images by digest (ghcr.io/ipledger/<service>@sha256:…), which
// the node must find under that name (--digests, with the repository as
// --base-name), or the kubelet tries to pull it. byDigest false imports as
// the archive names the image (a tag), for the previous release.
func (e *env) importRelease(ctx context.Context, s *stage, dir string, byDigest bool) {
	tars, err := filepath.Glob(filepath.Join(dir, "images", "*.tar"))
	if err != nil || len(tars) == 0 {
		s.Fatalf("%s/images: no image archives (%v)", dir, err)
	}
	for _, tar := range tars {
		args := []string{"-n", "k8s.io", "images", "import"}
		if byDigest {
			service := strings.TrimPrefix(strings.TrimSuffix(filepath.Base(tar), ".tar"), "ipledger-")
			args = append(args, "--base-name", containerimage.Registry+"/"+service, "--digests")
		}
		if out, err := e.node.Ctr(ctx, append(args, tar)...); err != nil {
			s.Fatalf("%v\n%s", err, out)
		}
	}
}

// installRelease applies an install file of a release directory as
// docs/install.md says and waits for `kubectl rollout status` of every
// Deployment in ipledger-system.
func (e *env) installRelease(s *stage, file string) {
	e.kubectl(s, "apply", "--server-side", "-f", file)
	if strings.HasSuffix(file, "e2e.yaml") {
		// The previous release's overlays/e2e: eipd reads moto's
		// endpoint from the Secret components/e2e names.
		restart, err := e.applyEC2Secret(context.Background())
		if err != nil {
			s.Fatal(err)
		}
		if restart {
			e.kubectl(s, "-n", systemNS, "rollout", "restart", "deploy/ipledger-eipd")
		}
	}
	out, err := e.node.Kubectl(context.Background(), nil, "-n", systemNS, "rollout", "status", "deploy", "--timeout=5m")
	if err != nil {
		pods, _ := e.node.Kubectl(context.Background(), nil, "-n", systemNS, "get", "pods", "-o", "wide")
		events, _ := e.node.Kubectl(context.Background(), nil, "-n", systemNS, "get", "events", "--sort-by=.lastTimestamp")
		s.Fatalf("kubectl rollout status after applying %s: %v\n%s\n%s\n%s", file, err, out, pods, lastLines(string(events), 30))
	}
}

// releaseNamespace creates the namespace name for a way through.
func (e *env) releaseNamespace(ctx context.Context, s *stage, name string) string {
	if _, err := e.client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
		s.Fatalf("create namespace %s: %v", name, err)
	}
	s.Cleanup(func() { e.deleteNamespace(context.Background(), s, name) })
	return name
}

// deleteNamespace deletes ns and waits until it is gone.
func (e *env) deleteNamespace(ctx context.Context, s *stage, ns string) {
	if err := e.client.CoreV1().Namespaces().Delete(ctx, ns, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		s.Fatalf("delete namespace %s: %v", ns, err)
	}
	testenv.Eventually(s, 2*time.Minute, func() error {
		if _, err := e.client.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			return fmt.Errorf("namespace %s still there (%v)", ns, err)
		}
		return nil
	})
}

// firstPoolRange stands for docs/install.md's 192.0.2.0/28 (TEST-NET-1),
// which is the network of the machine CI runs on (its eth0, its gateway
// 192.0.2.1): a Service given its gateway's address would have kube-proxy
// capture the machine's own packets to it. It is in cluster.TestRanges,
// unroutable off the machine, and no other test uses it.
const firstPoolRange = "10.179.0.0/28"

// firstPool is docs/install.md's first IPPool, applied as it says but for
// its range (firstPoolRange); it returns its name.
func (e *env) firstPool(s *stage) string {
	const name = "first"
	pool := bytes.NewBufferString(`apiVersion: ipledger.io/v1alpha1
kind: IPPool
metadata: {name: ` + name + `}
spec:
  addresses: ["` + firstPoolRange + `"]
`)
	if out, err := e.node.Kubectl(context.Background(), pool, "apply", "-f", "-"); err != nil {
		s.Fatalf("%v\n%s", err, out)
	}
	return name
}

// releaseWhy runs `kubectl ipledger why svc/<name>` with the plugin of the
// release directory's archive for this platform, put on PATH beside the
// pinned kubectl, as a ServiceAccount bound to ipledger:viewer
// (docs/kubectl-ipledger.md), and wants it to name the address and pool.
func (e *env) releaseWhy(ctx context.Context, s *stage, dir, ns, name, ip, pool string) {
	archive := filepath.Join(dir, "kubectl-ipledger_linux_"+runtime.GOARCH+".tar.gz")
	bin := s.TempDir()
	if out, err := exec.CommandContext(ctx, "tar", "-xzf", archive, "-C", bin).CombinedOutput(); err != nil {
		s.Fatalf("tar -xzf %s: %v\n%s", archive, err, out)
	}
	e.kubectl(s, "-n", systemNS, "create", "serviceaccount", releaseOperator)
	e.kubectl(s, "create", "clusterrolebinding", releaseOperatorBinding, "--clusterrole=ipledger:viewer", "--serviceaccount="+systemNS+":"+releaseOperator)
	s.Cleanup(func() {
		e.kubectl(s, "delete", "--ignore-not-found", "clusterrolebinding", releaseOperatorBinding)
	})
	// kubectl takes no flag before a plugin's name: the kubeconfig by
	// KUBECONFIG, which the plugin reads as kubectl does.
	cmd := exec.CommandContext(ctx, filepath.Join(e.node.ToolsBin, "kubectl"),
		"ipledger", "why", "svc/"+name, "-n", ns, "--service-account", releaseOperator, "--timeout", "60s")
	cmd.Env = append(os.Environ(), "PATH="+bin+string(os.PathListSeparator)+os.Getenv("PATH"), "KUBECONFIG="+e.node.KubeconfigPath)
	out, err := cmd.CombinedOutput()
	if err != nil {
		s.Fatalf("kubectl ipledger why svc/%s -n %s (the release's plugin): %v\n%s", name, ns, err, out)
	}
	for _, want := range []string{"Decision:", ip, pool} {
		if !strings.Contains(string(out), want) {
			s.Errorf("kubectl ipledger why svc/%s -n %s (the release's plugin) lacks %q:\n%s", name, ns, want, out)
		}
	}
	version, err := exec.CommandContext(ctx, filepath.Join(bin, "kubectl-ipledger"), "--version").CombinedOutput()
	if err != nil || !strings.Contains(string(version), strings.TrimPrefix(filepath.Base(dir), "v")) {
		s.Errorf("the release's plugin --version: %q (%v), want %s", version, err, filepath.Base(dir))
	}
	s.Logf("kubectl ipledger why svc/%s -n %s:\n%s", name, ns, out)
}

// uninstallRelease takes the install out as docs/upgrading.md
// ("Uninstalling") says, keeping the Services' statuses: back up the
// ledger, stop ipam, drop the pool's finalizer and delete it, `kubectl
// delete -f install/<file>`; then the operator's own grant for the plugin.
// It then wants no ipledger-owned object left (uninstalled) and every
// Service of want still showing its address.
func (e *env) uninstallRelease(ctx context.Context, s *stage, dir, file, ns, pool string, want map[string]string) {
	start := time.Now()
	backup := e.kubectl(s, "-n", systemNS, "get", "cm", "-l", "ipledger.io/ledger=true", "-o", "yaml")
	for _, ip := range want {
		if !strings.Contains(backup, ip) {
			s.Errorf("the ledger backup (kubectl -n %s get cm -l ipledger.io/ledger=true) does not hold %s", systemNS, ip)
		}
	}
	e.kubectl(s, "-n", systemNS, "scale", "deploy/ipledger-ipam", "--replicas=0")
	e.kubectl(s, "-n", systemNS, "wait", "--for=delete", "pod", "-l", "app.kubernetes.io/name=ipledger-ipam", "--timeout=2m")
	e.kubectl(s, "patch", "ipp", pool, "--type=merge", "-p", `{"metadata":{"finalizers":null}}`)
	e.kubectl(s, "delete", "ipp", pool)
	e.kubectl(s, "delete", "-f", filepath.Join(dir, "install", file), "--timeout=5m")
	e.kubectl(s, "delete", "--ignore-not-found", "clusterrolebinding", releaseOperatorBinding)
	var left []string
	testenv.Eventually(s, 3*time.Minute, func() error {
		var err error
		if left, err = e.ipledgerObjects(ctx); err != nil {
			return err
		}
		if len(left) > 0 {
			return fmt.Errorf("%d ipledger objects left: %s", len(left), strings.Join(left, ", "))
		}
		return nil
	})
	for name, ip := range want {
		svc, err := e.client.CoreV1().Services(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			s.Fatal(err)
		}
		if in := svc.Status.LoadBalancer.Ingress; len(in) != 1 || in[0].IP != ip {
			s.Errorf("after the uninstall %s/%s shows %v, want %s: docs/upgrading.md says statuses stay", ns, name, in, ip)
		}
		if f := slices.IndexFunc(svc.Finalizers, func(f string) bool { return strings.Contains(f, "ipledger") }); f >= 0 {
			s.Errorf("after the uninstall %s/%s keeps the finalizer %s, which nothing removes", ns, name, svc.Finalizers[f])
		}
	}
	s.Logf("uninstalled %s in %s", file, time.Since(start).Round(100*time.Millisecond))
}

// ipledgerObjects lists, over every resource the API server serves (but
// Events, which age out), the objects ipledger owns: in its namespace, of
// its API groups, named ipledger… or labelled with ipledger's keys or
// values, as kind/namespace/name.
func (e *env) ipledgerObjects(ctx context.Context) ([]string, error) {
	lists, err := e.client.Discovery().ServerPreferredResources()
	if err != nil && len(lists) == 0 {
		return nil, err
	}
	// Deprecated kinds (v1 Endpoints, ComponentStatus) are listed too,
	// without their warnings.
	cfg := rest.CopyConfig(e.node.RESTConfig())
	cfg.WarningHandler = rest.NoWarnings{}
	client, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	var left []string
	for _, list := range lists {
		gv, err := schema.ParseGroupVersion(list.GroupVersion)
		if err != nil {
			return nil, err
		}
		for _, r := range list.APIResources {
			if strings.Contains(r.Name, "/") || !slices.Contains(r.Verbs, "list") || r.Name == "events" {
				continue
			}
			objs, err := client.Resource(gv.WithResource(r.Name)).List(ctx, metav1.ListOptions{})
			if err != nil {
				if apierrors.IsNotFound(err) || apierrors.IsMethodNotSupported(err) {
					continue
				}
				return nil, fmt.Errorf("list %s: %w", gv.WithResource(r.Name), err)
			}
			for _, o := range objs.Items {
				if ipledgerOwned(gv.Group, o.GetNamespace(), o.GetName(), o.GetLabels()) {
					left = append(left, strings.Trim(r.Kind+"/"+o.GetNamespace()+"/"+o.GetName(), "/"))
				}
			}
		}
	}
	slices.Sort(left)
	return left, nil
}

// ipledgerOwned decides whether an object is ipledger's. The test node's
// name (cluster.NodeName, ipledger-node) is not ipledger's: its Node,
// CSINode, Lease, static Pods and hostname label are the node's.
func ipledgerOwned(group, namespace, name string, labels map[string]string) bool {
	notNode := func(s string) string { return strings.ReplaceAll(s, cluster.NodeName, "") }
	name = notNode(name)
	if namespace == systemNS || name == systemNS || strings.HasSuffix(group, "ipledger.io") ||
		strings.HasPrefix(name, "ipledger") || strings.HasSuffix(name, ".ipledger.io") {
		return true
	}
	for k, v := range labels {
		if strings.Contains(k, "ipledger") || strings.Contains(notNode(v), "ipledger") {
			return true
		}
	}
	return false
}

// dirSize is the bytes of the files under dir.
func dirSize(dir string) (int64, error) {
	var size int64
	err := filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		size += info.Size()
		return nil
	})
	return size, err
}

func TestIPledgerOwned(t *testing.T) {
	for _, tc := range []struct {
		name, group, namespace, object string
		labels                         map[string]string
		want                           bool
	}{
		{"its namespace", "", "", systemNS, nil, true},
		{"anything in its namespace", "", systemNS, "kube-root-ca.crt", nil, true},
		{"its ClusterRole", "rbac.authorization.k8s.io", "", "ipledger:viewer", nil, true},
		{"its admission policy", "admissionregistration.k8s.io", "", "ipledger-own-leases", nil, true},
		{"its CRD", "apiextensions.k8s.io", "", "ippools.ipledger.io", nil, true},
		{"an object of its API group", "ipledger.io", "", "first", nil, true},
		{"labelled by it", "", "default", "x", map[string]string{"ipledger.io/ledger": "true"}, true},
		{"part of it", "", "default", "x", map[string]string{"app.kubernetes.io/part-of": "ipledger"}, true},
		{"a user's Service", "", "release-fresh", "web", map[string]string{"app": "web"}, false},
		{"Kubernetes' own role", "rbac.authorization.k8s.io", "", "view", nil, false},
		{"the test node", "", "", cluster.NodeName, map[string]string{"kubernetes.io/hostname": cluster.NodeName}, false},
		{"the test node's static Pod", "", "kube-system", "kube-proxy-" + cluster.NodeName, nil, false},
	} {
		if got := ipledgerOwned(tc.group, tc.namespace, tc.object, tc.labels); got != tc.want {
			t.Errorf("%s: ipledgerOwned(%q, %q, %q, %v) = %v, want %v", tc.name, tc.group, tc.namespace, tc.object, tc.labels, got, tc.want)
		}
	}
}
