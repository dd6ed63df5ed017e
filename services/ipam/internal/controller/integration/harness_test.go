// Package integration tests ipam's controller against a real API server and
// a real watcher: the controller runs in-process (so it can be restarted many
// times quickly) behind pkg/leader, reading through pkg/stream.
package integration

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"os"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"

	"github.com/ipledger/ipledger/lab/testenv"
	"github.com/ipledger/ipledger/pkg/leader"
	"github.com/ipledger/ipledger/pkg/stream"
	watcherv1 "github.com/ipledger/ipledger/proto/ipledger/watcher/v1"
	"github.com/ipledger/ipledger/services/ipam/internal/announced"
	"github.com/ipledger/ipledger/services/ipam/internal/app"
	"github.com/ipledger/ipledger/services/ipam/internal/controller"
	"github.com/ipledger/ipledger/services/ipam/internal/history"
	"github.com/ipledger/ipledger/services/ipam/internal/ledger"
	"github.com/ipledger/ipledger/services/ipam/internal/objects"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// startWatcher runs a watcher for one test; it streams the ledger of the
// test's own ledger namespace.
func startWatcher(t *testing.T, ledgerNS string) (addr, tokenFile string, p *testenv.Process) {
	env := testenv.Get(t)
	addr = testenv.FreeAddr(t)
	p = testenv.StartProcess(t, "watcher", env.Binary(t, "watcher"), nil,
		"--kubeconfig", env.CP.KubeconfigPath, "--grpc-addr", addr, "--grpc-plaintext", "--namespace", ledgerNS, "--ops-addr", testenv.FreeAddr(t), "--log-format", "text",
		"--gateway-api-discovery-interval", "1s")
	return addr, env.TokenFile(t, testenv.SystemNamespace, "ipledger-ipam"), p
}

// ipam is one in-process ipam replica: a stream client, the controller and
// leader.Run.
type ipam struct {
	ctrl   *controller.Controller
	src    *stream.Client
	reg    *prometheus.Registry
	cancel context.CancelFunc
	done   chan struct{}
}

type harness struct {
	t        *testing.T
	env      *testenv.Env
	ns       string // the test's Services
	ledgerNS string
	class    string
	// requireClass starts ipam with --require-lb-class.
	requireClass bool
	// writeKubeVIP starts ipam with --write-kube-vip-annotation.
	writeKubeVIP bool
	// batchSize is ipam's --batch-size (0: the default).
	batchSize int
	// gatewayServiceNamespaces is ipam's --gateway-service-namespaces.
	gatewayServiceNamespaces []string
	// keepReleased is ipam's --keep-released-addresses (0: free at once,
	// as the tests written before kept addresses expect).
	keepReleased time.Duration
	// historyRetention is ipam's --history-max-age and
	// --history-max-per-address (zero: unbounded); historyNow the clock
	// it is applied by (nil: time.Now).
	historyRetention history.Retention
	historyNow       func() time.Time
	lease            string
	addr, tok        string
	watcher          *testenv.Process
}

func newHarness(t *testing.T) *harness {
	env := testenv.Get(t)
	h := &harness{t: t, env: env, ns: env.Namespace(t, nil), ledgerNS: env.Namespace(t, map[string]string{"purpose": "ledger"})}
	b := make([]byte, 4)
	rand.Read(b)
	h.class = "test.ipledger.io/" + hex.EncodeToString(b)
	h.lease = "ipam-" + hex.EncodeToString(b)
	// The test API server has no namespace controller: Services a test
	// leaves behind would keep their addresses in their status, and every
	// later ipam (of another class) must leave those alone. Delete them
	// (registered first, so this runs after the test's ipam stopped).
	t.Cleanup(h.deleteServices)
	h.addr, h.tok, h.watcher = startWatcher(t, h.ledgerNS)
	return h
}

func (h *harness) deleteServices() {
	ctx := context.Background()
	list, err := h.env.Client.CoreV1().Services(h.ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		h.t.Errorf("cleanup: list the test's Services: %v", err)
		return
	}
	for _, s := range list.Items {
		if err := h.env.Client.CoreV1().Services(h.ns).Delete(ctx, s.Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			h.t.Errorf("cleanup: delete Service %s/%s: %v", h.ns, s.Name, err)
		}
	}
}

// start runs an ipam replica until stop (or the test's end).
func (h *harness) start(identity string) *ipam { return h.startWith(identity, h.env.Client) }

