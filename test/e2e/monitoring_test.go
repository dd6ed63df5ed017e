package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/ipledger/ipledger/lab/containerimage"
	"github.com/ipledger/ipledger/lab/ec2test"
	"github.com/ipledger/ipledger/lab/faultproxy"
	"github.com/ipledger/ipledger/lab/testenv"
	"github.com/ipledger/ipledger/test/e2e/journey"
)

// The monitoring component (deploy/kustomize/components/monitoring) is in no
// shipped overlay: its ServiceMonitor and PrometheusRule need the Prometheus
// Operator's CRDs, which a cluster without the operator lacks. The tests
// render it through testdata/monitoring (base + high-availability +
// monitoring) instead.
const monitoringKustomization = "testdata/monitoring"

// renderMonitoring renders testdata/monitoring with the pinned kubectl.
func renderMonitoring(t *testing.T) []byte {
	t.Helper()
	env := testenv.Get(t)
	out, err := env.Kubectl(context.Background(), "kustomize", monitoringKustomization)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// renderedObject returns the rendered object of kind and name.
func renderedObject(t *testing.T, rendered []byte, kind, name string) map[string]any {
	t.Helper()
	if m := findObject(t, rendered, kind, name); m != nil {
		return m
	}
	t.Fatalf("the monitoring component renders no %s %s", kind, name)
	return nil
}

// findObject is the rendered object of that kind and name, nil if none.
func findObject(t *testing.T, rendered []byte, kind, name string) map[string]any {
	t.Helper()
	for _, doc := range strings.Split(string(rendered), "\n---\n") {
		var obj struct {
			Kind     string `json:"kind"`
			Metadata struct {
				Name string `json:"name"`
			} `json:"metadata"`
		}
		if err := yaml.Unmarshal([]byte(doc), &obj); err != nil {
			t.Fatal(err)
		}
		if obj.Kind == kind && obj.Metadata.Name == name {
			var m map[string]any
			if err := yaml.Unmarshal([]byte(doc), &m); err != nil {
				t.Fatal(err)
			}
			return m
		}
	}
	return nil
}

// ruleGroups returns the rendered PrometheusRule's spec as a Prometheus rule
// file (groups: ...), the form promtool reads.
func ruleGroups(t *testing.T, rendered []byte) []byte {
	t.Helper()
	rule := renderedObject(t, rendered, "PrometheusRule", "ipledger")
	out, err := yaml.Marshal(rule["spec"])
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// dashboard returns the Grafana dashboard as shipped, from its ConfigMap.
func dashboard(t *testing.T, rendered []byte) []byte {
	t.Helper()
	cm := renderedObject(t, rendered, "ConfigMap", "ipledger-grafana-dashboard")
	data, _ := cm["data"].(map[string]any)
	js, _ := data["ipledger.json"].(string)
	if js == "" {
		t.Fatal("ConfigMap ipledger-grafana-dashboard has no ipledger.json")
	}
	return []byte(js)
}

// TestManifestsMatchGoldenFilesMonitoring is TestManifestsMatchGoldenFiles
// for the monitoring component (it runs, and -update rewrites it, with
// `-run TestManifestsMatchGoldenFiles`).
func TestManifestsMatchGoldenFilesMonitoring(t *testing.T) {
	out := renderMonitoring(t)
	golden := filepath.Join("testdata", "golden", "monitoring.yaml")
	if *update {
		if err := os.WriteFile(golden, out, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	if !bytes.Equal(out, want) {
		t.Errorf("rendered %s differs from %s; review the change and run with -update", monitoringKustomization, golden)
	}
}

// TestManifestsApplyToTheAPIServerMonitoring dry-runs the monitoring
// component against the API server like TestManifestsApplyToTheAPIServer,
// after installing minimal stand-ins of the operator's two CRDs
// (testdata/monitoring-crds: typed, no unknown fields kept, so a misspelt
// field of the ServiceMonitor or PrometheusRule fails --validate=strict).
func TestManifestsApplyToTheAPIServerMonitoring(t *testing.T) {
	env := testenv.Get(t)
	ctx := context.Background()
	if _, err := env.Kubectl(ctx, "apply", "--server-side", "--force-conflicts", "-f", "testdata/monitoring-crds"); err != nil {
		t.Fatal(err)
	}
	if _, err := testenv.WaitEstablished(ctx, env.Kubectl, time.Minute,
		"crd/servicemonitors.monitoring.coreos.com", "crd/prometheusrules.monitoring.coreos.com"); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 30*time.Second, func() error {
		// Discovery may lag the Established condition by a moment.
		_, err := env.Kubectl(ctx, "get", "servicemonitors,prometheusrules", "-A")
		return err
	})
	cmd := exec.Command(filepath.Join(env.CP.BinDir, "kubectl"), "--kubeconfig", env.CP.KubeconfigPath,
		"apply", "--server-side", "--force-conflicts", "--dry-run=server", "--validate=strict", "-k", monitoringKustomization)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("apply %s: %v\n%s", monitoringKustomization, err, stderr.String())
	}
	if strings.Contains(stderr.String(), "Warning") {
		t.Errorf("apply %s warned:\n%s", monitoringKustomization, stderr.String())
	}
	for _, want := range []string{
		"servicemonitor.monitoring.coreos.com/ipledger", "prometheusrule.monitoring.coreos.com/ipledger",
		"configmap/ipledger-grafana-dashboard", "service/ipledger-endpoints-metrics",
	} {
		if !strings.Contains(string(out), want+" serverside-applied (server dry run)") {
			t.Errorf("%s was not dry-run applied:\n%s", want, out)
		}
	}
}

// TestAlertRules runs Prometheus's own checks on the rules as shipped:
// `promtool check rules` and the unit tests of
// testdata/monitoring/rules_test.yaml (`promtool test rules`), on the groups
// of the rendered PrometheusRule.
func TestAlertRules(t *testing.T) {
	env := testenv.Get(t)
	promtool := filepath.Join(env.CP.BinDir, "promtool")
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "rules.yaml"), ruleGroups(t, renderMonitoring(t)), 0o644); err != nil {
		t.Fatal(err)
	}
	tests, err := os.ReadFile(filepath.Join(monitoringKustomization, "rules_test.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "rules_test.yaml"), tests, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"check", "rules", "rules.yaml"}, {"test", "rules", "rules_test.yaml"}} {
		cmd := exec.Command(promtool, args...)
		cmd.Dir = dir
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Errorf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
}

// TestMonitoringNamesOnlyExportedMetrics starts the four binaries against
// the test API server and moto, gives each something to report (a pool that
// fills up with a Service waiting, a gRPC read, a Service backed by
// ExternalWorkloads, a labelled Node with an EC2 error on the way, a watcher
// restart), scrapes every replica, and checks that each metric the rules and
// the dashboard name is one of those scraped: a rule on a metric nobody
// exports would never fire.
func TestMonitoringNamesOnlyExportedMetrics(t *testing.T) {
	env := testenv.Get(t)
	moto := ec2test.Get(t)
	rendered := renderMonitoring(t)
	named, err := namedMetrics(ruleGroups(t, rendered), dashboard(t, rendered))
	if err != nil {
		t.Fatal(err)
	}

	proxy, err := faultproxy.Start(moto.URL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { proxy.Close() })
	proxy.Inject("DescribeAddresses", faultproxy.Throttle, 1) // retried, and counted in ipledger_eipd_ec2_errors_total
	cluster := ec2test.ClusterID(t)
	sys := StartSystem(t, SystemOptions{Watchers: 1, IPAM: 1, Endpoints: 1, EIPD: 1, EC2Endpoint: proxy.URL(), ClusterID: cluster})
	// A watcher serving TLS, for the metrics only a TLS server exports
	// (the serving certificate's expiry); the consumers dial the others.
	certFile, keyFile := testenv.SelfSignedCert(t, "localhost")
	tlsWatcher := sys.start("watcher", 1, []string{"--grpc-plaintext=false", "--grpc-tls-cert-file=" + certFile, "--grpc-tls-key-file=" + keyFile})
	tlsWatcher.WaitReady(t)

	ns := env.Namespace(t, nil)
	pool := journey.CreatePool(t, env.Dynamic, "monitoring", 31, ns) // two addresses
	web := journey.CreateLoadBalancer(t, env.Client, ns, "web", nil, corev1.ProtocolTCP, 80)
	journey.CreateLoadBalancer(t, env.Client, ns, "api", nil, corev1.ProtocolTCP, 80)
	journey.CreateLoadBalancer(t, env.Client, ns, "waits", nil, corev1.ProtocolTCP, 80)
	journey.CreateWorkload(t, env.Dynamic, ns, "vm-0", "10.21.0.1", web.Spec.Selector, true)
	inst := moto.RunClusterInstance(t, cluster)
	journey.CreateNode(t, env.Client, &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: "monitoring-" + strings.ToLower(inst.ID), Labels: map[string]string{"node-restriction.kubernetes.io/ipledger-externalip-auto-assign": "true"}},
		Spec:       corev1.NodeSpec{ProviderID: inst.ProviderID()},
		Status:     corev1.NodeStatus{Addresses: inst.NodeAddresses()},
	})
	testenv.Eventually(t, 60*time.Second, func() error {
		if v := sys.IPAM[0].Metric(t, "ipledger_ipam_oldest_pending_service_timestamp_seconds", `reason="PoolExhausted"`); v == 0 {
			return fmt.Errorf("no Service waits for pool %s yet", pool)
		}
		if v := sys.Endpoints[0].Metric(t, "ipledger_endpoints_managed_endpoints"); v == 0 {
			return fmt.Errorf("endpoints manages no endpoint yet")
		}
		if v := sys.EIPD[0].Metric(t, "ipledger_eipd_addresses_associated"); v == 0 {
			return fmt.Errorf("eipd has associated no Elastic IP yet")
		}
		return nil
	})
	journey.Grpcurl(t, filepath.Join(env.CP.BinDir, "grpcurl"), journey.ViewerToken(t, env.Client), sys.IPAM[0].GRPCAddr, "ipledger.ipam.v1.IPAMService/ListPools", "{}")
	// Every stream client sees its stream end once (ipledger_stream_disconnects_total).
	sys.Watchers[0].Kill()
	sys.Watchers[0].Restart(t)
	sys.Watchers[0].WaitReady(t)

	exported, families := map[string]bool{}, map[string]bool{}
	testenv.Eventually(t, 60*time.Second, func() error {
		for _, group := range [][]*Service{sys.Watchers, {tlsWatcher}, sys.IPAM, sys.Endpoints, sys.EIPD} {
			for _, svc := range group {
				names, fams, err := scrapeNames(svc.OpsAddr)
				if err != nil {
					return err
				}
				for _, n := range names {
					exported[n] = true
				}
				for _, f := range fams {
					families[f] = true
				}
			}
		}
		if missing := notIn(named, exported); len(missing) > 0 {
			return fmt.Errorf("the rules or the dashboard name metrics no binary exports: %s", strings.Join(missing, ", "))
		}
		return nil
	})

	// Every replica says which release it runs, as --version does, and
	// counts its requests to the Kubernetes API.
	prov, err := containerimage.ReadProvenance(context.Background(), env.Root)
	if err != nil {
		t.Fatal(err)
	}
	release := fmt.Sprintf(`version=%q`, prov.Version)
	for _, group := range [][]*Service{sys.Watchers, sys.IPAM, sys.Endpoints, sys.EIPD} {
		for _, svc := range group {
			if v := svc.Metric(t, "ipledger_build_info", release, fmt.Sprintf(`revision=%q`, prov.Revision)); v != 1 {
				t.Errorf("%s-%d: ipledger_build_info{%s,revision=%q} = %v, want 1", svc.Component, svc.Replica, release, prov.Revision, v)
			}
			// And client-go's requests, as stock dashboards read them
			// (pkg/kubemetrics).
			if v := svc.Metric(t, "rest_client_requests_total", `code="200"`); v == 0 {
				t.Errorf("%s-%d: rest_client_requests_total{code=\"200\"} = 0: client-go's metrics are not in its registry", svc.Component, svc.Replica)
			}
		}
	}
	for _, c := range []string{"watcher", "ipam", "endpoints", "eipd"} {
		out, err := exec.Command(env.Binary(t, c), "--version").Output()
		if want := fmt.Sprintf("ipledger-%s %s (revision %s, ", c, prov.Version, prov.Revision); err != nil || !strings.HasPrefix(string(out), want) {
			t.Errorf("ipledger-%s --version = %q, %v; want it to start with %q", c, out, err, want)
		}
	}

	// And docs/metrics.md, the reference, lists every ipledger metric seen,
	// and client-go's (pkg/kubemetrics).
	doc, err := os.ReadFile(filepath.Join(env.Root, "docs", "metrics.md"))
	if err != nil {
		t.Fatal(err)
	}
	var undocumented []string
	for f := range families {
		if (strings.HasPrefix(f, "ipledger_") || strings.HasPrefix(f, "rest_client_")) && !bytes.Contains(doc, []byte("`"+f+"`")) {
			undocumented = append(undocumented, f)
		}
	}
	sort.Strings(undocumented)
	if len(undocumented) > 0 {
		t.Errorf("docs/metrics.md does not list %s, which the binaries export", strings.Join(undocumented, ", "))
	}
}

