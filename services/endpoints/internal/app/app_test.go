package app_test

import (
	"context"
	"flag"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/util/retry"

	"github.com/ipledger/ipledger/lab/testenv"
	"github.com/ipledger/ipledger/pkg/cmdmain"
	"github.com/ipledger/ipledger/pkg/leader"
	"github.com/ipledger/ipledger/pkg/stream"
	"github.com/ipledger/ipledger/services/endpoints/internal/app"
	"github.com/ipledger/ipledger/services/endpoints/internal/controller"
	"github.com/ipledger/ipledger/services/endpoints/internal/grants"
	"github.com/ipledger/ipledger/services/endpoints/internal/planner"
	"github.com/ipledger/ipledger/services/endpoints/internal/prober"
	"github.com/ipledger/ipledger/services/endpoints/internal/prober/probetest"
)

func TestMain(m *testing.M) { testenv.Main(m) }

var workloadGVR = schema.GroupVersionResource{Group: "ipledger.io", Version: "v1alpha1", Resource: "externalworkloads"}

const system = testenv.SystemNamespace

// freeAddr returns a loopback address with a port nobody listens on.

// startWatcher runs the real watcher binary with its own ServiceAccount and
// returns its gRPC address.
func startWatcher(t testing.TB, env *testenv.Env) string {
	t.Helper()
	_, addr, _ := startWatcherProcess(t, env)
	return addr
}

// startWatcherProcess is startWatcher that also returns the process, for a
// caller that stops it before the test ends.
func startWatcherProcess(t testing.TB, env *testenv.Env) (p *testenv.Process, addr, ops string) {
	t.Helper()
	token, err := env.ServiceAccountToken(context.Background(), system, "ipledger-watcher")
	if err != nil {
		t.Fatal(err)
	}
	addr, ops = testenv.FreeAddr(t), testenv.FreeAddr(t)
	p = testenv.StartProcess(t, "watcher", env.Binary(t, "watcher"), nil,
		"--kubeconfig", env.KubeconfigFor(t, token),
		"--grpc-addr", addr, "--grpc-plaintext",
		"--ops-addr", ops,
		"--log-format", "text")
	return p, addr, ops
}

// replica is one in-process ipledger-endpoints, authenticated as its own
// ServiceAccount to both the API server and the watcher.
type replica struct {
	*app.App
	name   string
	cancel context.CancelFunc
	done   chan error
}

type replicaOpts struct {
	lease         string
	maxPerSlice   int
	leaseDuration time.Duration
	retryPeriod   time.Duration
	qps           float64 // 0: 200
	workers       int     // 0: 4
	// probeFlags are parsed by the prober's own flags (--probe-allowed-cidrs,
	// --pod-cidrs, ...), as the binary parses them.
	probeFlags []string
	// dial, when set, sees every dial the prober makes (after its policy)
	// before it goes to probetest.LoopbackDial.
	dial func(address string)
	// grants is --workload-grants ("": off).
	grants grants.Mode
}

