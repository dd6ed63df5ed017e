package e2e

import (
	"bytes"
	"context"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/ipledger/ipledger/lab/containerimage"
	"github.com/ipledger/ipledger/lab/testenv"
	"github.com/ipledger/ipledger/test/e2e/docblock"
)

// TestNoInstallSharesAClusterID: an Elastic IP's ipledger.io/cluster tag is
// what keeps two clusters of one AWS account apart, so no kustomization we
// ship may choose the cluster ID for the operator (eipd refuses to start
// without one, saying how to set it). The e2e overlay is the exception: it
// runs against a moto thrown away with the test's node, never an account.
func TestNoInstallSharesAClusterID(t *testing.T) {
	for _, k := range kustomizations {
		if k == e2eOverlay {
			continue
		}
		if bytes.Contains(render(t, k), []byte("--cluster-id")) {
			t.Errorf("%s sets eipd's --cluster-id: every cluster installed from it would share the tag and sweep each other's addresses", k)
		}
	}
}

// eipInstall is the base with components/eip and a cluster ID, as
// docs/eipd.md shows an overlay; eipNoClusterID leaves the ID out.
const (
	eipInstall     = "testdata/eip"
	eipNoClusterID = "testdata/eip-without-cluster-id"
)

// TestEIPComponentDemandsItsClusterID: components/eip builds only with the
// cluster ID of the ConfigMap ipledger-eip, so an install without one fails
// at `kustomize build` (naming the ConfigMap and its field), never as a
// crash-looping eipd; with one, eipd runs with it, the placeholder is gone
// and the ConfigMap (local-config) is not applied.
func TestEIPComponentDemandsItsClusterID(t *testing.T) {
	env := testenv.Get(t)
	out, err := env.Kubectl(context.Background(), "kustomize", eipNoClusterID)
	if err == nil {
		t.Fatalf("%s built without a cluster ID:\n%.2000s", eipNoClusterID, out)
	}
	for _, want := range []string{"components/eip", "ConfigMap", "ipledger-eip", "data.cluster-id"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("building %s without a cluster ID fails with %q, which does not name %s", eipNoClusterID, err, want)
		}
	}
	rendered := renderDir(t, eipInstall)
	found := false
	for _, d := range deployments(t, rendered) {
		if d.Name != "ipledger-eipd" {
			continue
		}
		found = true
		var ids []string
		for _, a := range d.Spec.Template.Spec.Containers[0].Args {
			if v, ok := strings.CutPrefix(a, "--cluster-id="); ok {
				ids = append(ids, v)
			}
		}
		if !slices.Equal(ids, []string{"prod-eu-1"}) {
			t.Errorf("%s: eipd runs with --cluster-id %q, want once prod-eu-1 (testdata/eip/eip.yaml)", eipInstall, ids)
		}
	}
	if !found {
		t.Fatalf("%s renders no Deployment ipledger-eipd", eipInstall)
	}
	if bytes.Contains(rendered, []byte("kind: ConfigMap")) {
		t.Errorf("%s applies a ConfigMap; ipledger-eip is local-config, read by kustomize only", eipInstall)
	}
}

// eipdRemoval marks the block of docs/upgrading.md that removes eipd from an
// install (test/cluster runs it on the node).
const eipdRemoval = "leaves the old eipd running"

// TestUpgradeNoteRemovesWhatComponentEIPAdds: the commands docs/upgrading.md
// gives to remove eipd (an apply without prune leaves it) name every object
// components/eip adds to the base, and nothing else but the Lease eipd
// held: a name the component gains must be added to the note.
func TestUpgradeNoteRemovesWhatComponentEIPAdds(t *testing.T) {
	env := testenv.Get(t)
	note, err := os.ReadFile(filepath.Join(env.Root, "docs", "upgrading.md"))
	if err != nil {
		t.Fatal(err)
	}
	cmds, err := docblock.Commands(string(note), eipdRemoval)
	if err != nil {
		t.Fatalf("docs/upgrading.md: %v", err)
	}
	named := map[string]bool{}
	for _, c := range cmds {
		for _, w := range c {
			if kind, name, ok := strings.Cut(w, "/"); ok {
				named[kind+"/"+name] = true
			}
		}
	}
	added := map[string]bool{"lease/ipledger-eipd": true}
	inBase := map[string]bool{}
	for _, o := range objectIDs(t, render(t, "base")) {
		inBase[o] = true
	}
	for _, o := range objectIDs(t, renderDir(t, eipInstall)) {
		if !inBase[o] {
			added[o] = true
		}
	}
	for o := range added {
		if !named[o] {
			t.Errorf("components/eip adds %s, which docs/upgrading.md's removal of eipd does not delete", o)
		}
	}
	for o := range named {
		if !added[o] {
			t.Errorf("docs/upgrading.md's removal of eipd deletes %s, which components/eip does not add", o)
		}
	}
}

// objectIDs are the rendered objects as kubectl names them: kind (lower
// case)/name.
func objectIDs(t *testing.T, rendered []byte) []string {
	t.Helper()
	var ids []string
	for _, o := range objectsOf[metav1.PartialObjectMetadata](t, rendered, "") {
		ids = append(ids, strings.ToLower(o.Kind)+"/"+o.Name)
	}
	return ids
}

