package app_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/ipledger/ipledger/lab/testenv"
	"github.com/ipledger/ipledger/services/endpoints/internal/controller"
	"github.com/ipledger/ipledger/services/endpoints/internal/prober/probetest"
)

func tcpProbe(port int, failureThreshold int64) map[string]any {
	return map[string]any{"tcpSocket": map[string]any{"port": int64(port)}, "periodSeconds": int64(1), "failureThreshold": failureThreshold}
}

// readyCondition is the workload's Ready condition as the API server has it.
func readyCondition(env *testenv.Env, ns, name string) (status, reason, message string, err error) {
	u, err := env.Dynamic.Resource(workloadGVR).Namespace(ns).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		return "", "", "", err
	}
	conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
	for _, c := range conds {
		m, _ := c.(map[string]any)
		if m["type"] == "Ready" {
			return fmt.Sprint(m["status"]), fmt.Sprint(m["reason"]), fmt.Sprint(m["message"]), nil
		}
	}
	return "", "", "", nil
}

// waitCondition waits for the workload's Ready condition to have status,
// reason and a message containing every one of contains.
func waitCondition(t *testing.T, env *testenv.Env, ns, name, status, reason string, contains ...string) string {
	t.Helper()
	var msg string
	testenv.Eventually(t, 60*time.Second, func() error {
		s, r, m, err := readyCondition(env, ns, name)
		if err != nil {
			return err
		}
		if s != status || r != reason {
			return fmt.Errorf("Ready=%q reason %q (%q), want %s/%s", s, r, m, status, reason)
		}
		for _, c := range contains {
			if !strings.Contains(m, c) {
				return fmt.Errorf("message %q does not contain %q", m, c)
			}
		}
		msg = m
		return nil
	})
	return msg
}

// waitEndpoint waits until the Service's slices hold the workload's
// endpoint with the given ready and serving conditions.
func waitEndpoint(t *testing.T, env *testenv.Env, ns, svc, workload string, ready bool) {
	t.Helper()
	testenv.Eventually(t, 60*time.Second, func() error {
		ss, err := ourSlices(env, ns, svc)
		if err != nil {
			return err
		}
		for _, s := range ss {
			for _, e := range s.Endpoints {
				if e.TargetRef == nil || e.TargetRef.Name != workload {
					continue
				}
				if r, sv := e.Conditions.Ready != nil && *e.Conditions.Ready, e.Conditions.Serving != nil && *e.Conditions.Serving; r != ready || sv != ready {
					return fmt.Errorf("%s in %s: ready %v serving %v, want %v", workload, svc, r, sv, ready)
				}
				return nil
			}
		}
		return fmt.Errorf("no endpoint of %s in %s's %d slices", workload, svc, len(ss))
	})
}

func (r *replica) metric(t testing.TB, name string, labels map[string]string) float64 {
	return testenv.MetricValue(t, r.Registry, name, labels)
}

// probes counts every probe the replica sent, of any workload: a replica
// serves every namespace, other tests' too.
func (r *replica) probes(t testing.TB) float64 {
	return r.metric(t, "ipledger_endpoints_probes_total", nil)
}

// resourceVersion of the workload: unchanged means nothing wrote it.
func resourceVersion(t *testing.T, env *testenv.Env, ns, name string) string {
	t.Helper()
	u, err := env.Dynamic.Resource(workloadGVR).Namespace(ns).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return u.GetResourceVersion()
}

// TestNoProbeNoConditionIsReady: a workload that has no readiness probe and
// no Ready condition is ready, as a Pod without a readiness probe, and the
// leader writes no condition for it.
func TestNoProbeNoConditionIsReady(t *testing.T) {
	env := testenv.Get(t)
	addr := startWatcher(t, env)
	ns := env.Namespace(t, nil)
	createService(t, env, ns, "plain", svcSpec{})
	createWorkload(t, env, ns, "vm-0", wlSpec{app: "plain", ips: []string{"192.0.2.1"}, noCondition: true})
	r := startReplica(t, env, addr, "a", replicaOpts{lease: leaseName(t)})
	waitSlices(t, env, ns, "plain", 1, 1)
	waitEndpoint(t, env, ns, "plain", "vm-0", true)
	waitQuiet(t, r)
	if s, _, _, err := readyCondition(env, ns, "vm-0"); err != nil || s != "" {
		t.Fatalf("a workload without a probe got a Ready condition %q (%v)", s, err)
	}
}