func startReplica(t *testing.T, env *testenv.Env, watcherAddr, name string, o replicaOpts) *replica {
	t.Helper()
	tokenFile := env.TokenFile(t, system, "ipledger-endpoints")
	env.GrantLease(t, system, "ipledger-endpoints", o.lease)
	if o.leaseDuration == 0 {
		o.leaseDuration = 4 * time.Second
	}
	if o.retryPeriod == 0 {
		o.retryPeriod = 200 * time.Millisecond
	}
	burst := 400
	if o.qps == 0 {
		o.qps = 200
	} else {
		burst = 1
	}
	if o.workers == 0 {
		o.workers = 4
	}
	cfg := app.Config{
		Common: cmdmain.Common{Kubeconfig: env.ServiceAccountKubeconfig(t, system, "ipledger-endpoints"), LogLevel: "info", LogFormat: "text", Namespace: system,
			KubeAPIQPS: o.qps, KubeAPIBurst: burst},
		Stream: stream.Config{Target: watcherAddr, TokenFile: tokenFile, Plaintext: true},
		Leader: leader.Config{
			LeaseName: o.lease, LeaseNamespace: system, Identity: name,
			LeaseDuration: o.leaseDuration, RenewDeadline: o.leaseDuration * 2 / 3, RetryPeriod: o.retryPeriod,
			StopTimeout: 20 * time.Second,
		},
		Controller: controller.Config{MaxEndpointsPerSlice: o.maxPerSlice, Workers: o.workers, ExpectationTimeout: time.Minute, WorkloadGrants: o.grants,
			Probe: prober.Config{Concurrency: 10, Dial: probetest.LoopbackDial}},
	}
	if cfg.Controller.MaxEndpointsPerSlice == 0 {
		cfg.Controller.MaxEndpointsPerSlice = planner.DefaultMaxEndpointsPerSlice
	}
	if o.probeFlags != nil {
		fs := flag.NewFlagSet("probe", flag.ContinueOnError)
		cfg.Controller.Probe.Flags(fs)
		if err := fs.Parse(o.probeFlags); err != nil {
			t.Fatal(err)
		}
	}
	if o.dial != nil {
		cfg.Controller.Probe.Dial = func(ctx context.Context, network, address string) (net.Conn, error) {
			o.dial(address)
			return probetest.LoopbackDial(ctx, network, address)
		}
	}
	a, err := app.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &replica{App: a, name: name, cancel: cancel, done: make(chan error, 1)}
	go func() { r.done <- a.Run(ctx) }()
	t.Cleanup(r.stop)
	return r
}

var stopOnce sync.Map

// stop ends the replica the way SIGTERM does and waits for Run to return.
func (r *replica) stop() {
	if _, loaded := stopOnce.LoadOrStore(r, true); loaded {
		return
	}
	r.cancel()
	<-r.done
}

func (r *replica) writes(op string) float64 {
	return testutil.ToFloat64(r.Controller.Metrics.SliceWrites.WithLabelValues(op, "success"))
}

// leader is the replica's ipledger_leader_is_leader gauge.
func (r *replica) leader() float64 {
	mfs, err := r.Registry.Gather()
	if err != nil {
		return -1
	}
	for _, mf := range mfs {
		if mf.GetName() == "ipledger_leader_is_leader" {
			for _, m := range mf.GetMetric() {
				return m.GetGauge().GetValue()
			}
		}
	}
	return -1
}

// termsStopped is how many terms have fully stopped (worker returned,
// writes cut off): the count of ipledger_leader_term_stop_duration_seconds.
func (r *replica) termsStopped() uint64 {
	mfs, err := r.Registry.Gather()
	if err != nil {
		return 0
	}
	for _, mf := range mfs {
		if mf.GetName() == "ipledger_leader_term_stop_duration_seconds" {
			n := uint64(0)
			for _, m := range mf.GetMetric() {
				n += m.GetHistogram().GetSampleCount()
			}
			return n
		}
	}
	return 0
}

func (r *replica) staleRetries() float64 {
	return testutil.ToFloat64(r.Controller.Metrics.StaleRetries)
}

func leaseName(t testing.TB) string {
	return "ep-" + strings.ToLower(strings.NewReplacer("/", "-", "_", "-").Replace(t.Name()))
}

type svcSpec struct {
	ports    []corev1.ServicePort
	families []corev1.IPFamily
}

func createService(t testing.TB, env *testenv.Env, ns, name string, spec svcSpec) *corev1.Service {
	t.Helper()
	if spec.ports == nil {
		spec.ports = []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromInt32(8080), Protocol: corev1.ProtocolTCP}}
	}
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: map[string]string{"team": "web"}},
		Spec:       corev1.ServiceSpec{Selector: map[string]string{"app": name}, Ports: spec.ports},
	}
	if len(spec.families) > 0 {
		svc.Spec.IPFamilies = spec.families
		policy := corev1.IPFamilyPolicySingleStack
		if len(spec.families) > 1 {
			policy = corev1.IPFamilyPolicyRequireDualStack
		}
		svc.Spec.IPFamilyPolicy = &policy
	}
	out, err := env.Client.CoreV1().Services(ns).Create(context.Background(), svc, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create Service %s/%s: %v", ns, name, err)
	}
	return out
}