// startWith runs an ipam replica whose elector and controller talk to the
// API server through client.
func (h *harness) startWith(identity string, client kubernetes.Interface) *ipam {
	t := h.t
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})).With("replica", identity)
	reg := prometheus.NewRegistry()
	src, err := stream.New(stream.Config{
		Target: h.addr, Plaintext: true, TokenFile: h.tok,
		Kinds: []watcherv1.Kind{watcherv1.Kind_KIND_SERVICE, watcherv1.Kind_KIND_NAMESPACE, watcherv1.Kind_KIND_IP_POOL, watcherv1.Kind_KIND_LEDGER_CONFIG_MAP,
			watcherv1.Kind_KIND_GATEWAY, watcherv1.Kind_KIND_GATEWAY_CLASS},
		OptionalKinds: announced.Kinds,
	}, log, reg)
	if err != nil {
		t.Fatal(err)
	}
	ctrl, err := controller.New(controller.Config{Namespace: h.ledgerNS, LBClass: h.class, RequireLBClass: h.requireClass, BatchSize: h.batchSize,
		WriteKubeVIPAnnotation:   h.writeKubeVIP,
		GatewayServiceNamespaces: h.gatewayServiceNamespaces, KeepReleased: h.keepReleased,
		History: h.historyRetention, HistoryNow: h.historyNow}, client, h.env.Dynamic, src, log, reg)
	if err != nil {
		t.Fatal(err)
	}
	// As ipam's app runs it: the announcement tracker beside each term.
	tracker, err := announced.New(src, objects.Class{Name: h.class, Required: h.requireClass}, &objects.PoolSet{KeepReleased: h.keepReleased}, log, reg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &ipam{ctrl: ctrl, src: src, reg: reg, cancel: cancel, done: make(chan struct{})}
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); _ = src.Run(ctx) }()
	go func() {
		defer wg.Done()
		err := leader.Run(ctx, client, leader.Config{
			LeaseName: h.lease, LeaseNamespace: h.ledgerNS, Identity: identity,
			LeaseDuration: 4 * time.Second, RenewDeadline: 3 * time.Second, RetryPeriod: 500 * time.Millisecond, StopTimeout: 20 * time.Second,
			Events: h.env.Client.CoreV1(), EventComponent: app.Component,
		}, app.WithTracker(ctrl.NewWorker, tracker), log, reg)
		if err != nil && ctx.Err() == nil {
			t.Errorf("leader.Run: %v", err)
		}
	}()
	go func() { wg.Wait(); close(r.done) }()
	t.Cleanup(r.stop)
	return r
}

func (r *ipam) stop() {
	r.cancel()
	<-r.done
}

func (h *harness) pool(name string, addrs ...string) {
	h.t.Helper()
	h.poolSpec(name, map[string]any{"addresses": toAny(addrs)})
}

// poolSpec creates the IPPool name with spec, deleted at the test's end.
func (h *harness) poolSpec(name string, spec map[string]any) {
	h.t.Helper()
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "ipledger.io/v1alpha1", "kind": "IPPool",
		"metadata": map[string]any{"name": name},
		"spec":     spec,
	}}
	if _, err := h.env.Dynamic.Resource(controller.PoolGVR).Create(context.Background(), u, metav1.CreateOptions{}); err != nil {
		h.t.Fatal(err)
	}
	h.t.Cleanup(func() {
		pools := h.env.Dynamic.Resource(controller.PoolGVR)
		_ = pools.Delete(context.Background(), name, metav1.DeleteOptions{})
		// ipam, stopped by now, removes its pool-protection finalizer only
		// when no Service holds an address of the pool: drop it, or the
		// pool would stay Terminating and the next run (-count) could not
		// create it again.
		_, _ = pools.Patch(context.Background(), name, types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{})
	})
}

func toAny(ss []string) []any {
	out := make([]any, len(ss))
	for i, s := range ss {
		out[i] = s
	}
	return out
}

func (h *harness) service(name string, annotations map[string]string, mutate ...func(*corev1.Service)) *corev1.Service {
	h.t.Helper()
	return h.serviceIn(h.ns, name, annotations, mutate...)
}