// TestNamedMetricsFindsEveryMetricAndNothingElse checks the PromQL reading
// TestMonitoringNamesOnlyExportedMetrics relies on, so a rule naming an
// unknown metric cannot slip past it.
func TestNamedMetricsFindsEveryMetricAndNothingElse(t *testing.T) {
	tests := []struct {
		expr string
		want []string
	}{
		{`max by (pool, family) (ipledger_ipam_pool_addresses{state="used"}) / max by (pool, family) (ipledger_ipam_pool_addresses{state="total"}) >= 0.9`,
			[]string{"ipledger_ipam_pool_addresses"}},
		{`time() - min by (reason) (ipledger_ipam_oldest_pending_service_timestamp_seconds) > 10 * 60`,
			[]string{"ipledger_ipam_oldest_pending_service_timestamp_seconds"}},
		{`max(ipledger_leader_is_leader{lease="ipledger-ipam"}) < 1 or absent(ipledger_leader_is_leader{lease="ipledger_ipam"})`,
			[]string{"ipledger_leader_is_leader"}},
		{`histogram_quantile(0.99, sum by (grpc_method, le) (rate(ipledger_grpc_server_handling_seconds_bucket{grpc_type="unary"}[$__rate_interval])))`,
			[]string{"ipledger_grpc_server_handling_seconds_bucket"}},
		{`a_metric - on (pool) group_left (family) other:recorded offset 5m and ignoring(x) count_values("v", up) unless bool_metric`,
			[]string{"a_metric", "bool_metric", "other:recorded", "up"}},
		{`{__name__="by_name"} + sum without (x) (rate(x_total[5m:1m])) + inf`, []string{"by_name", "x_total"}},
		{`a * on (x) group_left sum(b)`, []string{"a", "b"}},
	}
	for _, tt := range tests {
		got, err := metricsOf(tt.expr)
		if err != nil {
			t.Errorf("metricsOf(%q): %v", tt.expr, err)
			continue
		}
		if !slices.Equal(got, tt.want) {
			t.Errorf("metricsOf(%q) = %q, want %q", tt.expr, got, tt.want)
		}
	}
	missing := notIn([]string{"ipledger_ipam_pool_addresses", "ipledger_ipam_pool_adresses"}, map[string]bool{"ipledger_ipam_pool_addresses": true})
	if !slices.Equal(missing, []string{"ipledger_ipam_pool_adresses"}) {
		t.Errorf("notIn = %q, want the misspelt name", missing)
	}
}