type wlSpec struct {
	app   string
	ips   []string
	ports []map[string]any
	ready bool
	zone  string
	// probe is spec.readinessProbe; nil for none.
	probe map[string]any
	// noCondition leaves the status empty (ready is then ignored).
	noCondition bool
}

func createWorkload(t testing.TB, env *testenv.Env, ns, name string, spec wlSpec) {
	t.Helper()
	ctx := context.Background()
	ips := make([]any, 0, len(spec.ips))
	for _, ip := range spec.ips {
		ips = append(ips, map[string]any{"ip": ip})
	}
	labels := map[string]any{"app": spec.app}
	if spec.zone != "" {
		labels[corev1.LabelTopologyZone] = spec.zone
	}
	body := map[string]any{"workloadIPs": ips}
	if spec.ports != nil {
		ports := make([]any, 0, len(spec.ports))
		for _, p := range spec.ports {
			ports = append(ports, p)
		}
		body["ports"] = ports
	}
	if spec.probe != nil {
		body["readinessProbe"] = spec.probe
	}
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "ipledger.io/v1alpha1", "kind": "ExternalWorkload",
		"metadata": map[string]any{"name": name, "namespace": ns, "labels": labels},
		"spec":     body,
	}}
	res := env.Dynamic.Resource(workloadGVR).Namespace(ns)
	created, err := res.Create(ctx, u, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create ExternalWorkload %s/%s: %v", ns, name, err)
	}
	if spec.probe != nil {
		// Later replicas of this test binary serve every namespace: leave
		// them no probed workload of this test.
		t.Cleanup(func() { _ = res.Delete(context.Background(), name, metav1.DeleteOptions{}) })
	}
	if !spec.noCondition {
		setReady(t, env, created, spec.ready)
	}
}

func setReady(t testing.TB, env *testenv.Env, u *unstructured.Unstructured, ready bool) {
	t.Helper()
	status := "False"
	if ready {
		status = "True"
	}
	u = u.DeepCopy()
	u.Object["status"] = map[string]any{"conditions": []any{map[string]any{
		"type": "Ready", "status": status, "reason": "Test", "message": "set by the test",
		"lastTransitionTime": time.Now().UTC().Format(time.RFC3339),
	}}}
	if _, err := env.Dynamic.Resource(workloadGVR).Namespace(u.GetNamespace()).UpdateStatus(context.Background(), u, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("status of ExternalWorkload %s/%s: %v", u.GetNamespace(), u.GetName(), err)
	}
}

// ourSlices lists the slices of a Service that ipledger manages.
func ourSlices(env *testenv.Env, ns, svc string) ([]discoveryv1.EndpointSlice, error) {
	list, err := env.Client.DiscoveryV1().EndpointSlices(ns).List(context.Background(), metav1.ListOptions{
		LabelSelector: discoveryv1.LabelServiceName + "=" + svc + "," + discoveryv1.LabelManagedBy + "=" + planner.ManagedBy,
	})
	if err != nil {
		return nil, err
	}
	slices.SortFunc(list.Items, func(a, b discoveryv1.EndpointSlice) int { return strings.Compare(a.Name, b.Name) })
	return list.Items, nil
}

func endpointCount(ss []discoveryv1.EndpointSlice) int {
	n := 0
	for _, s := range ss {
		n += len(s.Endpoints)
	}
	return n
}

// waitSlices waits until the Service has exactly the wanted number of
// slices holding want endpoints in all.
func waitSlices(t testing.TB, env *testenv.Env, ns, svc string, slicesWant, endpointsWant int) []discoveryv1.EndpointSlice {
	t.Helper()
	var got []discoveryv1.EndpointSlice
	testenv.Eventually(t, 60*time.Second, func() error {
		var err error
		if got, err = ourSlices(env, ns, svc); err != nil {
			return err
		}
		if len(got) != slicesWant || endpointCount(got) != endpointsWant {
			return fmt.Errorf("%d slices with %d endpoints, want %d with %d", len(got), endpointCount(got), slicesWant, endpointsWant)
		}
		return nil
	})
	return got
}

