package cluster_test

// Helpers of the scenarios (scale, failover, rollout, overlays, health):
// they reach the node as a user does — kubectl, the Kubernetes API, the
// pods' ops ports through the API server's proxy, ipam's Service (this
// machine is the node) — never the binaries' insides.

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"google.golang.org/grpc"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"

	"github.com/ipledger/ipledger/lab/testenv"
	"github.com/ipledger/ipledger/pkg/authz"
	"github.com/ipledger/ipledger/test/e2e/journey"
)

const systemNS = journey.SystemNamespace

// deployments are ipledger's Deployments, the watcher first.
var deployments = []string{"ipledger-watcher", "ipledger-ipam", "ipledger-endpoints", "ipledger-eipd"}

// consumers stream from the watcher.
var consumers = []string{"ipledger-ipam", "ipledger-endpoints", "ipledger-eipd"}

// kubectl runs kubectl against the node and returns its output.
func (e *env) kubectl(t testing.TB, args ...string) string {
	t.Helper()
	out, err := e.node.Kubectl(context.Background(), nil, args...)
	if err != nil {
		t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// scale sets a Deployment's replicas with `kubectl scale`, waits for the
// rollout, and puts the old count back (and waits) when the test ends.
func (e *env) scale(t testing.TB, deploy string, replicas int) {
	t.Helper()
	d, err := e.client.AppsV1().Deployments(systemNS).Get(context.Background(), deploy, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	before := *d.Spec.Replicas
	e.kubectl(t, "-n", systemNS, "scale", "deploy/"+deploy, fmt.Sprintf("--replicas=%d", replicas))
	t.Cleanup(func() {
		e.kubectl(t, "-n", systemNS, "scale", "deploy/"+deploy, fmt.Sprintf("--replicas=%d", before))
		e.rolledOut(t, deploy)
	})
	e.rolledOut(t, deploy)
}

// rolledOut waits for `kubectl rollout status` of a Deployment; when it
// times out, the test fails with the pods and the end of the logs of those
// not Ready (the node goes down with the test).
func (e *env) rolledOut(t testing.TB, deploy string) {
	t.Helper()
	ctx := context.Background()
	out, err := e.node.Kubectl(ctx, nil, "-n", systemNS, "rollout", "status", "deploy/"+deploy, "--timeout=4m")
	if err == nil {
		return
	}
	pods, _ := e.node.Kubectl(ctx, nil, "-n", systemNS, "get", "pods", "-o", "wide")
	var logs strings.Builder
	for _, p := range e.pods(t, deploy) {
		if podReady(p) {
			continue
		}
		tail := int64(20)
		raw, err := e.client.CoreV1().Pods(systemNS).GetLogs(p.Name, &corev1.PodLogOptions{TailLines: &tail}).DoRaw(ctx)
		fmt.Fprintf(&logs, "--- %s (not Ready), its last log lines (%v):\n%s\n", p.Name, err, raw)
	}
	t.Fatalf("rollout of %s: %v\n%s\n%s\n%s", deploy, err, out, pods, logs.String())
}

// pods lists the running, not terminating pods of a Deployment (by its
// app.kubernetes.io/name label), sorted by name.
func (e *env) pods(t testing.TB, deploy string) []corev1.Pod {
	t.Helper()
	list, err := e.client.CoreV1().Pods(systemNS).List(context.Background(), metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=" + deploy})
	if err != nil {
		t.Fatal(err)
	}
	var out []corev1.Pod
	for _, p := range list.Items {
		if p.DeletionTimestamp == nil && p.Status.Phase == corev1.PodRunning {
			out = append(out, p)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// podNamed finds a pod of list by name.
func podNamed(t testing.TB, list []corev1.Pod, name string) corev1.Pod {
	t.Helper()
	var names []string
	for _, p := range list {
		if p.Name == name {
			return p
		}
		names = append(names, p.Name)
	}
	t.Fatalf("no pod %s among %s", name, strings.Join(names, ", "))
	return corev1.Pod{}
}

// metrics scrapes a pod's ops port (:8080/metrics) through the API server's
// pod proxy, as Prometheus reaches it; series are keyed name{label=value,…}.
func (e *env) metrics(ctx context.Context, pod string) (map[string]float64, error) {
	raw, err := e.client.CoreV1().Pods(systemNS).ProxyGet("http", pod, "8080", "metrics", nil).DoRaw(ctx)
	if err != nil {
		return nil, fmt.Errorf("metrics of %s: %w", pod, err)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(bytes.NewReader(raw))
	if err != nil {
		return nil, fmt.Errorf("metrics of %s: %w", pod, err)
	}
	out := map[string]float64{}
	for name, f := range families {
		for _, m := range f.Metric {
			key := name
			var labels []string
			for _, l := range m.Label {
				labels = append(labels, l.GetName()+"="+l.GetValue())
			}
			if len(labels) > 0 {
				key += "{" + strings.Join(labels, ",") + "}"
			}
			switch {
			case m.Gauge != nil:
				out[key] = m.Gauge.GetValue()
			case m.Counter != nil:
				out[key] = m.Counter.GetValue()
			}
		}
	}
	return out, nil
}

// leader is the pod holding a Lease (holderIdentity is the pod's name).
func (e *env) leader(t testing.TB, lease string) string {
	t.Helper()
	l, err := e.client.CoordinationV1().Leases(systemNS).Get(context.Background(), lease, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if l.Spec.HolderIdentity == nil {
		return ""
	}
	return *l.Spec.HolderIdentity
}

// load creates LoadBalancer Services in a namespace of its own, one every
// interval, until stopped or max are made: a disruption then happens while
// ipam has work.
type load struct {
	client  kubernetes.Interface
	ns      string
	stopped chan struct{}
	done    chan struct{}
	mu      sync.Mutex
	names   []string
	errs    []error
}

// startLoad creates the test's namespace with a pool of its own and
// starts the load. When the test ends it stops the load, deletes the
// Services and waits for the pool to be gone (ipam's finalizer holds it
// while Services have its addresses), so that a later run on the same node
// can use the range again.
func (e *env) startLoad(t *testing.T, every time.Duration, max int) *load {
	t.Helper()
	l := &load{client: e.client, ns: e.namespace(t), stopped: make(chan struct{}), done: make(chan struct{})}
	pool := e.pool(t, l.ns)
	t.Cleanup(func() {
		ctx := context.Background()
		for _, name := range l.stop(t) {
			if err := e.client.CoreV1().Services(l.ns).Delete(ctx, name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
				t.Error(err)
			}
		}
		pools := e.dynamic.Resource(poolsGVR)
		if err := pools.Delete(ctx, pool, metav1.DeleteOptions{}); err != nil {
			t.Error(err)
		}
		testenv.Eventually(t, 2*time.Minute, func() error {
			if _, err := pools.Get(ctx, pool, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
				return fmt.Errorf("IPPool %s is still there (%v)", pool, err)
			}
			return nil
		})
	})
	go func() {
		defer close(l.done)
		tick := time.NewTicker(every)
		defer tick.Stop()
		for i := 0; i < max; i++ {
			select {
			case <-l.stopped:
				return
			case <-tick.C:
			}
			name := fmt.Sprintf("svc-%d", i)
			_, err := l.client.CoreV1().Services(l.ns).Create(context.Background(), loadBalancer(l.ns, name), metav1.CreateOptions{})
			l.mu.Lock()
			if err != nil {
				l.errs = append(l.errs, fmt.Errorf("create Service %s/%s: %w", l.ns, name, err))
			} else {
				l.names = append(l.names, name)
			}
			l.mu.Unlock()
		}
	}()
	return l
}

var (
	poolsGVR  = schema.GroupVersionResource{Group: "ipledger.io", Version: "v1alpha1", Resource: "ippools"}
	poolCount atomic.Int32
)

// pool creates an IPPool over a /22 of its own — 10.<200+n>.0.0, apart from
// the journey's 10.<100+n> — serving only namespace ns, and returns its name.
func (e *env) pool(t testing.TB, ns string) string {
	t.Helper()
	n := poolCount.Add(1)
	pool := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "ipledger.io/v1alpha1", "kind": "IPPool",
		"metadata": map[string]any{"generateName": "load-"},
		"spec": map[string]any{
			"addresses":  []any{fmt.Sprintf("10.%d.0.0/22", 200+n)},
			"allocation": map[string]any{"namespaces": []any{ns}},
		},
	}}
	created, err := e.dynamic.Resource(poolsGVR).Create(context.Background(), pool, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create IPPool for %s: %v", ns, err)
	}
	return created.GetName()
}

// created returns the Services the load has created so far.
func (l *load) created() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.names...)
}

// waitCreated waits until the load has created n Services.
func (l *load) waitCreated(t testing.TB, n int) {
	t.Helper()
	testenv.Eventually(t, 2*time.Minute, func() error {
		if got := len(l.created()); got < n {
			return fmt.Errorf("the load created %d Services of %d", got, n)
		}
		return nil
	})
}

// stop ends the load and returns the Services it created; idempotent.
func (l *load) stop(t testing.TB) []string {
	t.Helper()
	select {
	case <-l.stopped:
	default:
		close(l.stopped)
	}
	<-l.done
	l.mu.Lock()
	errs := l.errs
	l.errs = nil
	l.mu.Unlock()
	for _, err := range errs {
		t.Error(err)
	}
	return l.created()
}

func loadBalancer(ns, name string) *corev1.Service {
	noNodePorts := false
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: corev1.ServiceSpec{
			Type:                          corev1.ServiceTypeLoadBalancer,
			AllocateLoadBalancerNodePorts: &noNodePorts,
			Selector:                      map[string]string{"app": name},
			Ports:                         []corev1.ServicePort{{Name: "p", Protocol: corev1.ProtocolTCP, Port: 80, TargetPort: intstr.FromInt32(80)}},
		},
	}
}

// ips waits until every named Service of ns shows exactly one address and
// returns the addresses by name.
func (e *env) ips(t testing.TB, ns string, names []string, timeout time.Duration) map[string]string {
	t.Helper()
	got := map[string]string{}
	testenv.Eventually(t, timeout, func() error {
		list, err := e.client.CoreV1().Services(ns).List(context.Background(), metav1.ListOptions{})
		if err != nil {
			return err
		}
		clear(got)
		for _, s := range list.Items {
			if len(s.Status.LoadBalancer.Ingress) == 1 {
				got[s.Name] = s.Status.LoadBalancer.Ingress[0].IP
			}
		}
		var missing []string
		for _, n := range names {
			if got[n] == "" {
				missing = append(missing, n)
			}
		}
		if len(missing) > 0 {
			return fmt.Errorf("%d of %d Services in %s have no address yet, e.g. %v", len(missing), len(names), ns, missing[:min(5, len(missing))])
		}
		return nil
	})
	return got
}

// sampler runs a check every 200ms until stopped and keeps what it found:
// a duplicate address or a breached budget that heals before the test looks
// counts all the same.
type sampler struct {
	stopped chan struct{}
	done    chan struct{}
	mu      sync.Mutex
	found   []string
	samples int
}

func sample(check func(context.Context) []string) *sampler {
	s := &sampler{stopped: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(s.done)
		tick := time.NewTicker(200 * time.Millisecond)
		defer tick.Stop()
		for {
			found := check(context.Background())
			s.mu.Lock()
			s.samples++
			if len(s.found) < 20 {
				s.found = append(s.found, found...)
			}
			s.mu.Unlock()
			select {
			case <-s.stopped:
				return
			case <-tick.C:
			}
		}
	}()
	return s
}

// check stops the sampling and fails the test for everything it found.
func (s *sampler) check(t testing.TB, what string) {
	t.Helper()
	close(s.stopped)
	<-s.done
	t.Logf("%d samples of %s", s.samples, what)
	for _, f := range s.found {
		t.Errorf("%s: %s", what, f)
	}
}

// watchDuplicates samples every LoadBalancer Service for an address on two
// of them.
func (e *env) watchDuplicates() *sampler {
	return sample(func(ctx context.Context) []string {
		svcs, err := journey.LoadBalancers(ctx, e.client)
		if err != nil {
			return nil // the API server is not what is tested here
		}
		if err := journey.NoIPOnTwoServices(svcs); err != nil {
			return []string{err.Error()}
		}
		return nil
	})
}

// consistent checks what every scenario ends with: no address on two
// Services, and ipam's ledger (read through the ipam Service) equals the
// Services' statuses. caFile, when set, is the CA of components/tls.
func (e *env) consistent(t testing.TB, caFile string) {
	t.Helper()
	ctx := context.Background()
	svcs, err := journey.LoadBalancers(ctx, e.client)
	if err != nil {
		t.Fatal(err)
	}
	if err := journey.NoIPOnTwoServices(svcs); err != nil {
		t.Error(err)
	}
	ipam, err := e.client.CoreV1().Services(systemNS).Get(ctx, "ipledger-ipam", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	conn := e.dialIPAM(t, ipam.Spec.ClusterIP+":9443", caFile)
	testenv.Eventually(t, 30*time.Second, func() error {
		svcs, err := journey.LoadBalancers(ctx, e.client)
		if err != nil {
			return err
		}
		return journey.LedgerEqualsStatuses(ctx, conn, svcs)
	})
}

// dialIPAM connects to ipam at addr with a viewer's token: plaintext, or
// over TLS checking ipam's certificate against caFile for the name of the
// ipam Service.
func (e *env) dialIPAM(t testing.TB, addr, caFile string) *grpc.ClientConn {
	t.Helper()
	token := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(token, []byte(journey.ViewerToken(t, e.client)), 0o600); err != nil {
		t.Fatal(err)
	}
	opts, err := authz.DialOptions(token, caFile, caFile == "")
	if err != nil {
		t.Fatal(err)
	}
	if caFile != "" {
		opts = append(opts, grpc.WithAuthority("ipledger-ipam.ipledger-system.svc"))
	}
	conn, err := grpc.NewClient(addr, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// deletePod deletes a pod as `kubectl delete pod` does (gracefully), after
// checking its logs for RBAC denials: they go with it.
func (e *env) deletePod(t testing.TB, pod corev1.Pod) {
	t.Helper()
	e.noRBACDenials(t, pod)
	if err := e.client.CoreV1().Pods(systemNS).Delete(context.Background(), pod.Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
}

// podGone waits until the pod ns/name no longer exists (its containers
// stopped and the kubelet removed it) and says how long that took: a test
// that deletes a pod leaves no terminating one — never Ready — to the next.
func (e *env) podGone(t testing.TB, ns, name string) time.Duration {
	t.Helper()
	start := time.Now()
	testenv.Eventually(t, 2*time.Minute, func() error {
		if _, err := e.client.CoreV1().Pods(ns).Get(context.Background(), name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			return fmt.Errorf("pod %s/%s is still there (%v)", ns, name, err)
		}
		return nil
	})
	return time.Since(start)
}

// noRBACDenials fails the test for every line of a pod's logs where the
// API server refused the binary something: the shipped RBAC lacks a
// permission the binary uses.
func (e *env) noRBACDenials(t testing.TB, pod corev1.Pod) {
	t.Helper()
	for _, c := range pod.Spec.Containers {
		raw, err := e.client.CoreV1().Pods(pod.Namespace).GetLogs(pod.Name, &corev1.PodLogOptions{Container: c.Name}).DoRaw(context.Background())
		if err != nil {
			t.Errorf("logs of %s/%s: %v", pod.Name, c.Name, err)
			continue
		}
		for _, line := range strings.Split(string(raw), "\n") {
			if strings.Contains(strings.ToLower(line), "forbidden") {
				t.Errorf("%s/%s logged an RBAC denial: %s", pod.Name, c.Name, line)
			}
		}
	}
}

func podReady(p corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}
