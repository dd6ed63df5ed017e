package cluster_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ipledger/ipledger/lab/containerimage"
	"github.com/ipledger/ipledger/lab/controlplane"
	"github.com/ipledger/ipledger/lab/testenv"
	"github.com/ipledger/ipledger/test/e2e/docblock"
)

// TestInstallFlavours applies each install a user applies, exactly as
// docs/install.md says (`kubectl apply --server-side -k <dir>`, then
// `kubectl -n ipledger-system rollout status deploy`), and waits for a
// LoadBalancer Service to get its address:
//   - deploy/kustomize/base, the bare-metal install (no eipd, no setting);
//   - deploy/kustomize/overlays/cloud (a Service of class ipledger.io/lb);
//   - the base with components/eip (testdata/eip: its cluster ID, and eipd
//     pointed at the test's moto through a Secret, as docs/eipd.md says).
//
// The flavours go into the shared install's namespace and names, as they
// would on a user's cluster, so the test takes the shared install over
// rather than beside it: the manifests are applied unmodified, naming the
// release's images (ghcr.io/ipledger/<service>:v<VERSION>), which the test
// tags in the node's containerd over the images `make images` built — the
// node has no registry, and those are what the release ships. Each flavour
// starts with no watcher, ipam or endpoints Deployment (deleted, with their
// pods), so the time logged, from the apply to the first address, is a
// fresh install's. base comes after the EIP flavour and checks what
// docs/upgrading.md says of an install upgraded from one with eipd: an apply
// without prune leaves eipd running, and its commands remove it.
//
// At the end overlays/e2e is applied again (as TestOverlaysRollOut does)
// and every Deployment rolls out, so the tests after it find the shared
// install as TestMain left it.
func TestInstallFlavours(t *testing.T) {
	e := get(t)
	ctx := context.Background()
	root, err := controlplane.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	version, err := os.ReadFile(filepath.Join(root, "VERSION"))
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range deployments {
		svc := strings.TrimPrefix(d, "ipledger-")
		dev := containerimage.Registry + "/" + svc + ":dev"
		release := containerimage.Registry + "/" + svc + ":v" + strings.TrimSpace(string(version))
		if err := e.node.TagImage(ctx, dev, release); err != nil {
			t.Fatal(err)
		}
	}
	e2e := filepath.Join(root, "deploy", "kustomize", "overlays", "e2e")
	// The shared install's fields owned by the manager TestMain applied
	// them with, as on a user's cluster (a test's `kubectl scale` takes
	// replicas, and the flavours' apply would conflict on eipd's).
	e.apply(t, e2e)
	t.Cleanup(func() {
		e.apply(t, e2e)
		for _, d := range deployments {
			e.rolledOut(t, d)
		}
	})
	ns := e.namespace(t)
	e.pool(t, ns)
	kustomize := filepath.Join(root, "deploy", "kustomize")
	eip, err := filepath.Abs(filepath.Join("testdata", "eip"))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []struct {
		name, dir string
		class     string // the Service's spec.loadBalancerClass; empty for none
		eipd      bool   // the flavour runs eipd
	}{
		{"eip", eip, "", true},
		{"base", filepath.Join(kustomize, "base"), "", false},
		{"cloud", filepath.Join(kustomize, "overlays", "cloud"), "ipledger.io/lb", false},
	} {
		t.Run(f.name, func(t *testing.T) {
			e.withoutServers(t)
			start := time.Now()
			e.kubectl(t, "apply", "--server-side", "-k", f.dir)
			if f.name == "base" {
				// Applied over the EIP flavour without prune: eipd stays.
				if _, err := e.client.AppsV1().Deployments(systemNS).Get(ctx, "ipledger-eipd", metav1.GetOptions{}); err != nil {
					t.Fatalf("after applying base without prune, deploy/ipledger-eipd: %v; docs/upgrading.md says it keeps running", err)
				}
				e.removeEIPD(t)
			}
			out := e.kubectl(t, "-n", systemNS, "rollout", "status", "deploy", "--timeout=5m")
			t.Logf("kubectl rollout status:\n%s", out)
			if _, err := e.client.AppsV1().Deployments(systemNS).Get(ctx, "ipledger-eipd", metav1.GetOptions{}); apierrors.IsNotFound(err) == f.eipd {
				t.Errorf("deploy/ipledger-eipd: %v, want it installed: %v", err, f.eipd)
			}
			svc := loadBalancer(ns, f.name)
			if f.class != "" {
				svc.Spec.LoadBalancerClass = &f.class
			}
			if _, err := e.client.CoreV1().Services(ns).Create(ctx, svc, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			ip := e.ips(t, ns, []string{f.name}, 3*time.Minute)[f.name]
			t.Logf("%s: from apply to the first address (%s): %s", f.name, ip, time.Since(start).Round(time.Second))
		})
	}
}

// withoutServers deletes the watcher's, ipam's and endpoints' Deployments
// and waits until their pods are gone: the next apply starts them afresh.
func (e *env) withoutServers(t *testing.T) {
	t.Helper()
	servers := []string{"ipledger-watcher", "ipledger-ipam", "ipledger-endpoints"}
	e.kubectl(t, append([]string{"-n", systemNS, "delete", "deploy", "--ignore-not-found"}, servers...)...)
	testenv.Eventually(t, 3*time.Minute, func() error {
		list, err := e.client.CoreV1().Pods(systemNS).List(context.Background(), metav1.ListOptions{
			LabelSelector: "app.kubernetes.io/name in (" + strings.Join(servers, ",") + ")",
		})
		if err != nil {
			return err
		}
		if n := len(list.Items); n > 0 {
			return fmt.Errorf("%d pods of %v left, e.g. %s (%s)", n, servers, list.Items[0].Name, list.Items[0].Status.Phase)
		}
		return nil
	})
}

// eipdRemoval marks the block of docs/upgrading.md that removes eipd from
// an install (test/e2e's TestUpgradeNoteRemovesWhatComponentEIPAdds checks
// that it names everything components/eip adds).
const eipdRemoval = "leaves the old eipd running"

// removeEIPD runs, word for word, docs/upgrading.md's kubectl commands that
// remove what an install with eipd had and one without it does not (an
// apply without prune leaves them), and checks that eipd is gone.
func (e *env) removeEIPD(t testing.TB) {
	t.Helper()
	root, err := controlplane.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	note, err := os.ReadFile(filepath.Join(root, "docs", "upgrading.md"))
	if err != nil {
		t.Fatal(err)
	}
	cmds, err := docblock.Commands(string(note), eipdRemoval)
	if err != nil {
		t.Fatalf("docs/upgrading.md: %v", err)
	}
	for _, c := range cmds {
		if c[0] != "kubectl" {
			t.Fatalf("docs/upgrading.md removes eipd with %q, not kubectl", c)
		}
		t.Logf("docs/upgrading.md: %s", strings.Join(c, " "))
		e.kubectl(t, c[1:]...)
	}
	testenv.Eventually(t, 2*time.Minute, func() error {
		pods, err := e.client.CoreV1().Pods(systemNS).List(context.Background(), metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=ipledger-eipd"})
		if err != nil {
			return err
		}
		if len(pods.Items) > 0 {
			return fmt.Errorf("%d eipd pods left, e.g. %s", len(pods.Items), pods.Items[0].Name)
		}
		return nil
	})
	if _, err := e.client.CoreV1().ServiceAccounts(systemNS).Get(context.Background(), "ipledger-eipd", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("serviceaccount/ipledger-eipd after the removal: %v, want it gone", err)
	}
}