// TestReadinessProbe: a workload with a TCP probe against a live listener
// becomes Ready=True and its endpoint ready in both Services that select it,
// probed once per period (not once per Service), with no write while it
// stays ready; once the listener closes, failureThreshold failed probes make
// it Ready=False, saying why, and its endpoints not ready.
func TestReadinessProbe(t *testing.T) {
	env := testenv.Get(t)
	addr := startWatcher(t, env)
	ns := env.Namespace(t, nil)
	l := probetest.Listen(t)
	createService(t, env, ns, "web", svcSpec{})
	// A second Service selecting the same workload.
	if _, err := env.Client.CoreV1().Services(ns).Create(context.Background(), &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "web-too"},
		Spec: corev1.ServiceSpec{Selector: map[string]string{"app": "web"},
			Ports: []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromInt32(8080)}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	createWorkload(t, env, ns, "vm-0", wlSpec{app: "web", ips: []string{"192.0.2.1"}, noCondition: true, probe: tcpProbe(l.Port(), 2)})
	startReplica(t, env, addr, "a", replicaOpts{lease: leaseName(t)})

	hostPort := fmt.Sprintf("192.0.2.1:%d", l.Port())
	waitCondition(t, env, ns, "vm-0", "True", "ProbeSucceeded", hostPort)
	waitEndpoint(t, env, ns, "web", "vm-0", true)
	waitEndpoint(t, env, ns, "web-too", "vm-0", true)

	// One probe per period for the workload, though two Services select it;
	// and while it stays ready, nothing more is written.
	rv := resourceVersion(t, env, ns, "vm-0")
	times := l.WaitAccepted(t, l.Count()+4)
	for i := 1; i < len(times); i++ {
		if gap := times[i].Sub(times[i-1]); gap < 500*time.Millisecond {
			t.Fatalf("probes %d and %d %s apart with periodSeconds 1: more than one probe per period", i-1, i, gap)
		}
	}
	if now := resourceVersion(t, env, ns, "vm-0"); now != rv {
		t.Fatalf("the workload was written (resourceVersion %s -> %s) while it stayed ready", rv, now)
	}

	// The message counts the failures in a row that made it not Ready.
	l.Close()
	closed := time.Now()
	waitCondition(t, env, ns, "vm-0", "False", "ProbeFailed", hostPort, "connection refused", "(2 consecutive failures)")
	if d := time.Since(closed); d < time.Second {
		t.Fatalf("Ready=False %s after the listener closed, want at least failureThreshold-1 periods (1s)", d)
	}
	waitEndpoint(t, env, ns, "web", "vm-0", false)
	waitEndpoint(t, env, ns, "web-too", "vm-0", false)
}

// TestProbesOnlyWhileLeading: a standby never probes; a leader that loses
// the Lease stops probing with its term, though its process runs on; the
// next leader probes, and writes nothing when the condition already agrees.
func TestProbesOnlyWhileLeading(t *testing.T) {
	env := testenv.Get(t)
	addr := startWatcher(t, env)
	ns := env.Namespace(t, nil)
	l := probetest.Listen(t)
	createService(t, env, ns, "web", svcSpec{})
	createWorkload(t, env, ns, "vm-0", wlSpec{app: "web", ips: []string{"192.0.2.1"}, noCondition: true, probe: tcpProbe(l.Port(), 3)})
	lease := leaseName(t)
	a := startReplica(t, env, addr, "a", replicaOpts{lease: lease})
	testenv.Eventually(t, 60*time.Second, func() error {
		if a.leader() != 1 {
			return fmt.Errorf("A does not lead yet")
		}
		return nil
	})
	b := startReplica(t, env, addr, "b", replicaOpts{lease: lease})
	testenv.Eventually(t, 60*time.Second, func() error {
		if b.leader() != 0 {
			return fmt.Errorf("B is not a campaigning standby yet (leader gauge %v)", b.leader())
		}
		return nil
	})
	waitCondition(t, env, ns, "vm-0", "True", "ProbeSucceeded")
	waitEndpoint(t, env, ns, "web", "vm-0", true)
	l.WaitAccepted(t, 3)
	if n := b.probes(t); n != 0 {
		t.Fatalf("the standby probed %v times", n)
	}
	if g := b.metric(t, "ipledger_endpoints_probed_workloads", nil); g != 0 {
		t.Fatalf("the standby exports %v probed workloads", g)
	}

	// An intruder holds the Lease for a while: A's term ends; until someone
	// leads again, nobody probes.
	rv := resourceVersion(t, env, ns, "vm-0")
	takeLease(t, env, lease, 4*time.Second)
	testenv.Eventually(t, 30*time.Second, func() error {
		if a.termsStopped() == 0 {
			return fmt.Errorf("A's term has not stopped")
		}
		return nil
	})
	aProbes := a.probes(t)
	testenv.Eventually(t, 60*time.Second, func() error {
		if n := a.probes(t); n != aProbes && a.leader() != 1 {
			t.Fatalf("A probed %v times after its term ended", n-aProbes)
		}
		if n := b.probes(t); n != 0 && b.leader() != 1 {
			t.Fatalf("B probed %v times while not leading", n)
		}
		if a.leader() != 1 && b.leader() != 1 {
			return fmt.Errorf("nobody leads yet")
		}
		return nil
	})
	// The new leader probes; the condition already says True, so it
	// writes nothing, from its first probe on.
	l.WaitAccepted(t, l.Count()+3)
	if now := resourceVersion(t, env, ns, "vm-0"); now != rv {
		t.Fatalf("the workload was written (resourceVersion %s -> %s) by a new leader though its condition already said True", rv, now)
	}
	if s, _, _, _ := readyCondition(env, ns, "vm-0"); s != "True" {
		t.Fatalf("Ready=%q after the handover", s)
	}
}