// namedMetrics returns the metrics the rule groups and the dashboard's
// queries name, sorted.
func namedMetrics(rules, dashboardJSON []byte) ([]string, error) {
	var exprs []string
	var groups struct {
		Groups []struct {
			Rules []struct {
				Expr string `json:"expr"`
			} `json:"rules"`
		} `json:"groups"`
	}
	if err := yaml.Unmarshal(rules, &groups); err != nil {
		return nil, err
	}
	for _, g := range groups.Groups {
		for _, r := range g.Rules {
			exprs = append(exprs, r.Expr)
		}
	}
	type panel struct {
		Targets []struct {
			Expr string `json:"expr"`
		} `json:"targets"`
		Panels json.RawMessage `json:"panels"`
	}
	var d struct {
		Panels []panel `json:"panels"`
	}
	if err := json.Unmarshal(dashboardJSON, &d); err != nil {
		return nil, fmt.Errorf("dashboard: %w", err)
	}
	var walk func([]panel) error
	walk = func(ps []panel) error {
		for _, p := range ps {
			for _, tg := range p.Targets {
				exprs = append(exprs, tg.Expr)
			}
			if len(p.Panels) > 0 {
				var inner []panel
				if err := json.Unmarshal(p.Panels, &inner); err != nil {
					return err
				}
				if err := walk(inner); err != nil {
					return err
				}
			}
		}
		return nil
	}
	if err := walk(d.Panels); err != nil {
		return nil, err
	}
	seen := map[string]bool{}
	for _, e := range exprs {
		names, err := metricsOf(e)
		if err != nil {
			return nil, err
		}
		for _, n := range names {
			seen[n] = true
		}
	}
	if len(exprs) == 0 || len(seen) == 0 {
		return nil, fmt.Errorf("no query found in the rules and the dashboard")
	}
	var out []string
	for n := range seen {
		out = append(out, n)
	}
	sort.Strings(out)
	return out, nil
}

