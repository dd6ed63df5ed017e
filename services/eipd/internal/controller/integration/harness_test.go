// Package integration tests eipd's controller against moto (EC2) and a real
// API server: allocation, reuse of orphans, no duplicate under faults, stale
// views. It is a separate package so that the pure tests of package
// controller run without starting moto or a control plane.
package integration

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"
	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"

	"github.com/ipledger/ipledger/lab/ec2test"
	"github.com/ipledger/ipledger/lab/faultproxy"
	"github.com/ipledger/ipledger/lab/testenv"
	"github.com/ipledger/ipledger/pkg/convert"
	"github.com/ipledger/ipledger/pkg/stream"
	watcherv1 "github.com/ipledger/ipledger/proto/ipledger/watcher/v1"
	"github.com/ipledger/ipledger/services/eipd/internal/awsec2"
	"github.com/ipledger/ipledger/services/eipd/internal/controller"
	"github.com/ipledger/ipledger/services/eipd/internal/decide"
)

// TestMain runs moto_server (killed with the test binary, by Pdeathsig, since
// testenv.Main exits the process) and a real API server.
func TestMain(m *testing.M) { ec2test.MainWithKubernetes(m) }

// mirror stands in for the watcher stream in these tests: an informer on
// the test's own Nodes (and Pods) converted with pkg/convert, exactly the
// objects the watcher would send, delivered to the NodeReconciler's handler. A test can
// pin what the view shows of an object (a stale view, as a watcher replica
// behind would serve): the informer then keeps the truth to itself.
type mirror struct {
	mu      sync.RWMutex
	objs    map[watcherv1.Kind]map[string]*watcherv1.Object
	pinned  map[watcherv1.Kind]map[string]*watcherv1.Object // nil value: the view lacks it
	handler stream.Handler                                  // the current Run's; swapped under mu
}

// setHandler makes h the view's subscriber and replays every object the
// view shows to it as an add.
func (s *mirror) setHandler(h stream.Handler) {
	s.mu.Lock()
	s.handler = h
	s.mu.Unlock()
	for _, kind := range []watcherv1.Kind{watcherv1.Kind_KIND_NODE, watcherv1.Kind_KIND_POD} {
		for _, o := range s.List(kind) {
			h.OnAdd(o)
		}
	}
}

// sub returns the current subscriber.
func (s *mirror) sub() stream.Handler {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.handler
}

func (s *mirror) Get(kind watcherv1.Kind, namespace, name string) (*watcherv1.Object, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	key := name
	if namespace != "" {
		key = namespace + "/" + name
	}
	o, ok := s.view(kind, key)
	return o, ok
}

// view is what the view shows under kind/key; call with mu held.
func (s *mirror) view(kind watcherv1.Kind, key string) (*watcherv1.Object, bool) {
	if o, ok := s.pinned[kind][key]; ok {
		return o, o != nil
	}
	o, ok := s.objs[kind][key]
	return o, ok
}

func (s *mirror) List(kind watcherv1.Kind) []*watcherv1.Object {
	s.mu.RLock()
	defer s.mu.RUnlock()
	var out []*watcherv1.Object
	for key := range s.objs[kind] {
		if o, ok := s.view(kind, key); ok {
			out = append(out, o)
		}
	}
	for key, o := range s.pinned[kind] {
		if _, real := s.objs[kind][key]; !real && o != nil {
			out = append(out, o)
		}
	}
	return out
}

// pin makes the view show o (nil: nothing) for o's kind and key from now on,
// and tells the handler as the stream would (unless quiet).
func (s *mirror) pin(kind watcherv1.Kind, key string, o *watcherv1.Object, quiet bool) {
	s.mu.Lock()
	old, had := s.view(kind, key)
	if s.pinned[kind] == nil {
		s.pinned[kind] = map[string]*watcherv1.Object{}
	}
	s.pinned[kind][key] = o
	s.mu.Unlock()
	switch {
	case quiet:
	case o == nil && had:
		s.sub().OnDelete(old)
	case o != nil && had:
		s.sub().OnUpdate(old, o)
	case o != nil:
		s.sub().OnAdd(o)
	}
}