// TestProbeNeverDialsWhatThePolicyRefuses: the prober is not a port
// scanner a tenant can aim. A workload in the pod CIDR (--pod-cidrs) and
// one at AWS's IPv6 metadata address (which the API server accepts in a
// workload, unlike 169.254.169.254) are never dialed: the listener the
// first one names sees no connection, the prober's dialer sees no dial of
// either; each is Ready=False with reason ProbeRefused naming why and the
// flag to change, has a ProbeRefused Event and is counted, and the Service
// has no endpoint of it (AddressAccepted=False). A replica whose --probe-allowed-cidrs names the
// first address explicitly probes it, and it becomes Ready.
func TestProbeNeverDialsWhatThePolicyRefuses(t *testing.T) {
	env := testenv.Get(t)
	addr := startWatcher(t, env)
	ns := env.Namespace(t, nil)
	l := probetest.Listen(t)
	var mu sync.Mutex
	var dialed []string
	dial := func(a string) {
		mu.Lock()
		dialed = append(dialed, a)
		mu.Unlock()
	}
	createService(t, env, ns, "web", svcSpec{})
	createWorkload(t, env, ns, "in-pods", wlSpec{app: "web", ips: []string{"192.0.2.1"}, noCondition: true, probe: tcpProbe(l.Port(), 3)})
	createWorkload(t, env, ns, "imds", wlSpec{app: "web", ips: []string{"fd00:ec2::254"}, noCondition: true, probe: tcpProbe(l.Port(), 3)})
	lease := leaseName(t)
	a := startReplica(t, env, addr, "a", replicaOpts{lease: lease, dial: dial, probeFlags: []string{"--pod-cidrs=192.0.2.0/24,fd00:10:244::/56"}})

	waitCondition(t, env, ns, "in-pods", "False", "ProbeRefused",
		"TCP probe of 192.0.2.1 not probed", "in the pod CIDR 192.0.2.0/24 (--pod-cidrs)", "--probe-allowed-cidrs")
	waitCondition(t, env, ns, "imds", "False", "ProbeRefused", "fd00:ec2::254 is AWS's instance services")
	// An address in --pod-cidrs never enters a slice either (docs/security.md,
	// "What an ExternalWorkload may name"): before 0.3.0 it was a not-ready
	// endpoint.
	waitAddressAccepted(t, env, ns, "in-pods", metav1.ConditionFalse, controller.ReasonClusterAddress, "192.0.2.1", "--pod-cidrs")
	testenv.Eventually(t, 30*time.Second, func() error {
		if n := a.Controller.Pending(); n != 0 {
			return fmt.Errorf("%d Services pending", n)
		}
		return nil
	})
	if ss, err := ourSlices(env, ns, "web"); err != nil || endpointCount(ss) != 0 {
		t.Fatalf("web's slices hold %d endpoints (%v), want none: in-pods is in --pod-cidrs", endpointCount(ss), err)
	}
	for _, name := range []string{"in-pods", "imds"} {
		testenv.Eventually(t, 30*time.Second, func() error {
			evs, err := env.Client.CoreV1().Events(ns).List(context.Background(), metav1.ListOptions{
				FieldSelector: "reason=ProbeRefused,involvedObject.kind=ExternalWorkload,involvedObject.name=" + name})
			if err != nil {
				return err
			}
			if len(evs.Items) == 0 {
				return fmt.Errorf("no ProbeRefused Event on %s", name)
			}
			if e := evs.Items[0]; e.Type != corev1.EventTypeWarning || !strings.Contains(e.Message, "not probed") {
				return fmt.Errorf("event %s %q", e.Type, e.Message)
			}
			return nil
		})
	}
	// Several periods later: still nothing dialed, nothing accepted.
	testenv.Eventually(t, 30*time.Second, func() error {
		if n := a.metric(t, "ipledger_endpoints_probes_refused_total", map[string]string{"reason": "pod-cidr"}); n < 3 {
			return fmt.Errorf("%v pod-cidr refusals so far", n)
		}
		return nil
	})
	if n := a.metric(t, "ipledger_endpoints_probes_refused_total", map[string]string{"reason": "cloud-metadata"}); n < 1 {
		t.Fatalf("%v cloud-metadata refusals", n)
	}
	mu.Lock()
	if len(dialed) != 0 {
		t.Fatalf("the prober dialed %q", dialed)
	}
	mu.Unlock()
	if n := l.Count(); n != 0 {
		t.Fatalf("the listener of a refused workload accepted %d connections", n)
	}

	// The operator admits that one address explicitly; the pod CIDR stays
	// refused around it and the metadata address whatever the flags.
	a.stop()
	startReplica(t, env, addr, "b", replicaOpts{lease: lease, dial: dial,
		probeFlags: []string{"--pod-cidrs=192.0.2.0/24", "--probe-allowed-cidrs=192.0.2.1/32,fd00::/8"}})
	waitCondition(t, env, ns, "in-pods", "True", "ProbeSucceeded", fmt.Sprintf("192.0.2.1:%d", l.Port()))
	waitEndpoint(t, env, ns, "web", "in-pods", true)
	l.WaitAccepted(t, 1) // Ready came from a connection
	waitCondition(t, env, ns, "imds", "False", "ProbeRefused", "fd00:ec2::254")
	mu.Lock()
	defer mu.Unlock()
	for _, d := range dialed {
		if !strings.HasPrefix(d, "192.0.2.1:") {
			t.Fatalf("the prober dialed %s", d)
		}
	}
}