// promqlWords are PromQL's keywords, aggregation operators and constants:
// identifiers that are not metric names.
var promqlWords = map[string]bool{
	"and": true, "or": true, "unless": true, "by": true, "without": true, "on": true, "ignoring": true,
	"group_left": true, "group_right": true, "offset": true, "bool": true, "atan2": true, "inf": true, "nan": true,
	"sum": true, "min": true, "max": true, "avg": true, "group": true, "stddev": true, "stdvar": true, "count": true,
	"count_values": true, "bottomk": true, "topk": true, "quantile": true, "limitk": true, "limit_ratio": true,
}

// metricsOf returns the metric names a PromQL expression selects, sorted:
// identifiers outside strings, label matchers, ranges and label lists that
// are neither keywords nor functions, plus {__name__="..."} selectors. (The
// e2e module reads PromQL itself: Prometheus's parser is kept out of the
// service modules and go.work.)
func metricsOf(expr string) ([]string, error) {
	seen := map[string]bool{}
	isIdent := func(c byte, first bool) bool {
		return c == '_' || c == ':' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || !first && c >= '0' && c <= '9'
	}
	skipString := func(i int) (int, error) { // expr[i] opens a string; returns the index after it
		q := expr[i]
		for j := i + 1; j < len(expr); j++ {
			switch {
			case expr[j] == '\\' && q != '`':
				j++
			case expr[j] == q:
				return j + 1, nil
			}
		}
		return 0, fmt.Errorf("unterminated string in %q", expr)
	}
	skipUntil := func(i int, end byte) (string, int, error) { // returns the text inside and the index after end
		for j := i + 1; j < len(expr); j++ {
			switch expr[j] {
			case '"', '\'', '`':
				k, err := skipString(j)
				if err != nil {
					return "", 0, err
				}
				j = k - 1
			case end:
				return expr[i+1 : j], j + 1, nil
			}
		}
		return "", 0, fmt.Errorf("no %q closes %q", end, expr)
	}
	labelList := false // the last word was by, without, on, ignoring, group_left or group_right
	for i := 0; i < len(expr); {
		c := expr[i]
		switch {
		case c == '"' || c == '\'' || c == '`':
			j, err := skipString(i)
			if err != nil {
				return nil, err
			}
			i = j
		case c == '{':
			inside, j, err := skipUntil(i, '}')
			if err != nil {
				return nil, err
			}
			for _, m := range strings.Split(inside, ",") {
				if k, v, ok := strings.Cut(strings.TrimSpace(m), "="); ok && strings.TrimSpace(k) == "__name__" {
					seen[strings.Trim(strings.TrimSpace(v), "\"'`")] = true
				}
			}
			i = j
		case c == '[':
			_, j, err := skipUntil(i, ']')
			if err != nil {
				return nil, err
			}
			i = j
		case c == '(' && labelList:
			_, j, err := skipUntil(i, ')')
			if err != nil {
				return nil, err
			}
			i, labelList = j, false
		case c >= '0' && c <= '9' || c == '.' || c == '$':
			j := i + 1
			for j < len(expr) && (isIdent(expr[j], false) || expr[j] == '.') {
				j++
			}
			i = j
		case isIdent(c, true):
			j := i + 1
			for j < len(expr) && isIdent(expr[j], false) {
				j++
			}
			word := expr[i:j]
			k := j
			for k < len(expr) && (expr[k] == ' ' || expr[k] == '\n' || expr[k] == '\t') {
				k++
			}
			lower := strings.ToLower(word)
			// group_left and group_right may come without a label list.
			labelList = lower == "by" || lower == "without" || lower == "on" || lower == "ignoring" || lower == "group_left" || lower == "group_right"
			switch {
			case promqlWords[lower]:
			case k < len(expr) && expr[k] == '(':
				// A function call.
			default:
				seen[word] = true
			}
			i = j
		default:
			i++
		}
	}
	out := make([]string, 0, len(seen))
	for n := range seen {
		out = append(out, n)
	}
	sort.Strings(out)
	return out, nil
}

// scrapeNames returns the sample names a replica's /metrics shows (a
// histogram's _bucket, _sum and _count are names of their own, as in PromQL)
// and the metric families (# TYPE lines).
func scrapeNames(addr string) (names, families []string, err error) {
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		return nil, nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, nil, fmt.Errorf("GET %s/metrics: %s", addr, resp.Status)
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "# TYPE "):
			if f := strings.Fields(line); len(f) >= 3 {
				families = append(families, f[2])
			}
		case line == "" || line[0] == '#':
		default:
			if i := strings.IndexAny(line, "{ "); i > 0 {
				names = append(names, line[:i])
			}
		}
	}
	return names, families, sc.Err()
}

// notIn returns the names missing from set.
func notIn(names []string, set map[string]bool) []string {
	var out []string
	for _, n := range names {
		if !set[n] {
			out = append(out, n)
		}
	}
	return out
}