// TestProductionShipsSafeDefaults: what production sets, each the last
// occurrence of its flag (the one the flag package keeps) on its Deployment.
// (Production runs no eipd; a production overlay adding components/eip
// sets eipd's --legacy-opt-in=ignore itself: docs/eipd.md.)
//   - endpoints --probe-allowed-cidrs=none: whoever may create an
//     ExternalWorkload aims the leader's readiness probes, so production
//     dials no workload network it was not told of (never empty, which is
//     any address); an operator's overlay appends where its VMs live.
func TestProductionShipsSafeDefaults(t *testing.T) {
	const k = "overlays/production"
	want := map[string][2]string{
		"ipledger-endpoints": {"--probe-allowed-cidrs", "none"},
	}
	for _, d := range deployments(t, render(t, k)) {
		w, ok := want[d.Name]
		if !ok {
			continue
		}
		delete(want, d.Name)
		if last := lastFlag(d, w[0]); last != w[1] {
			t.Errorf("%s: %s runs with %s=%q (empty: not set), want %s", k, d.Name, w[0], last, w[1])
		}
	}
	for name := range want {
		t.Errorf("%s renders no Deployment %s", k, name)
	}
}

// TestProductionEnforcesWorkloadGrants: production serves an ExternalWorkload
// only at addresses granted to its namespace (components/workload-grants):
// endpoints' last --workload-grants is enforce, and the admission policy is
// bound to deny; the other installs leave grants off.
func TestProductionEnforcesWorkloadGrants(t *testing.T) {
	for k, want := range map[string]string{"overlays/production": "enforce", "base": "", "overlays/cloud": "", "overlays/e2e": ""} {
		rendered := render(t, k)
		for _, d := range deployments(t, rendered) {
			if d.Name != "ipledger-endpoints" {
				continue
			}
			if last := lastFlag(d, "--workload-grants"); last != want {
				t.Errorf("%s: endpoints runs with --workload-grants=%q, want %q", k, last, want)
			}
		}
		binding := findObject(t, rendered, "ValidatingAdmissionPolicyBinding", "ipledger-externalworkload-grants")
		switch {
		case want == "enforce" && binding == nil:
			t.Errorf("%s binds no ipledger-externalworkload-grants", k)
		case want == "enforce":
			spec, _ := binding["spec"].(map[string]any)
			if actions, _ := spec["validationActions"].([]any); len(actions) != 1 || actions[0] != "Deny" {
				t.Errorf("%s: ipledger-externalworkload-grants bound with %v, want [Deny]", k, spec["validationActions"])
			}
		case binding != nil:
			t.Errorf("%s binds ipledger-externalworkload-grants without enforcing grants in endpoints", k)
		}
	}
}

// lastFlag is the value the Deployment's container gets for flag: the last
// one given, which the flag package keeps ("" when none).
func lastFlag(d appsv1.Deployment, flag string) string {
	last := ""
	for _, a := range d.Spec.Template.Spec.Containers[0].Args {
		if v, ok := strings.CutPrefix(a, flag+"="); ok {
			last = v
		}
	}
	return last
}

// clusterProduction is overlays/production as the real-node tests apply it.
const clusterProduction = "../cluster/testdata/production"

// TestE2EOverlayRunsTheImagesMakeImagesBuilds: the real-node tests install
// overlays/e2e, and overlays/production on top of it (test/cluster's
// testdata/production), on a node with no registry, so every container must
// run an image `make images` builds (every one of them, under the tag it
// gives, in one of the two: ipledger-signer runs only with TLS) and never
// pull it.
func TestE2EOverlayRunsTheImagesMakeImagesBuilds(t *testing.T) {
	built := map[string]bool{}
	for _, b := range containerimage.Binaries {
		built[b.Ref(containerimage.Tag)] = false
	}
	for _, d := range append(deployments(t, render(t, e2eOverlay)), deployments(t, renderDir(t, clusterProduction))...) {
		for _, c := range append(d.Spec.Template.Spec.InitContainers, d.Spec.Template.Spec.Containers...) {
			if _, ok := built[c.Image]; !ok {
				t.Errorf("Deployment %s, container %s: image %s is not one `make images` builds (%v)", d.Name, c.Name, c.Image, slices.Sorted(maps.Keys(built)))
			}
			built[c.Image] = true
			if c.ImagePullPolicy != corev1.PullNever {
				t.Errorf("Deployment %s, container %s: imagePullPolicy %q, want Never (the node has no registry)", d.Name, c.Name, c.ImagePullPolicy)
			}
		}
	}
	for ref, used := range built {
		if !used {
			t.Errorf("`make images` builds %s, which no Deployment of %s or %s runs: the real-node tests would not test it", ref, e2eOverlay, clusterProduction)
		}
	}
}

// TestSpreadConstraintsSelectTheirOwnPods: a topology spread constraint
// counts the pods its labelSelector matches; one that matches none of its
// own Deployment's pods spreads nothing (components/high-availability's did
// until the pods carried app.kubernetes.io/part-of).
func TestSpreadConstraintsSelectTheirOwnPods(t *testing.T) {
	for _, k := range kustomizations {
		for _, d := range deployments(t, render(t, k)) {
			for _, c := range d.Spec.Template.Spec.TopologySpreadConstraints {
				sel, err := metav1.LabelSelectorAsSelector(c.LabelSelector)
				if err != nil {
					t.Fatalf("%s: Deployment %s: %v", k, d.Name, err)
				}
				if !sel.Matches(labels.Set(d.Spec.Template.Labels)) {
					t.Errorf("%s: Deployment %s spreads pods matching %s, and its own pods (%v) do not", k, d.Name, sel, d.Spec.Template.Labels)
				}
			}
		}
	}
}

// render is kustomization k of deploy/kustomize as the pinned kubectl
// builds it.
func render(t *testing.T, k string) []byte {
	t.Helper()
	env := testenv.Get(t)
	out, err := env.Kubectl(context.Background(), "kustomize", filepath.Join(env.Root, "deploy/kustomize", k))
	if err != nil {
		t.Fatal(err)
	}
	return out
}
