package e2e

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/ipledger/ipledger/lab/controlplane"
	"github.com/ipledger/ipledger/lab/objdiff"
	"github.com/ipledger/ipledger/lab/release"
	"github.com/ipledger/ipledger/lab/testenv"
)

// chartDir is the Helm chart, from the repository's root. Kustomize is the
// source of truth (docs/architecture.md's install): the chart's files/ are
// generated from it (chartPieces) and its templates render, for each choice
// of values.yaml, what kustomize builds for the same choice (chartCases).
const chartDir = "deploy/helm/ipledger"

// chartPieces are the chart's files/<name>.yaml: the objects kustomization
// with builds and without does not (every object, without ""), as kustomize
// prints them, but for the objects the chart's templates render because a
// choice changes them (templated).
var chartPieces = []struct{ name, with, without string }{
	{"base", "deploy/kustomize/base", ""},
	{"eip", "test/e2e/testdata/eip", "deploy/kustomize/base"},
	{"tls-signer", "test/e2e/testdata/helm/tls-signer", "deploy/kustomize/base"},
	{"cert-manager", "test/e2e/testdata/cert-manager", "test/e2e/testdata/eip"},
	{"prometheus", "test/e2e/testdata/helm/prometheus", "deploy/kustomize/base"},
	{"monitoring", "test/e2e/testdata/monitoring", "test/e2e/testdata/eip"},
	{"workload-grants", "test/e2e/testdata/helm/workload-grants", "deploy/kustomize/base"},
	{"workload-grants-report", "test/e2e/testdata/helm/workload-grants-report", "deploy/kustomize/base"},
	{"kube-vip", "test/e2e/testdata/kube-vip", "deploy/kustomize/base"},
	{"aggregated-api", "test/e2e/testdata/aggregated-api", "deploy/kustomize/base"},
}

// templated says whether the chart renders an object from a template (a
// choice changes it) rather than from files/.
func templated(o objdiff.Object) bool {
	switch id := objdiff.ID(o); {
	case o["kind"] == "Deployment":
		return true
	case id == "NetworkPolicy ipledger-system/ipledger-grpc": // components/eip adds eipd
		return true
	}
	return false
}

// chartCases are the choices the drift test renders both ways: values for
// the chart (@<file> reads them from a file of the repository), and the
// kustomization (from the repository's root) that makes the same choices:
// every shipped install flavour (deploy/helm/values-<overlay>.yaml, which a
// release ships beside the chart), every component on its own, and all of
// them at once.
var chartCases = []struct{ name, kustomization, values string }{
	{"base (defaults)", "deploy/kustomize/base", ""},
	{"overlays/production", "deploy/kustomize/overlays/production", "@deploy/helm/values-production.yaml"},
	{"overlays/cloud", "deploy/kustomize/overlays/cloud", "@deploy/helm/values-cloud.yaml"},
	{"high-availability", "test/e2e/testdata/helm/high-availability", "highAvailability: true\n"},
	{"eip with a cluster ID", "test/e2e/testdata/eip", "eip: {enabled: true, clusterID: prod-eu-1}\n"},
	{"eip and tls-signer", "test/e2e/testdata/eip-tls-signer", "eip: {enabled: true, clusterID: prod-eu-1}\ntls: signer\n"},
	{"tls secrets", "test/e2e/testdata/helm/tls-secrets", "tls: secrets\n"},
	{"eip and cert-manager", "test/e2e/testdata/cert-manager", "eip: {enabled: true, clusterID: prod-eu-1}\ntls: cert-manager\n"},
	{"eip, high-availability and monitoring", "test/e2e/testdata/monitoring",
		"eip: {enabled: true, clusterID: prod-eu-1}\nhighAvailability: true\nmonitoring: true\n"},
	{"prometheus", "test/e2e/testdata/helm/prometheus", "prometheus: true\n"},
	{"workload grants reported", "test/e2e/testdata/helm/workload-grants-report", "endpoints: {workloadGrants: report}\n"},
	{"workload grants enforced", "test/e2e/testdata/helm/workload-grants", "endpoints: {workloadGrants: enforce}\n"},
	{"kube-vip", "test/e2e/testdata/kube-vip", "ipam: {kubeVIP: true}\n"},
	{"aggregated API", "test/e2e/testdata/aggregated-api", "aggregatedAPI: true\n"},
	{"another lb-class, required", "test/e2e/testdata/helm/lb-class", "ipam: {lbClass: example.com/lb, requireLBClass: true}\n"},
	{"gateway namespaces and probe networks", "test/e2e/testdata/helm/networks",
		"ipam: {gatewayServiceNamespaces: [envoy-gateway-system, gateways]}\n" +
			"endpoints: {probeAllowedCIDRs: '192.0.2.0/24,2001:db8::/64', podCIDRs: [10.244.0.0/16], serviceCIDRs: [10.96.0.0/12], probeDeniedCIDRs: [10.0.0.0/24]}\n"},
	{"everything", "test/e2e/testdata/helm/everything",
		"eip: {enabled: true, clusterID: everything-1}\nhighAvailability: true\ntls: signer\nprometheus: true\n" +
			"ipam: {lbClass: example.com/lb, requireLBClass: true, kubeVIP: true, gatewayServiceNamespaces: [envoy-gateway-system]}\n" +
			"endpoints: {workloadGrants: report, probeAllowedCIDRs: 192.0.2.0/24}\n"},
}