// put stores o and returns the object it replaced, and whether the view
// is pinned (the handler must not hear of it).
func (s *mirror) put(o *watcherv1.Object) (old *watcherv1.Object, pinned bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.objs[o.GetKind()] == nil {
		s.objs[o.GetKind()] = map[string]*watcherv1.Object{}
	}
	old = s.objs[o.GetKind()][stream.Key(o)]
	s.objs[o.GetKind()][stream.Key(o)] = o
	_, pinned = s.pinned[o.GetKind()][stream.Key(o)]
	return old, pinned
}

func (s *mirror) remove(o *watcherv1.Object) (pinned bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.objs[o.GetKind()], stream.Key(o))
	_, pinned = s.pinned[o.GetKind()][stream.Key(o)]
	return pinned
}

func (s *mirror) handlers() cache.ResourceEventHandlerFuncs {
	conv := func(obj any) *watcherv1.Object {
		if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = d.Obj
		}
		o, err := convert.Object(obj.(runtime.Object))
		if err != nil {
			panic(err)
		}
		return o
	}
	return cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) {
			o := conv(obj)
			switch old, pinned := s.put(o); {
			case pinned:
			case old != nil:
				s.sub().OnUpdate(old, o)
			default:
				s.sub().OnAdd(o)
			}
		},
		UpdateFunc: func(_, obj any) {
			o := conv(obj)
			if old, pinned := s.put(o); !pinned {
				s.sub().OnUpdate(old, o)
			}
		},
		DeleteFunc: func(obj any) {
			o := conv(obj)
			if !s.remove(o) {
				s.sub().OnDelete(o)
			}
		},
	}
}

type harness struct {
	t        *testing.T
	env      *testenv.Env
	moto     *ec2test.Moto
	proxy    *faultproxy.Proxy
	cluster  string
	label    string // every Node of the test carries eipd-test=<label>
	reg      *prometheus.Registry
	ctrl     *controller.Controller
	run      *controller.NodeReconciler
	store    *mirror
	ns       string
	opts     options
	kube     kubernetes.Interface
	recorder record.EventRecorder
	log      *slog.Logger
	// stop ends the current run's workers (restart starts another).
	stop func()
	// nodeGets counts GETs of single Nodes the controller sent to the API
	// server; while failNodeGets is set they fail without reaching it.
	nodeGets     atomic.Int64
	failNodeGets atomic.Bool
	// adds counts the Nodes put on the queue with Add (not AddAfter).
	adds atomic.Int64
}

// addTap counts what the controller adds to its queue right away.
type addTap struct {
	controller.Queue
	h *harness
}

func (q *addTap) Add(item string) {
	q.h.adds.Add(1)
	q.Queue.Add(item)
}

type options struct {
	cfg         controller.Config
	maxAttempts int
	// publicIPv4Pool is awsec2.Config.PublicIPv4Pool.
	publicIPv4Pool string
}

func newHarness(t *testing.T, opts options) *harness {
	t.Helper()
	env := testenv.Get(t)
	moto := ec2test.Get(t)
	proxy, err := faultproxy.Start(moto.URL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { proxy.Close() })
	h := &harness{t: t, env: env, moto: moto, proxy: proxy, cluster: ec2test.ClusterID(t), reg: prometheus.NewRegistry()}
	h.label = strings.ToLower(strings.ReplaceAll(t.Name(), "/", "-"))
	if len(h.label) > 50 {
		h.label = h.label[:50]
	}
	h.label = strings.Trim(h.label, "-_.")
	if opts.maxAttempts == 0 {
		opts.maxAttempts = 4
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)

	broadcaster := record.NewBroadcaster(record.WithContext(ctx))
	broadcaster.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: env.Client.CoreV1().Events("")})
	t.Cleanup(broadcaster.Shutdown)
	h.recorder = broadcaster.NewRecorder(scheme.Scheme, corev1.EventSource{Component: "ipledger-eipd"})

	h.store = &mirror{objs: map[watcherv1.Kind]map[string]*watcherv1.Object{}, pinned: map[watcherv1.Kind]map[string]*watcherv1.Object{}}
	h.log = slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
	if opts.cfg.ClusterID == "" {
		opts.cfg.ClusterID = h.cluster
	}
	if opts.cfg.PendingPoll == 0 {
		opts.cfg.PendingPoll = 200 * time.Millisecond
	}
	if opts.cfg.ConsistencyTimeout == 0 {
		opts.cfg.ConsistencyTimeout = 30 * time.Second
	}
	h.opts = opts
	// The controller's own client counts (and can fail) its GETs of Nodes.
	kubeCfg := rest.CopyConfig(env.Config)
	kubeCfg.Wrap(func(rt http.RoundTripper) http.RoundTripper { return &nodeGetTap{rt: rt, h: h} })
	if h.kube, err = kubernetes.NewForConfig(kubeCfg); err != nil {
		t.Fatal(err)
	}
	h.startRun()

	h.ns = env.Namespace(t, nil)
	factory := informers.NewSharedInformerFactoryWithOptions(env.Client, 0, informers.WithTweakListOptions(func(o *metav1.ListOptions) {
		o.LabelSelector = "eipd-test=" + h.label
	}))
	factory.Core().V1().Nodes().Informer().AddEventHandler(h.store.handlers())
	podFactory := informers.NewSharedInformerFactoryWithOptions(env.Client, 0, informers.WithNamespace(h.ns))
	podFactory.Core().V1().Pods().Informer().AddEventHandler(h.store.handlers())
	factory.Start(ctx.Done())
	podFactory.Start(ctx.Done())
	factory.WaitForCacheSync(ctx.Done())
	podFactory.WaitForCacheSync(ctx.Done())
	t.Cleanup(func() { h.stop() })
	return h
}