func TestSameNamespaceReadyWorkloads(t *testing.T) {
	env := testenv.Get(t)
	addr := startWatcher(t, env)
	nsA, nsB := env.Namespace(t, nil), env.Namespace(t, nil)
	svc := createService(t, env, nsA, "web", svcSpec{})
	for i := range 3 {
		createWorkload(t, env, nsA, fmt.Sprintf("vm-%d", i), wlSpec{app: "web", ips: []string{fmt.Sprintf("192.0.2.%d", i+1)}, ready: true, zone: "zone-a"})
	}
	createWorkload(t, env, nsB, "vm-other", wlSpec{app: "web", ips: []string{"192.0.2.9"}, ready: true})
	startReplica(t, env, addr, "a", replicaOpts{lease: leaseName(t)})

	got := waitSlices(t, env, nsA, "web", 1, 3)
	s := got[0]
	if s.AddressType != discoveryv1.AddressTypeIPv4 {
		t.Errorf("address type %s", s.AddressType)
	}
	if s.Labels["team"] != "web" || s.Labels[discoveryv1.LabelServiceName] != "web" || s.Labels[discoveryv1.LabelManagedBy] != planner.ManagedBy {
		t.Errorf("labels %v", s.Labels)
	}
	if len(s.OwnerReferences) != 1 || s.OwnerReferences[0].UID != svc.UID || s.OwnerReferences[0].Controller == nil || !*s.OwnerReferences[0].Controller {
		t.Errorf("ownerReferences %+v", s.OwnerReferences)
	}
	if _, ok := s.Annotations[corev1.EndpointsLastChangeTriggerTime]; !ok {
		t.Errorf("no %s annotation", corev1.EndpointsLastChangeTriggerTime)
	}
	if len(s.Ports) != 1 || *s.Ports[0].Port != 8080 || *s.Ports[0].Name != "http" {
		t.Errorf("ports %+v", s.Ports)
	}
	for _, e := range s.Endpoints {
		if !*e.Conditions.Ready || !*e.Conditions.Serving || *e.Conditions.Terminating || e.Zone == nil || *e.Zone != "zone-a" ||
			e.TargetRef == nil || e.TargetRef.Kind != "ExternalWorkload" || e.TargetRef.Namespace != nsA {
			t.Errorf("endpoint %+v", e)
		}
	}

	// Not Ready any more: the endpoint stays, not ready and not serving.
	u, err := env.Dynamic.Resource(workloadGVR).Namespace(nsA).Get(context.Background(), "vm-0", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	setReady(t, env, u, false)
	testenv.Eventually(t, 30*time.Second, func() error {
		ss, err := ourSlices(env, nsA, "web")
		if err != nil || len(ss) != 1 {
			return fmt.Errorf("slices %d: %v", len(ss), err)
		}
		for _, e := range ss[0].Endpoints {
			if e.TargetRef.Name == "vm-0" && !*e.Conditions.Ready && !*e.Conditions.Serving {
				return nil
			}
		}
		return fmt.Errorf("vm-0 still ready")
	})
}

func TestPackingAndMinimalWrites(t *testing.T) {
	env := testenv.Get(t)
	addr := startWatcher(t, env)
	ns := env.Namespace(t, nil)
	createService(t, env, ns, "big", svcSpec{})
	for i := range 250 {
		createWorkload(t, env, ns, fmt.Sprintf("vm-%03d", i), wlSpec{app: "big", ips: []string{fmt.Sprintf("10.1.%d.%d", i/200, i%200+1)}, ready: true})
	}
	r := startReplica(t, env, addr, "a", replicaOpts{lease: leaseName(t), maxPerSlice: 100})
	before := waitSlices(t, env, ns, "big", 3, 250)
	waitQuiet(t, r)

	creates, updates, deletes := r.writes("create"), r.writes("update"), r.writes("delete")
	if err := env.Dynamic.Resource(workloadGVR).Namespace(ns).Delete(context.Background(), "vm-123", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	after := waitSlices(t, env, ns, "big", 3, 249)
	waitQuiet(t, r)
	if changed := changedSlices(before, after); len(changed) != 1 {
		t.Fatalf("deleting one workload changed slices %v, want exactly one", changed)
	}
	if d := [3]float64{r.writes("create") - creates, r.writes("update") - updates, r.writes("delete") - deletes}; d != [3]float64{0, 1, 0} {
		t.Fatalf("writes (create, update, delete) %v, want [0 1 0]", d)
	}

	before, creates, updates, deletes = after, r.writes("create"), r.writes("update"), r.writes("delete")
	createWorkload(t, env, ns, "vm-new", wlSpec{app: "big", ips: []string{"10.1.9.9"}, ready: true})
	after = waitSlices(t, env, ns, "big", 3, 250)
	waitQuiet(t, r)
	changed := changedSlices(before, after)
	if len(changed) != 1 {
		t.Fatalf("adding one workload changed slices %v, want exactly one", changed)
	}
	for _, s := range before {
		if s.Name == changed[0] && len(s.Endpoints) >= 100 {
			t.Fatalf("the new endpoint went into full slice %s", s.Name)
		}
	}
	// Creating a workload and then setting its status are two changes; each
	// may be one update, never a create.
	if r.writes("create") != creates || r.writes("delete") != deletes || r.writes("update")-updates > 2 {
		t.Fatalf("writes after adding one: create %v, update %v, delete %v", r.writes("create")-creates, r.writes("update")-updates, r.writes("delete")-deletes)
	}
	if r.staleRetries() > 0 {
		t.Logf("stale retries: %v", r.staleRetries())
	}
}

// waitQuiet waits until the replica leads and has nothing queued or in
// flight: it has caught up with everything it has seen.
func waitQuiet(t *testing.T, r *replica) {
	t.Helper()
	testenv.Eventually(t, 30*time.Second, func() error {
		if p := r.Controller.Pending(); p != 0 {
			return fmt.Errorf("%d Services pending", p)
		}
		return nil
	})
}

func changedSlices(before, after []discoveryv1.EndpointSlice) []string {
	rv := map[string]string{}
	for _, s := range before {
		rv[s.Name] = s.ResourceVersion
	}
	var out []string
	for _, s := range after {
		if rv[s.Name] != s.ResourceVersion {
			out = append(out, s.Name)
		}
	}
	return out
}

func TestNamedTargetPort(t *testing.T) {
	env := testenv.Get(t)
	addr := startWatcher(t, env)
	ns := env.Namespace(t, nil)
	createService(t, env, ns, "named", svcSpec{ports: []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromString("web"), Protocol: corev1.ProtocolTCP}}})
	webPort := []map[string]any{{"name": "web", "port": int64(9090), "protocol": "TCP"}}
	createWorkload(t, env, ns, "vm-1", wlSpec{app: "named", ips: []string{"192.0.2.1"}, ports: webPort, ready: true})
	createWorkload(t, env, ns, "vm-2", wlSpec{app: "named", ips: []string{"192.0.2.2"}, ports: webPort, ready: true})
	createWorkload(t, env, ns, "vm-noport", wlSpec{app: "named", ips: []string{"192.0.2.3"}, ports: []map[string]any{{"name": "admin", "port": int64(22)}}, ready: true})
	startReplica(t, env, addr, "a", replicaOpts{lease: leaseName(t)})

	got := waitSlices(t, env, ns, "named", 1, 2)
	if *got[0].Ports[0].Port != 9090 {
		t.Fatalf("port %d, want 9090", *got[0].Ports[0].Port)
	}
	for _, e := range got[0].Endpoints {
		if e.TargetRef.Name == "vm-noport" {
			t.Fatalf("workload without the named port got an endpoint")
		}
	}
	testenv.Eventually(t, 30*time.Second, func() error {
		evs, err := env.Client.CoreV1().Events(ns).List(context.Background(), metav1.ListOptions{FieldSelector: "reason=ExternalWorkloadSkipped"})
		if err != nil {
			return err
		}
		for _, e := range evs.Items {
			if strings.Contains(e.Message, "vm-noport") && e.InvolvedObject.Name == "named" {
				return nil
			}
		}
		return fmt.Errorf("no ExternalWorkloadSkipped event for vm-noport")
	})
}

