// Package cluster_test installs ipledger from deploy/kustomize/overlays/e2e
// on the real single-node Kubernetes of lab/cluster — images built by
// `make images`, pods, probes, projected tokens, cluster DNS — and checks it
// through the public contract only: kubectl, the Kubernetes API, grpcurl
// through `kubectl port-forward`, and moto as the EC2 eipd reaches from its
// pod. `make test-cluster` runs it (as root); it is not part of `make test`.
//
// TestMain brings the node up and takes it down at the end, failing the run
// when Down leaves the machine different from what Up found. With
// IPLEDGER_CLUSTER_REUSE=1 it uses the node that is up (`make cluster-up`)
// and leaves it up.
package cluster_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/ipledger/ipledger/lab/cluster"
	"github.com/ipledger/ipledger/lab/controlplane"
	"github.com/ipledger/ipledger/lab/ec2test"
	"github.com/ipledger/ipledger/test/e2e/journey"
)

// clusterID is eipd's --cluster-id in overlays/e2e (eip.yaml).
const clusterID = "ipledger-e2e"

// env is the installed node the tests share.
type env struct {
	node    *cluster.Cluster
	client  kubernetes.Interface
	dynamic dynamic.Interface
	moto    *ec2test.Moto
}

var shared *env

func TestMain(m *testing.M) { os.Exit(run(m)) }

func run(m *testing.M) (code int) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	logf := func(format string, args ...any) { fmt.Fprintf(os.Stderr, format+"\n", args...) }
	opts := cluster.Options{Log: logf}
	reuse := os.Getenv("IPLEDGER_CLUSTER_REUSE") != ""
	// The node is the machine's: no other run or ipledger-cluster command
	// touches it until this run is done.
	release, err := cluster.Acquire(logf)
	if err != nil {
		logf("test-cluster: %v", err)
		return 1
	}
	defer release()
	// A killed run leaves what its tests made on the machine: gone before
	// Up, which takes the half-up node down and finds the machine as its
	// snapshot says, or Down names the leftover as the node's.
	removeTestLeftovers(logf)
	// The release directory is built before the node starts: the way home
	// from it (release_test.go) runs first on the fresh node.
	var releaseDir string
	if os.Getenv("IPLEDGER_CLUSTER_RELEASE") == "skip" {
		released.skipped = "IPLEDGER_CLUSTER_RELEASE=skip"
	} else if releaseDir, err = releaseDirectory(ctx, logf); err != nil {
		logf("test-cluster: %v", err)
		return 1
	}
	start := time.Now()
	var node *cluster.Cluster
	if reuse {
		node, err = cluster.Get(ctx, opts)
	} else {
		node, err = cluster.Up(ctx, opts)
		defer func() {
			downStart := time.Now()
			if err := cluster.Down(opts); err != nil {
				logf("test-cluster: %v", err)
				code = 1
				return
			}
			logf("test-cluster: node down in %s", time.Since(downStart).Round(time.Millisecond))
		}()
	}
	if err != nil {
		logf("test-cluster: %v", err)
		return 1
	}
	logf("test-cluster: node up in %s", time.Since(start).Round(time.Millisecond))
	shared, err = install(ctx, node, releaseDir, start, logf)
	if shared != nil && shared.moto != nil {
		defer shared.moto.Stop()
	}
	if err != nil {
		logf("test-cluster: %v", err)
		return 1
	}
	logf("test-cluster: ipledger rolled out %s after start", time.Since(start).Round(time.Millisecond))
	return m.Run()
}

// removeTestLeftovers deletes the host state that tests make and a killed
// run leaves behind: upstreamLink (routeOnTheMachine).
func removeTestLeftovers(logf func(string, ...any)) {
	if _, err := os.Stat(filepath.Join("/sys/class/net", upstreamLink)); err != nil {
		return
	}
	if out, err := exec.Command("ip", "link", "del", upstreamLink).CombinedOutput(); err != nil {
		logf("test-cluster: delete the link %s a killed run left: %v: %s", upstreamLink, err, out)
		return
	}
	logf("test-cluster: deleted the link %s a killed run left", upstreamLink)
}