// startRun starts what one eipd process runs: a controller with its own
// EC2 client and metrics, and a NodeReconciler whose workers sync the queue. The view
// replays what it holds to the new NodeReconciler's handler, as the watcher stream
// replays its store to a new subscriber.
func (h *harness) startRun() {
	t := h.t
	h.reg = prometheus.NewRegistry()
	ec2c, err := awsec2.New(context.Background(), h.cluster,
		awsec2.Config{MaxAttempts: h.opts.maxAttempts, MaxBackoff: 200 * time.Millisecond, CallTimeout: 20 * time.Second, PublicIPv4Pool: h.opts.publicIPv4Pool}, h.reg,
		func(o *ec2.Options) { o.BaseEndpoint = aws.String(h.proxy.URL()) })
	if err != nil {
		t.Fatal(err)
	}
	if h.ctrl, err = controller.New(h.opts.cfg, ec2c, nil, h.store, h.kube, h.log, h.reg); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	queue := workqueue.NewTypedRateLimitingQueue(workqueue.NewTypedItemExponentialFailureRateLimiter[string](50*time.Millisecond, 2*time.Second))
	run := h.ctrl.NewNodeReconciler(&addTap{Queue: queue, h: h}, h.recorder)
	h.run = run
	h.store.setHandler(run.Handler())

	var wg sync.WaitGroup
	for range h.opts.cfg.Workers + 1 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				node, quit := queue.Get()
				if quit {
					return
				}
				if err := run.Sync(ctx, node); err != nil {
					queue.AddRateLimited(node)
				} else {
					queue.Forget(node)
				}
				queue.Done(node)
			}
		}()
	}
	h.stop = func() { cancel(); queue.ShutDown(); wg.Wait() }
}

// restart stops the current run and starts a fresh one, as a new eipd
// process (or a new leader) would: empty expectations and status, a new
// queue fed by the replay of the view.
func (h *harness) restart() {
	h.stop()
	h.startRun()
}

// nodeGetTap counts GET /api/v1/nodes/<name> and fails them on demand, as
// an unreachable API server would.
type nodeGetTap struct {
	rt http.RoundTripper
	h  *harness
}

func (n *nodeGetTap) RoundTrip(req *http.Request) (*http.Response, error) {
	if rest, ok := strings.CutPrefix(req.URL.Path, "/api/v1/nodes/"); ok && req.Method == http.MethodGet && !strings.Contains(rest, "/") {
		n.h.nodeGets.Add(1)
		if n.h.failNodeGets.Load() {
			return nil, errors.New("injected: the API server cannot be reached")
		}
	}
	return n.rt.RoundTrip(req)
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

func (h *harness) ctx() context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	h.t.Cleanup(cancel)
	return ctx
}

// createNode creates a Node of this test backed by inst, an instance of the
// cluster (tagged for it here) whose private IP the Node reports as its
// InternalIP; autoAssign: the operator opted it in (controller.LabelOptIn).
func (h *harness) createNode(name string, inst ec2test.Instance, autoAssign bool) *corev1.Node {
	h.t.Helper()
	h.moto.TagForCluster(h.t, h.cluster, inst)
	labels := map[string]string{}
	if autoAssign {
		labels[controller.LabelOptIn] = "true"
	}
	return h.createNodeAs(name, inst.ProviderID(), inst.NodeAddresses(), labels)
}