// serviceIn creates a LoadBalancer Service of the harness's class in
// namespace (port 80, then mutate); one outside the test's namespace is
// deleted at the end of the test (deleteServices covers the test's own).
func (h *harness) serviceIn(namespace, name string, annotations map[string]string, mutate ...func(*corev1.Service)) *corev1.Service {
	h.t.Helper()
	class := h.class
	s := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace, Annotations: annotations},
		Spec: corev1.ServiceSpec{
			Type: corev1.ServiceTypeLoadBalancer, LoadBalancerClass: &class,
			Ports: []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromInt32(8080), Protocol: corev1.ProtocolTCP}},
		},
	}
	for _, m := range mutate {
		m(s)
	}
	out, err := h.env.Client.CoreV1().Services(namespace).Create(context.Background(), s, metav1.CreateOptions{})
	if err != nil {
		h.t.Fatal(err)
	}
	if namespace != h.ns {
		h.t.Cleanup(func() {
			_ = h.env.Client.CoreV1().Services(namespace).Delete(context.Background(), name, metav1.DeleteOptions{})
		})
	}
	return out
}

func (h *harness) setStatus(name string, ips ...string) {
	h.t.Helper()
	h.setStatusIn(h.ns, name, ips...)
}

// state is what the Services of the test show: name -> IPs, and name ->
// condition reason.
type state struct {
	ips    map[string][]string
	reason map[string]string
	msg    map[string]string
}

func (h *harness) state() state {
	list, err := h.env.Client.CoreV1().Services(h.ns).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		h.t.Fatal(err)
	}
	st := state{ips: map[string][]string{}, reason: map[string]string{}, msg: map[string]string{}}
	for _, s := range list.Items {
		for _, in := range s.Status.LoadBalancer.Ingress {
			st.ips[s.Name] = append(st.ips[s.Name], in.IP)
		}
		for _, c := range s.Status.Conditions {
			if c.Type == "ipledger.io/AddressAllocated" {
				st.reason[s.Name], st.msg[s.Name] = c.Reason, c.Message
			}
		}
	}
	return st
}

// duplicates returns IPs shown by more than one Service.
func (st state) duplicates() []string {
	by := map[string][]string{}
	for name, ips := range st.ips {
		for _, ip := range ips {
			by[ip] = append(by[ip], name)
		}
	}
	var out []string
	for ip, names := range by {
		if len(names) > 1 {
			sort.Strings(names)
			out = append(out, ip+" on "+strings.Join(names, ","))
		}
	}
	sort.Strings(out)
	return out
}

// watchDuplicates polls the Services until the test ends and fails it if an
// IP is ever shown by two of them.
func (h *harness) watchDuplicates() {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			list, err := h.env.Client.CoreV1().Services(h.ns).List(ctx, metav1.ListOptions{})
			if err == nil {
				st := state{ips: map[string][]string{}}
				for _, s := range list.Items {
					for _, in := range s.Status.LoadBalancer.Ingress {
						st.ips[s.Name] = append(st.ips[s.Name], in.IP)
					}
				}
				if d := st.duplicates(); len(d) > 0 {
					h.t.Errorf("an IP is on two Services: %v", d)
					return
				}
			}
			select {
			case <-ctx.Done():
			case <-time.After(30 * time.Millisecond):
			}
		}
	}()
	h.t.Cleanup(func() { cancel(); <-done })
}

func (h *harness) expect(timeout time.Duration, want map[string]string) {
	h.t.Helper()
	testenv.Eventually(h.t, timeout, func() error {
		st := h.state()
		for name, w := range want {
			got := strings.Join(st.ips[name], ",")
			if got == "" {
				got = st.reason[name]
			}
			if got != w {
				return fmt.Errorf("%s shows %q, want %q (all: ips %v reasons %v)", name, got, w, st.ips, st.reason)
			}
		}
		return nil
	})
}

func (h *harness) ledgerTerm() string {
	if cm := h.ledgerHead(); cm != nil {
		return cm.Data["term"]
	}
	return ""
}

// ledgerHead returns the ledger's head ConfigMap, nil when there is none.
func (h *harness) ledgerHead() *corev1.ConfigMap {
	h.t.Helper()
	cm, err := h.env.Client.CoreV1().ConfigMaps(h.ledgerNS).Get(context.Background(), ledger.HeadName, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		h.t.Fatal(err)
	}
	return cm
}

func poolGVR() schema.GroupVersionResource { return controller.PoolGVR }

func unstructuredSlice(obj map[string]any, fields ...string) ([]any, bool, error) {
	return unstructured.NestedSlice(obj, fields...)
}