func TestDualStackThenIPv4Only(t *testing.T) {
	env := testenv.Get(t)
	addr := startWatcher(t, env)
	ns := env.Namespace(t, nil)
	createService(t, env, ns, "dual", svcSpec{families: []corev1.IPFamily{corev1.IPv4Protocol, corev1.IPv6Protocol}})
	createWorkload(t, env, ns, "vm-1", wlSpec{app: "dual", ips: []string{"192.0.2.1", "2001:db8::1"}, ready: true})
	createWorkload(t, env, ns, "vm-2", wlSpec{app: "dual", ips: []string{"2001:db8::2", "192.0.2.2"}, ready: true})
	startReplica(t, env, addr, "a", replicaOpts{lease: leaseName(t)})

	got := waitSlices(t, env, ns, "dual", 2, 4)
	types := []discoveryv1.AddressType{got[0].AddressType, got[1].AddressType}
	slices.Sort(types)
	if !slices.Equal(types, []discoveryv1.AddressType{discoveryv1.AddressTypeIPv4, discoveryv1.AddressTypeIPv6}) {
		t.Fatalf("address types %v", types)
	}

	svc, err := env.Client.CoreV1().Services(ns).Get(context.Background(), "dual", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	single := corev1.IPFamilyPolicySingleStack
	svc.Spec.IPFamilyPolicy = &single
	svc.Spec.IPFamilies = svc.Spec.IPFamilies[:1]
	svc.Spec.ClusterIPs = svc.Spec.ClusterIPs[:1]
	if _, err := env.Client.CoreV1().Services(ns).Update(context.Background(), svc, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	got = waitSlices(t, env, ns, "dual", 1, 2)
	if got[0].AddressType != discoveryv1.AddressTypeIPv4 {
		t.Fatalf("left with %s slice", got[0].AddressType)
	}
}

// TestHandover: A leads and writes, then stops leading; a slice is deleted
// out of band; B acquires and puts it back in its first sync, without
// waiting on a stale view.
func TestHandover(t *testing.T) {
	env := testenv.Get(t)
	addr := startWatcher(t, env)
	ns := env.Namespace(t, nil)
	createService(t, env, ns, "ho", svcSpec{})
	for i := range 3 {
		createWorkload(t, env, ns, fmt.Sprintf("vm-%d", i), wlSpec{app: "ho", ips: []string{fmt.Sprintf("192.0.2.%d", i+1)}, ready: true})
	}
	lease := leaseName(t)
	a := startReplica(t, env, addr, "a", replicaOpts{lease: lease})
	got := waitSlices(t, env, ns, "ho", 1, 3)
	a.stop() // drains, releases the Lease
	waitLeaseFree(t, env, lease)

	if err := env.Client.DiscoveryV1().EndpointSlices(ns).Delete(context.Background(), got[0].Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	b := startReplica(t, env, addr, "b", replicaOpts{lease: lease})
	waitSlices(t, env, ns, "ho", 1, 3)
	waitQuiet(t, b)
	if b.staleRetries() != 0 {
		t.Fatalf("B retried %v times on a stale view", b.staleRetries())
	}
	if c := b.writes("create"); c != 1 {
		t.Fatalf("B created %v slices, want 1", c)
	}
}

// TestReacquireAfterLosingLease is the Linkerd bug: the same replica leads,
// loses the Lease, a slice it wrote is deleted while it does not lead, and
// it leads again: a tracker kept from the first term would wait forever for
// the deleted slice; a fresh one re-creates it at once.
func TestReacquireAfterLosingLease(t *testing.T) {
	env := testenv.Get(t)
	addr := startWatcher(t, env)
	ns := env.Namespace(t, nil)
	createService(t, env, ns, "re", svcSpec{})
	createWorkload(t, env, ns, "vm-0", wlSpec{app: "re", ips: []string{"192.0.2.1"}, ready: true})
	lease := leaseName(t)
	a := startReplica(t, env, addr, "a", replicaOpts{lease: lease, leaseDuration: 2 * time.Second})
	got := waitSlices(t, env, ns, "re", 1, 1)
	waitQuiet(t, a)

	// Someone else takes the Lease: A cannot renew and stops leading.
	ctx := context.Background()
	takeLease(t, env, lease, 3*time.Second)
	// Only once A has stopped leading (its handlers are gone, so its tracker
	// never hears of the delete) is the slice deleted.
	testenv.Eventually(t, 30*time.Second, func() error {
		if v := a.leader(); v != 0 {
			return fmt.Errorf("A still leads")
		}
		return nil
	})
	if err := env.Client.DiscoveryV1().EndpointSlices(ns).Delete(ctx, got[0].Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	// The intruder never renews: A acquires again and repairs the slice.
	waitSlices(t, env, ns, "re", 1, 1)
	testenv.Eventually(t, 30*time.Second, func() error {
		l, err := env.Client.CoordinationV1().Leases(system).Get(ctx, lease, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity != "a" {
			return fmt.Errorf("lease held by %v", l.Spec.HolderIdentity)
		}
		return nil
	})
	waitQuiet(t, a)
	if a.staleRetries() != 0 {
		t.Fatalf("A retried %v times on a stale view after re-acquiring", a.staleRetries())
	}
}

// takeLease makes "intruder" hold the Lease for d, as another replica would.
func takeLease(t *testing.T, env *testenv.Env, lease string, d time.Duration) {
	t.Helper()
	ctx := context.Background()
	// The holder renews meanwhile: read again and retry on a conflict, as
	// a real intruder would.
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		l, err := env.Client.CoordinationV1().Leases(system).Get(ctx, lease, metav1.GetOptions{})
		if err != nil {
			return err
		}
		intruder, secs := "intruder", int32(d.Seconds())
		now := metav1.NewMicroTime(time.Now())
		l.Spec.HolderIdentity, l.Spec.LeaseDurationSeconds, l.Spec.AcquireTime, l.Spec.RenewTime = &intruder, &secs, &now, &now
		_, err = env.Client.CoordinationV1().Leases(system).Update(ctx, l, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestLostLeaseStopsWrites: a leader with 20 Services queued behind a
// throttled client loses the Lease; once its term has stopped, it writes
// nothing more.
func TestLostLeaseStopsWrites(t *testing.T) {
	env := testenv.Get(t)
	addr := startWatcher(t, env)
	ns := env.Namespace(t, nil)
	lease := leaseName(t)
	a := startReplica(t, env, addr, "a", replicaOpts{lease: lease, qps: 3, workers: 1, retryPeriod: time.Second})
	testenv.Eventually(t, 60*time.Second, func() error {
		if a.leader() != 1 {
			return fmt.Errorf("A does not lead yet")
		}
		return nil
	})
	for i := range 20 {
		name := fmt.Sprintf("s%02d", i)
		createService(t, env, ns, name, svcSpec{})
		createWorkload(t, env, ns, "vm-"+name, wlSpec{app: name, ips: []string{fmt.Sprintf("192.0.2.%d", i+1)}, ready: true})
	}
	count := func() int {
		list, err := env.Client.DiscoveryV1().EndpointSlices(ns).List(context.Background(), metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return len(list.Items)
	}
	testenv.Eventually(t, 30*time.Second, func() error {
		if count() == 0 {
			return fmt.Errorf("no slice yet")
		}
		return nil
	})
	takeLease(t, env, lease, time.Hour)
	testenv.Eventually(t, 30*time.Second, func() error {
		if a.termsStopped() == 0 {
			return fmt.Errorf("A's term has not stopped")
		}
		return nil
	})
	atStop, writesAtStop := count(), a.writes("create")
	if atStop >= 20 {
		t.Fatalf("all 20 slices written before the Lease was lost: the throttle is too weak for this test to prove anything")
	}
	a.stop()
	if n, w := count(), a.writes("create"); n != atStop || w != writesAtStop {
		t.Fatalf("after its term stopped A still wrote: slices %d -> %d, creates %v -> %v", atStop, n, writesAtStop, w)
	}
}

func waitLeaseFree(t *testing.T, env *testenv.Env, lease string) {
	t.Helper()
	testenv.Eventually(t, 30*time.Second, func() error {
		l, err := env.Client.CoordinationV1().Leases(system).Get(context.Background(), lease, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		if err != nil {
			return err
		}
		if h := l.Spec.HolderIdentity; h != nil && *h != "" {
			return fmt.Errorf("lease still held by %s", *h)
		}
		return nil
	})
}

// TestForeignSliceUntouched: a slice with our service-name label but
// another manager is left exactly as it is.
func TestForeignSliceUntouched(t *testing.T) {
	env := testenv.Get(t)
	addr := startWatcher(t, env)
	ns := env.Namespace(t, nil)
	createService(t, env, ns, "mixed", svcSpec{})
	foreign, err := env.Client.DiscoveryV1().EndpointSlices(ns).Create(context.Background(), &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Name: "mixed-foreign", Labels: map[string]string{
			discoveryv1.LabelServiceName: "mixed", discoveryv1.LabelManagedBy: "someone-else.example.com"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{"192.0.2.1"}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	createWorkload(t, env, ns, "vm-0", wlSpec{app: "mixed", ips: []string{"192.0.2.1"}, ready: true})
	r := startReplica(t, env, addr, "a", replicaOpts{lease: leaseName(t)})
	waitSlices(t, env, ns, "mixed", 1, 1)
	waitQuiet(t, r)
	now, err := env.Client.DiscoveryV1().EndpointSlices(ns).Get(context.Background(), foreign.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("foreign slice: %v", err)
	}
	if now.ResourceVersion != foreign.ResourceVersion {
		t.Fatalf("foreign slice was modified")
	}
}

// TestSIGTERMDrainsBeforeRelease runs the real binary with a throttled API
// client, queues 5 Services, and sends SIGTERM once the first slice exists:
// every Service is synced before the process releases the Lease and exits.
func TestSIGTERMDrainsBeforeRelease(t *testing.T) {
	env := testenv.Get(t)
	addr := startWatcher(t, env)
	ns := env.Namespace(t, nil)
	tokenFile := env.TokenFile(t, system, "ipledger-endpoints")
	lease := leaseName(t)
	env.GrantLease(t, system, "ipledger-endpoints", lease)
	p := testenv.StartProcess(t, "endpoints", env.Binary(t, "endpoints"), nil,
		"--kubeconfig", env.ServiceAccountKubeconfig(t, system, "ipledger-endpoints"),
		"--watcher-addr", addr, "--watcher-plaintext", "--watcher-token-file", tokenFile,
		"--leader-elect-lease-name", lease, "--leader-elect-identity", "sig",
		"--ops-addr", testenv.FreeAddr(t), "--log-format", "text",
		// One write every 400ms: the queue is still full when SIGTERM comes.
		"--kube-api-qps", "2.5", "--kube-api-burst", "1", "--workers", "1")
	testenv.Eventually(t, 60*time.Second, func() error {
		l, err := env.Client.CoordinationV1().Leases(system).Get(context.Background(), lease, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity != "sig" {
			return fmt.Errorf("lease held by %v", l.Spec.HolderIdentity)
		}
		return nil
	})
	for i := range 5 {
		name := fmt.Sprintf("s%d", i)
		createService(t, env, ns, name, svcSpec{})
		createWorkload(t, env, ns, "vm-"+name, wlSpec{app: name, ips: []string{fmt.Sprintf("192.0.2.%d", i+1)}, ready: true})
	}
	testenv.Eventually(t, 30*time.Second, func() error {
		list, err := env.Client.DiscoveryV1().EndpointSlices(ns).List(context.Background(), metav1.ListOptions{})
		if err != nil {
			return err
		}
		if len(list.Items) == 0 {
			return fmt.Errorf("no slice yet")
		}
		if len(list.Items) == 5 {
			t.Fatalf("all 5 slices written before SIGTERM: the throttle is too weak for this test to prove anything")
		}
		return nil
	})
	if err := p.Stop(30 * time.Second); err != nil {
		t.Fatalf("exit: %v\n%s", err, p.Logs())
	}
	for i := range 5 {
		if ss, err := ourSlices(env, ns, fmt.Sprintf("s%d", i)); err != nil || len(ss) != 1 {
			t.Errorf("Service s%d: %d slices after shutdown (%v)", i, len(ss), err)
		}
	}
	l, err := env.Client.CoordinationV1().Leases(system).Get(context.Background(), lease, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if h := l.Spec.HolderIdentity; h != nil && *h != "" {
		t.Fatalf("lease still held by %s after exit", *h)
	}
}