// createNodeAs creates a Node of this test (as the admin) saying what it
// likes about itself: providerID, addresses and labels, whatever the EC2
// truth.
func (h *harness) createNodeAs(name, providerID string, addrs []corev1.NodeAddress, labels map[string]string) *corev1.Node {
	h.t.Helper()
	labels = maps.Clone(labels)
	if labels == nil {
		labels = map[string]string{}
	}
	return h.createNodeWith(&corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels},
		Spec:       corev1.NodeSpec{ProviderID: providerID},
		Status:     corev1.NodeStatus{Addresses: addrs},
	})
}

// createNodeWith creates n (as the admin) as a Node of this test.
func (h *harness) createNodeWith(n *corev1.Node) *corev1.Node {
	h.t.Helper()
	if n.Labels == nil {
		n.Labels = map[string]string{}
	}
	n.Labels["eipd-test"] = h.label
	created, err := h.env.Client.CoreV1().Nodes().Create(h.ctx(), n, metav1.CreateOptions{})
	if err != nil {
		h.t.Fatalf("create node: %v", err)
	}
	h.t.Cleanup(func() {
		_ = h.env.Client.CoreV1().Nodes().Delete(context.Background(), n.Name, metav1.DeleteOptions{})
	})
	return created
}

func (h *harness) nodeName(suffix string) string {
	return fmt.Sprintf("%s-%s", h.label, suffix)
}

// addressesFor returns moto's addresses tagged for node in this test's cluster.
func (h *harness) addressesFor(node string) []types.Address {
	var out []types.Address
	for _, a := range h.moto.Addresses(h.t, h.cluster) {
		if ec2test.Tag(a.Tags, decide.TagNode) == node {
			out = append(out, a)
		}
	}
	return out
}

// waitAssigned waits until the Node is labelled with an address that moto
// shows associated with inst and tagged for the Node, and returns it.
func (h *harness) waitAssigned(node string, inst ec2test.Instance, timeout time.Duration) types.Address {
	h.t.Helper()
	var got types.Address
	testenv.Eventually(h.t, timeout, func() error {
		n, err := h.env.Client.CoreV1().Nodes().Get(context.Background(), node, metav1.GetOptions{})
		if err != nil {
			return err
		}
		ip := n.Labels[controller.LabelExternalIP]
		if ip == "" {
			return fmt.Errorf("node %s has no %s label yet", node, controller.LabelExternalIP)
		}
		addrs := h.addressesFor(node)
		if len(addrs) != 1 {
			return fmt.Errorf("moto has %d addresses tagged for %s, want 1", len(addrs), node)
		}
		a := addrs[0]
		if aws.ToString(a.PublicIp) != ip || aws.ToString(a.AllocationId) != n.Annotations[controller.AnnotationAllocationID] {
			return fmt.Errorf("node says %s/%s, moto has %s/%s", ip, n.Annotations[controller.AnnotationAllocationID], aws.ToString(a.PublicIp), aws.ToString(a.AllocationId))
		}
		if aws.ToString(a.NetworkInterfaceId) != inst.NetworkInterfaceID || aws.ToString(a.PrivateIpAddress) != inst.PrivateIP {
			return fmt.Errorf("address %s associated with %q/%q, want %s/%s", ip, aws.ToString(a.NetworkInterfaceId), aws.ToString(a.PrivateIpAddress), inst.NetworkInterfaceID, inst.PrivateIP)
		}
		got = a
		return nil
	})
	return got
}

// events returns the reasons of the Events about node.
func (h *harness) events(node string) []string {
	list, err := h.env.Client.CoreV1().Events(metav1.NamespaceDefault).List(context.Background(), metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("involvedObject.name", node).String(),
	})
	if err != nil {
		h.t.Fatalf("list events: %v", err)
	}
	var reasons []string
	for _, e := range list.Items {
		reasons = append(reasons, e.Reason)
	}
	return reasons
}

func (h *harness) waitEvent(node, reason string) {
	h.t.Helper()
	testenv.Eventually(h.t, 20*time.Second, func() error {
		for _, r := range h.events(node) {
			if r == reason {
				return nil
			}
		}
		return fmt.Errorf("no %s event on node %s (have %v)", reason, node, h.events(node))
	})
}