// TestHelmChartPiecesAreWhatKustomizeBuilds: the chart's files/ are
// generated from the kustomize tree (chartPieces); a change there shows up
// here until `go test ./test/e2e -run 'Golden|Helm' -update` regenerates
// them.
func TestHelmChartPiecesAreWhatKustomizeBuilds(t *testing.T) {
	env := testenv.Get(t)
	for _, p := range chartPieces {
		t.Run(p.name, func(t *testing.T) {
			var skip map[string]bool
			if p.without != "" {
				skip = map[string]bool{}
				for _, d := range kustomizeDocs(t, p.without) {
					skip[objdiff.ID(d.obj)] = true
				}
			}
			var docs []string
			for _, d := range kustomizeDocs(t, p.with) {
				if skip[objdiff.ID(d.obj)] || templated(d.obj) {
					continue
				}
				docs = append(docs, d.text)
			}
			if len(docs) == 0 {
				t.Fatalf("%s adds no object to %s", p.with, p.without)
			}
			want := []byte(strings.Join(docs, "---\n"))
			file := filepath.Join(env.Root, chartDir, "files", p.name+".yaml")
			if *update {
				if err := os.WriteFile(file, want, 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			got, err := os.ReadFile(file)
			if err != nil {
				t.Fatalf("%v (run with -update to create it)", err)
			}
			if !bytes.Equal(got, want) {
				what := p.with + " builds"
				if p.without != "" {
					what = p.with + " adds to " + p.without
				}
				t.Errorf("%s/files/%s.yaml is not what %s: run `go test ./test/e2e -run 'Golden|Helm' -update`", chartDir, p.name, what)
			}
		})
	}
}

// TestHelmChartRendersWhatKustomizeBuilds is the drift test: for each of
// chartCases, Helm (v4, hack/build-helm.sh) renders the chart with the
// case's values, kustomize builds the case's kustomization, and the two
// must be the same objects, field for field (lab/objdiff; a difference names
// the object and the field).
func TestHelmChartRendersWhatKustomizeBuilds(t *testing.T) {
	env := testenv.Get(t)
	helm := helmBin(t)
	for _, c := range chartCases {
		t.Run(c.name, func(t *testing.T) {
			if file, ok := strings.CutPrefix(c.values, "@"); ok {
				b, err := os.ReadFile(filepath.Join(env.Root, file))
				if err != nil {
					t.Fatal(err)
				}
				c.values = string(b)
			}
			want, err := env.Kubectl(context.Background(), "kustomize", filepath.Join(env.Root, c.kustomization))
			if err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			got, err := helmTemplate(t, helm, filepath.Join(env.Root, chartDir), c.values)
			if err != nil {
				t.Fatal(err)
			}
			took := time.Since(start)
			diffs, err := objdiff.Diff("helm", got, "kustomize", want, 10)
			if err != nil {
				t.Fatal(err)
			}
			for _, d := range diffs {
				t.Errorf("%s", d)
			}
			if len(diffs) > 0 {
				t.Errorf("the chart with values\n%s\nrenders other objects than %s (above): change the chart's templates (or values), not the kustomize tree", indent(c.values), c.kustomization)
			}
			objs, err := objdiff.Parse(want)
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("%d objects compared, %d differences; helm template took %v", len(objs), len(diffs), took.Round(time.Millisecond))
		})
	}
}

// TestEveryShippedOverlayHasChartValues: each install flavour a release
// ships (lab/release.Installs) has its chart values, compared above, and the
// release ships them beside the chart.
func TestEveryShippedOverlayHasChartValues(t *testing.T) {
	env := testenv.Get(t)
	entries, err := os.ReadDir(filepath.Join(env.Root, "deploy/kustomize/overlays"))
	if err != nil {
		t.Fatal(err)
	}
	var overlays []string
	for _, e := range entries {
		overlays = append(overlays, e.Name())
	}
	for _, in := range release.Installs(overlays) {
		if in.Name == "base" {
			continue
		}
		file := release.ChartValuesFile(in.Name)
		if _, err := os.Stat(filepath.Join(env.Root, "deploy/helm", file)); err != nil {
			t.Errorf("overlays/%s ships, and deploy/helm/%s, its chart values, is missing: %v", in.Name, file, err)
			continue
		}
		found := false
		for _, c := range chartCases {
			found = found || c.values == "@deploy/helm/"+file && c.kustomization == "deploy/kustomize/"+in.Dir
		}
		if !found {
			t.Errorf("no chartCases entry renders deploy/helm/%s against deploy/kustomize/%s", file, in.Dir)
		}
	}
}

// TestHelmChartRefusesWhatKustomizeRefuses: an EIP install without its
// cluster ID fails to render, as components/eip fails to build, with a
// message naming the value; so do a choice the chart does not know and a
// misspelt value (values.schema.json).
func TestHelmChartRefusesWhatKustomizeRefuses(t *testing.T) {
	env := testenv.Get(t)
	helm := helmBin(t)
	for _, c := range []struct{ values, want string }{
		{"eip: {enabled: true}\n", "eip.clusterID"},
		{"tls: mtls\n", "tls"},
		{"highAvailabilty: true\n", "highAvailabilty"},
		{"prometheus: true\nmonitoring: true\n", "not both"},
	} {
		out, err := helmTemplate(t, helm, filepath.Join(env.Root, chartDir), c.values)
		if err == nil {
			t.Errorf("the chart rendered with values %q:\n%.500s", c.values, out)
			continue
		}
		if !strings.Contains(err.Error(), c.want) {
			t.Errorf("the chart with values %q fails with %q, which does not name %s", c.values, err, c.want)
		}
	}
}

// helmTemplate renders a chart (a folder or a package) as docs/install.md's
// `helm install` would install it, with the given values.
func helmTemplate(t *testing.T, helm, chart, values string) ([]byte, error) {
	t.Helper()
	// Not under t.TempDir(): a subtest's name may hold a comma, and --values
	// splits its argument at commas.
	dir, err := os.MkdirTemp("", "ipledger-helm-values")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	file := filepath.Join(dir, "values.yaml")
	if err := os.WriteFile(file, []byte(values), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(helm, "template", "ipledger", chart, "--namespace", "ipledger-system", "--values", file)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	cmd.Env = append(os.Environ(), "HELM_CACHE_HOME="+t.TempDir(), "HELM_CONFIG_HOME="+t.TempDir(), "HELM_DATA_HOME="+t.TempDir())
	out, err := cmd.Output()
	if err != nil {
		return out, &helmError{err: err, stderr: strings.TrimSpace(stderr.String())}
	}
	return out, nil
}

type helmError struct {
	err    error
	stderr string
}

func (e *helmError) Error() string { return "helm template: " + e.err.Error() + ": " + e.stderr }

// helmBin is the pinned Helm CLI (hack/build-helm.sh).
func helmBin(t *testing.T) string {
	t.Helper()
	helm, err := controlplane.HelmBin()
	if err != nil {
		t.Fatal(err)
	}
	return helm
}

// kustomizeDoc is one document of a kustomize build: its text as printed,
// and the object.
type kustomizeDoc struct {
	text string
	obj  objdiff.Object
}

// kustomizeDocs builds a kustomization (from the repository's root) with the
// pinned kubectl and splits it into its documents.
func kustomizeDocs(t *testing.T, dir string) []kustomizeDoc {
	t.Helper()
	env := testenv.Get(t)
	out, err := env.Kubectl(context.Background(), "kustomize", filepath.Join(env.Root, dir))
	if err != nil {
		t.Fatal(err)
	}
	var docs []kustomizeDoc
	for _, text := range strings.Split(string(out), "\n---\n") {
		text = strings.TrimPrefix(text, "---\n")
		if !strings.HasSuffix(text, "\n") {
			text += "\n"
		}
		objs, err := objdiff.Parse([]byte(text))
		if err != nil {
			t.Fatalf("%s: %v", dir, err)
		}
		if len(objs) != 1 {
			t.Fatalf("%s: a document of %d objects:\n%.300s", dir, len(objs), text)
		}
		for _, o := range objs {
			docs = append(docs, kustomizeDoc{text: text, obj: o})
		}
	}
	return docs
}

func indent(s string) string {
	return "  " + strings.ReplaceAll(strings.TrimSuffix(s, "\n"), "\n", "\n  ")
}

// TestHelmInstallsAsDocsSay runs docs/install.md's Helm commands against an
// API server of its own (the chart creates ipledger-system and its CRDs and
// admission policies, which the tests sharing testenv's must not see, and
// deleting a namespace never ends without kube-controller-manager):
// `helm install --create-namespace` beside the chart's own Namespace creates
// every object the chart renders, `helm upgrade -f values-production.yaml`
// moves it to production's objects, and `helm uninstall` deletes them all
// (the Namespace is left terminating, for the namespace controller a cluster
// runs).
func TestHelmInstallsAsDocsSay(t *testing.T) {
	env := testenv.Get(t)
	helm := helmBin(t)
	cp, err := controlplane.Start(t.Context(), controlplane.Options{Dir: t.TempDir(), BinDir: env.CP.BinDir})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cp.Stop)
	chart := filepath.Join(env.Root, chartDir)
	run := func(name string, args ...string) []byte {
		t.Helper()
		cmd := exec.Command(name, append(args, "--kubeconfig", cp.KubeconfigPath)...)
		cmd.Env = append(os.Environ(), "HELM_CACHE_HOME="+t.TempDir(), "HELM_CONFIG_HOME="+t.TempDir(), "HELM_DATA_HOME="+t.TempDir())
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("%s %s: %v\n%s", filepath.Base(name), strings.Join(args, " "), err, stderr.String())
		}
		return out
	}
	kubectl := filepath.Join(env.CP.BinDir, "kubectl")
	// present lists the objects of a rendering that the API server has.
	present := func(rendered []byte) map[string]bool {
		t.Helper()
		file := filepath.Join(t.TempDir(), "rendered.yaml")
		if err := os.WriteFile(file, rendered, 0o644); err != nil {
			t.Fatal(err)
		}
		out := run(kubectl, "get", "-f", file, "--ignore-not-found", "-o", "jsonpath={range .items[*]}{.kind} {.metadata.namespace}/{.metadata.name}{\"\\n\"}{end}")
		got := map[string]bool{}
		for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
			if kind, name, ok := strings.Cut(line, " "); ok {
				got[kind+" "+strings.TrimPrefix(name, "/")] = true
			}
		}
		return got
	}
	ids := func(rendered []byte) []string {
		t.Helper()
		objs, err := objdiff.Parse(rendered)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for id := range objs {
			out = append(out, id)
		}
		return out
	}

	base, err := helmTemplate(t, helm, chart, "")
	if err != nil {
		t.Fatal(err)
	}
	run(helm, "install", "ipledger", chart, "--namespace", "ipledger-system", "--create-namespace")
	have := present(base)
	for _, id := range ids(base) {
		if !have[id] {
			t.Errorf("after helm install, %s is missing (the API server has %d of the chart's objects)", id, len(have))
		}
	}

	values, err := os.ReadFile(filepath.Join(env.Root, "deploy/helm/values-production.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	production, err := helmTemplate(t, helm, chart, string(values))
	if err != nil {
		t.Fatal(err)
	}
	run(helm, "upgrade", "ipledger", chart, "--namespace", "ipledger-system", "--values", filepath.Join(env.Root, "deploy/helm/values-production.yaml"))
	have = present(production)
	for _, id := range ids(production) {
		if !have[id] {
			t.Errorf("after helm upgrade to production's values, %s is missing", id)
		}
	}
	if replicas := run(kubectl, "-n", "ipledger-system", "get", "deploy/ipledger-watcher", "-o", "jsonpath={.spec.replicas}"); string(replicas) != "3" {
		t.Errorf("after the upgrade the watcher has %s replicas, want production's 3", replicas)
	}

	run(helm, "uninstall", "ipledger", "--namespace", "ipledger-system")
	// helm uninstall returns once it has asked for each deletion; a CRD
	// goes when the API server has cleaned up its objects, a moment later.
	testenv.Eventually(t, time.Minute, func() error {
		var left []string
		for id := range present(production) {
			if id != "Namespace ipledger-system" {
				left = append(left, id)
			}
		}
		if len(left) > 0 {
			sort.Strings(left)
			return fmt.Errorf("after helm uninstall, still there: %v", left)
		}
		return nil
	})
}

// TestHelmChartIsTheRelease: Chart.yaml names the release of the VERSION
// file (make release refuses another; the images of values.yaml are held to
// the kustomize tree's, and so to VERSION, by the drift test).
func TestHelmChartIsTheRelease(t *testing.T) {
	env := testenv.Get(t)
	v, err := os.ReadFile(filepath.Join(env.Root, "VERSION"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := release.ChartPackage(os.DirFS(filepath.Join(env.Root, chartDir)), strings.TrimSpace(string(v)), nil); err != nil {
		t.Error(err)
	}
}