// TestProbeAllowedNoneRefusesEveryProbe: overlays/production ships
// --probe-allowed-cidrs=none until the operator names the workload
// networks. A replica so configured still starts, syncs and leads — it
// keeps the Service's slice, the workload's endpoint not ready — but dials
// nothing: the workload is Ready=False, ProbeRefused, and the message names
// the flag that would allow it. The operator's own --probe-allowed-cidrs,
// given after production's (the last one wins), probes it.
func TestProbeAllowedNoneRefusesEveryProbe(t *testing.T) {
	env := testenv.Get(t)
	addr := startWatcher(t, env)
	ns := env.Namespace(t, nil)
	l := probetest.Listen(t)
	var dials atomic.Int32
	createService(t, env, ns, "web", svcSpec{})
	createWorkload(t, env, ns, "vm", wlSpec{app: "web", ips: []string{"192.0.2.1"}, noCondition: true, probe: tcpProbe(l.Port(), 3)})
	lease := leaseName(t)
	a := startReplica(t, env, addr, "a", replicaOpts{lease: lease, dial: func(string) { dials.Add(1) },
		probeFlags: []string{"--probe-allowed-cidrs=none"}})
	waitCondition(t, env, ns, "vm", "False", "ProbeRefused",
		"TCP probe of 192.0.2.1 not probed", "(--probe-allowed-cidrs=none)", "with --probe-allowed-cidrs=CIDR")
	waitEndpoint(t, env, ns, "web", "vm", false)
	if got := a.leader(); got != 1 {
		t.Fatalf("ipledger_leader_is_leader = %v, want 1: the replica should run and lead with every probe refused", got)
	}
	testenv.Eventually(t, 30*time.Second, func() error {
		if n := a.metric(t, "ipledger_endpoints_probes_refused_total", map[string]string{"reason": "not-allowed"}); n < 2 {
			return fmt.Errorf("%v not-allowed refusals so far", n)
		}
		return nil
	})
	if n, c := dials.Load(), l.Count(); n != 0 || c != 0 {
		t.Fatalf("with --probe-allowed-cidrs=none the prober dialed %d times, the listener accepted %d", n, c)
	}

	a.stop()
	startReplica(t, env, addr, "b", replicaOpts{lease: lease,
		probeFlags: []string{"--probe-allowed-cidrs=none", "--probe-allowed-cidrs=192.0.2.0/24"}})
	waitCondition(t, env, ns, "vm", "True", "ProbeSucceeded", fmt.Sprintf("192.0.2.1:%d", l.Port()))
	l.WaitAccepted(t, 1)
}