// install starts moto on the node address, takes ipledger home from
// releaseDir and uninstalls it (release_test.go; none when empty), imports
// the images of `make images`, gives eipd its endpoint through the Secret
// components/e2e reads, goes through the previous release (upgrade_test.go),
// applies overlays/e2e and waits for every Deployment to roll out.
func install(ctx context.Context, node *cluster.Cluster, releaseDir string, nodeStart time.Time, logf func(string, ...any)) (*env, error) {
	root, err := controlplane.RepoRoot()
	if err != nil {
		return nil, err
	}
	images := os.Getenv("IPLEDGER_IMAGES")
	if images == "" {
		images = filepath.Join(root, ".dev", "images")
	}
	e := &env{node: node}
	if e.client, err = kubernetes.NewForConfig(node.RESTConfig()); err != nil {
		return nil, err
	}
	if e.dynamic, err = dynamic.NewForConfig(node.RESTConfig()); err != nil {
		return nil, err
	}
	if e.moto, err = ec2test.StartAt(node.NodeIP); err != nil {
		return e, err
	}
	if releaseDir != "" {
		if err := e.throughReleaseDirectory(ctx, releaseDir, nodeStart, logf); err != nil {
			return e, err
		}
	}
	if err := node.ImportImages(ctx, images); err != nil {
		return e, err
	}
	overlay := filepath.Join(root, "deploy", "kustomize", "overlays", "e2e")
	// The previous release first, upgraded to overlay (upgrade_test.go).
	if err := e.throughPreviousRelease(ctx, root, overlay, logf); err != nil {
		return e, err
	}
	if _, err := node.Kubectl(ctx, nil, "apply", "--server-side", "-k", overlay); err != nil {
		return e, err
	}
	restart, err := e.applyEC2Secret(ctx)
	if err != nil {
		return e, err
	}
	if restart {
		// A node reused from an earlier run: eipd read the old moto's
		// endpoint at its start.
		if _, err := node.Kubectl(ctx, nil, "-n", journey.SystemNamespace, "rollout", "restart", "deploy/ipledger-eipd"); err != nil {
			return e, err
		}
	}
	deployments, err := e.client.AppsV1().Deployments(journey.SystemNamespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return e, err
	}
	for _, d := range deployments.Items {
		if _, err := node.Kubectl(ctx, nil, "-n", journey.SystemNamespace, "rollout", "status", "deploy/"+d.Name, "--timeout=5m"); err != nil {
			out, _ := node.Kubectl(ctx, nil, "-n", journey.SystemNamespace, "get", "pods", "-o", "wide")
			return e, fmt.Errorf("%w\n%s", err, out)
		}
		logf("test-cluster: deploy/%s rolled out", d.Name)
	}
	return e, nil
}

// applyEC2Secret writes the Secret ipledger-e2e-ec2 pointing eipd at this
// run's moto; it reports whether an older Secret said otherwise.
func (e *env) applyEC2Secret(ctx context.Context) (changed bool, err error) {
	data := map[string][]byte{
		"AWS_ENDPOINT_URL_EC2":  []byte(e.moto.URL),
		"AWS_REGION":            []byte(ec2test.Region),
		"AWS_ACCESS_KEY_ID":     []byte("testing"),
		"AWS_SECRET_ACCESS_KEY": []byte("testing"),
	}
	secrets := e.client.CoreV1().Secrets(journey.SystemNamespace)
	old, err := secrets.Get(ctx, "ipledger-e2e-ec2", metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		_, err = secrets.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "ipledger-e2e-ec2"}, Data: data}, metav1.CreateOptions{})
		return false, err
	}
	if err != nil {
		return false, err
	}
	if bytes.Equal(old.Data["AWS_ENDPOINT_URL_EC2"], data["AWS_ENDPOINT_URL_EC2"]) {
		return false, nil
	}
	old.Data = data
	_, err = secrets.Update(ctx, old, metav1.UpdateOptions{})
	return true, err
}

func get(t *testing.T) *env {
	t.Helper()
	if shared == nil {
		t.Fatal("test-cluster: no node (TestMain did not install ipledger)")
	}
	return shared
}

// namespace creates a namespace for the test, deleted at its end.
func (e *env) namespace(t *testing.T) string {
	t.Helper()
	name := strings.ToLower(strings.NewReplacer("/", "-", "_", "-").Replace(t.Name()))
	ns, err := e.client.CoreV1().Namespaces().Create(context.Background(), &corev1.Namespace{
		ObjectMeta: metav1.ObjectMeta{GenerateName: strings.Trim(name, "-") + "-"},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create namespace: %v", err)
	}
	t.Cleanup(func() {
		_ = e.client.CoreV1().Namespaces().Delete(context.Background(), ns.Name, metav1.DeleteOptions{})
	})
	return ns.Name
}

// hackBuild is $env when set, else the path hack/<script> prints: the
// test-only builds (speaker, NetworkPolicy enforcer, e2e binary) are cached
// by their scripts, so a warm call returns at once.
func hackBuild(t *testing.T, env, script string) string {
	t.Helper()
	if path := os.Getenv(env); path != "" {
		return path
	}
	root, err := controlplane.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	cmd := exec.Command("bash", filepath.Join(root, "hack", script))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("hack/%s: %v\n%s", script, err, stderr.String())
	}
	t.Logf("hack/%s in %s", script, time.Since(start).Round(time.Millisecond))
	return strings.TrimSpace(string(out))
}
