// Package prober runs the readiness probes of ExternalWorkloads for one
// leadership term of ipledger-endpoints and writes their Ready condition.
// A Prober is built at the start of a term with the term's context, hears
// of workloads from the term's stream handler (Update, Delete), probes each
// workload that has spec.readinessProbe once per period (whatever number of
// Services select it), never more than Config.Concurrency probes at once —
// shared fairly among namespaces (package probeslots), so that one tenant's
// unanswered workloads cannot delay another's probes — and stops every probe when the term ends (Stop). What the condition should
// say is decided by package readiness; this package dials, times and writes.
package prober

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"hash/fnv"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/protobuf/proto"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/tools/record"

	"github.com/ipledger/ipledger/pkg/backoff"
	"github.com/ipledger/ipledger/pkg/convert"
	"github.com/ipledger/ipledger/pkg/parallel"
	"github.com/ipledger/ipledger/pkg/stream/objkey"
	watcherv1 "github.com/ipledger/ipledger/proto/ipledger/watcher/v1"
	"github.com/ipledger/ipledger/services/endpoints/internal/probepolicy"
	"github.com/ipledger/ipledger/services/endpoints/internal/probeslots"
	"github.com/ipledger/ipledger/services/endpoints/internal/readiness"
)

// DefaultConcurrency is the default bound on probes in flight: 1,000
// workloads probed every 10s whose every probe times out after 1s need 100.
const DefaultConcurrency = 100

// UserAgent is sent with every HTTP probe.
const UserAgent = "ipledger-probe/1.0"

// maxBodyBytes of an HTTP probe's answer are read (and discarded), as the
// kubelet reads at most 10 KiB.
const maxBodyBytes = 10 << 10

// Config tunes the probes.
type Config struct {
	// Concurrency bounds the probes in flight at once over all workloads;
	// a probe due while all slots are taken waits for one. The slots are
	// shared among the namespaces with probed workloads (probeslots): each
	// may hold Concurrency/N of them, and more only while a free slot is
	// left for every other namespace below its share.
	Concurrency int
	// Dial opens the connection of every probe (TCP and HTTP); nil dials
	// the address directly. Tests set it to send probes of TEST-NET
	// addresses to loopback listeners: an EndpointSlice cannot hold a
	// loopback address, so a workload cannot have one.
	Dial func(ctx context.Context, network, address string) (net.Conn, error)
	// Policy says which addresses may be probed (--probe-allowed-cidrs,
	// --probe-denied-cidrs, --pod-cidrs, --service-cidrs). It is consulted
	// before every dial, with the workload's address, before Dial.
	Policy probepolicy.Policy
}

// Defaults fills the fields left unset (Dial stays nil).
func (c *Config) Defaults() {
	if c.Concurrency == 0 {
		c.Concurrency = DefaultConcurrency
	}
}

// Flags registers the prober's flags with the current values (after
// Defaults) as their defaults.
func (c *Config) Flags(fs *flag.FlagSet) {
	c.Defaults()
	fs.IntVar(&c.Concurrency, "probe-concurrency", c.Concurrency,
		"readiness probes of ExternalWorkloads in flight at once on the leader; a probe due while all are taken waits. "+
			"Shared among namespaces: with N namespaces probed each may hold probe-concurrency/N (at least 1), and more only "+
			"while a free slot is left for each other namespace below its share")
	prefixes := func(dst *[]netip.Prefix) func(string) error {
		return func(s string) error {
			ps, err := probepolicy.ParsePrefixes(s)
			*dst = ps
			return err
		}
	}
	fs.Func("probe-allowed-cidrs", "comma-separated `CIDRs` of the networks where ExternalWorkloads live: the readiness prober "+
		"dials only addresses in them (empty, the default: any address not refused otherwise; \"none\": no address, every "+
		"probe refused, as overlays/production ships until the operator names them; the last occurrence wins). An entry "+
		"inside --pod-cidrs, --service-cidrs or --probe-denied-cidrs admits that narrower range. Loopback, link-local, "+
		"multicast and cloud metadata addresses (169.254.169.254, fd00:ec2::/64, ...) are never probed",
		func(s string) error {
			var err error
			c.Policy.Allowed, c.Policy.NoneAllowed, err = probepolicy.ParseAllowed(s)
			return err
		})
	fs.Func("pod-cidrs", "comma-separated `CIDRs` of the cluster's Pod network (kube-controller-manager's --cluster-cidr): "+
		"never probed (default none: set it, ipledger cannot always discover it)", prefixes(&c.Policy.PodCIDRs))
	fs.Func("service-cidrs", "comma-separated `CIDRs` of the cluster's Service network (kube-apiserver's "+
		"--service-cluster-ip-range): never probed (default none: set it)", prefixes(&c.Policy.ServiceCIDRs))
	fs.Func("probe-denied-cidrs", "comma-separated `CIDRs` the readiness prober never dials, beside the Pod and Service "+
		"networks: the nodes' network, the control plane, anything else (default none)", prefixes(&c.Policy.Denied))
}

// Validate reports a Config that cannot work.
func (c *Config) Validate() error {
	if c.Concurrency < 1 {
		return fmt.Errorf("--probe-concurrency=%d: must be at least 1", c.Concurrency)
	}
	return nil
}

// StatusWriter sends a JSON merge patch to an ExternalWorkload's status
// subresource and returns the resourceVersion it produced.
type StatusWriter interface {
	PatchStatus(ctx context.Context, namespace, name string, patch []byte) (resourceVersion string, err error)
}

// DynamicWriter is a StatusWriter over the dynamic client.
type DynamicWriter struct {
	Client dynamic.Interface
}

// PatchStatus patches the status subresource.
func (w DynamicWriter) PatchStatus(ctx context.Context, namespace, name string, patch []byte) (string, error) {
	u, err := w.Client.Resource(convert.ExternalWorkloadResource).Namespace(namespace).Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{}, "status")
	if err != nil {
		return "", err
	}
	return u.GetResourceVersion(), nil
}

// Prober is one term's probes. Its zero value is not usable; a nil *Prober
// probes nothing (controller tests that do not exercise probes use one).
type Prober struct {
	cfg    Config
	writer StatusWriter
	events record.EventRecorder
	m      *Metrics
	log    *slog.Logger
	now    func() time.Time
	// unit is one second of the probe spec; tests shorten it.
	unit time.Duration
	// running counts the target goroutines alive (tests check Stop).
	running atomic.Int32

	ctx    context.Context
	cancel context.CancelFunc
	slots  *parallel.Shared[string]
	table  *probeslots.Table // the slots' policy, under slots' lock
	http   *http.Client
	dial   func(ctx context.Context, network, address string) (net.Conn, error)
	wg     sync.WaitGroup
	// refuse is what the term refuses beyond the policy (WithRefusal).
	refuse func(namespace string, a netip.Addr) probepolicy.Refusal

	mu      sync.Mutex
	stopped bool
	targets map[string]*target // by "namespace/name"
	probed  int                // targets with a probe (the rest clear a condition)
	// perNamespace counts the targets with a probe by namespace: the
	// shares of the slots.
	perNamespace map[string]int
}

// New returns the prober of a term: every probe and every write uses ctx
// (the term's context), so none outlives the term.
func New(ctx context.Context, cfg Config, w StatusWriter, m *Metrics, log *slog.Logger) *Prober {
	if cfg.Concurrency < 1 {
		cfg.Concurrency = DefaultConcurrency
	}
	ctx, cancel := context.WithCancel(ctx)
	p := &Prober{
		cfg: cfg, writer: w, m: m, log: log, now: time.Now, unit: time.Second,
		ctx: ctx, cancel: cancel,
		table:        probeslots.New(cfg.Concurrency),
		targets:      map[string]*target{},
		perNamespace: map[string]int{},
		dial:         cfg.Dial,
	}
	p.slots = parallel.NewShared[string](p.table)
	if p.dial == nil {
		p.dial = (&net.Dialer{}).DialContext
	}
	p.refuse = func(string, netip.Addr) probepolicy.Refusal { return probepolicy.Refusal{} }
	p.dial = guard(func(a netip.Addr) probepolicy.Refusal { return p.check("", a) }, p.dial)
	p.events = &record.FakeRecorder{}
	m.Workloads.Set(0) // a leader exports it, even with nothing to probe
	p.http = &http.Client{
		Transport: &http.Transport{
			DialContext: func(ctx context.Context, network, address string) (net.Conn, error) {
				return p.dial(ctx, network, address)
			},
			// A probe is one request: no pool of idle connections to
			// thousands of workloads, and no proxy from the environment.
			DisableKeepAlives:      true,
			Proxy:                  nil,
			MaxResponseHeaderBytes: 16 << 10,
			// As the kubelet: a probe checks that the workload serves,
			// not who it is.
			TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, //nolint:gosec // see above
		},
		// As the kubelet's, a redirect is an answer (3xx is success),
		// and following it could lead the probe anywhere (were it ever
		// followed, its dial would still go through the policy's guard).
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	return p
}

// WithEvents has the prober report refused workloads as Events on them
// (the term's recorder); without it they are only logged and counted.
func (p *Prober) WithEvents(r record.EventRecorder) *Prober {
	if p != nil && r != nil {
		p.events = r
	}
	return p
}

// WithRefusal has the prober refuse, before the probe policy, every address
// refuse refuses for a workload of namespace (the cluster's own networks;
// addresses not granted to the namespace), asked at each probe. The guard in
// front of every dial asks with namespace "".
func (p *Prober) WithRefusal(refuse func(namespace string, a netip.Addr) probepolicy.Refusal) *Prober {
	if p != nil && refuse != nil {
		p.refuse = refuse
	}
	return p
}

// check decides whether a may be probed for a workload of namespace.
func (p *Prober) check(namespace string, a netip.Addr) probepolicy.Refusal {
	if r := p.refuse(namespace, a); r.Refused() {
		return r
	}
	return p.cfg.Policy.Check(a)
}

// guard refuses, before dialing, an address check refuses: probeOne
// checks the workload's addresses first and never gets here with a refused
// one; the guard keeps any other dial (an HTTP redirect, should the client
// ever follow one) from reaching what the policy forbids.
func guard(check func(netip.Addr) probepolicy.Refusal, dial func(ctx context.Context, network, address string) (net.Conn, error)) func(ctx context.Context, network, address string) (net.Conn, error) {
	return func(ctx context.Context, network, address string) (net.Conn, error) {
		host, _, err := net.SplitHostPort(address)
		if err != nil {
			return nil, err
		}
		a, err := netip.ParseAddr(host)
		if err != nil {
			return nil, fmt.Errorf("%s is not an address: not probed", host)
		}
		if r := check(a); r.Refused() {
			return nil, fmt.Errorf("not probed: %s", r.Message)
		}
		return dial(ctx, network, address)
	}
}

// target is one workload the prober looks after: one goroutine that either
// probes it every period or, for a workload whose probe was removed, clears
// the condition the probe wrote.
type target struct {
	key    string
	ns     string
	spec   *watcherv1.ExternalWorkload // the probe, addresses
	uid    string
	cancel context.CancelFunc
	done   chan struct{}
	wake   chan struct{}

	// reported: the refusal of this target's addresses was logged and
	// posted as an Event (once per target, not per period).
	reported bool

	mu  sync.Mutex
	obj *watcherv1.Object // the newest view: the stream's, or our own write's
}

func (t *target) view() *watcherv1.Object {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.obj
}

func (t *target) show(o *watcherv1.Object) {
	t.mu.Lock()
	t.obj = o
	t.mu.Unlock()
	select {
	case t.wake <- struct{}{}:
	default:
	}
}

// wrote makes our accepted write the view, unless the stream has shown a
// newer object meanwhile.
func (t *target) wrote(from *watcherv1.Object, conds []metav1.Condition, rv string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.obj != from {
		return
	}
	o := proto.Clone(from).(*watcherv1.Object)
	o.Meta.ResourceVersion = rv
	o.GetExternalWorkload().Conditions = convert.Conditions(conds)
	t.obj = o
}

func (t *target) running() bool {
	select {
	case <-t.done:
		return false
	default:
		return true
	}
}

// sameSpec says whether o needs no restart of t: same object (uid), same
// probe, same addresses.
func (t *target) sameSpec(o *watcherv1.Object) bool {
	ew := o.GetExternalWorkload()
	return t.uid == o.GetMeta().GetUid() && proto.Equal(t.spec.GetReadinessProbe(), ew.GetReadinessProbe()) &&
		slices.Equal(t.spec.GetWorkloadIps(), ew.GetWorkloadIps())
}

// Update tells the prober of a workload's new state (the stream's add or
// update). It returns at once; probes and writes happen on the prober's
// goroutines.
func (p *Prober) Update(o *watcherv1.Object) {
	if p == nil || o.GetExternalWorkload() == nil {
		return
	}
	ew := o.GetExternalWorkload()
	k := objkey.Of(o)
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.stopped {
		return
	}
	t := p.targets[k]
	if t != nil && t.sameSpec(o) && (t.running() || ew.GetReadinessProbe() != nil) {
		t.show(o)
		return
	}
	if t != nil {
		p.remove(t)
	}
	if ew.GetReadinessProbe() == nil &&
		readiness.Decide(false, readiness.State{}, readiness.ReadyCondition(ew), "").Action == readiness.None {
		return
	}
	ctx, cancel := context.WithCancel(p.ctx)
	t = &target{key: k, ns: o.GetMeta().GetNamespace(), spec: ew, uid: o.GetMeta().GetUid(), cancel: cancel, obj: o,
		done: make(chan struct{}), wake: make(chan struct{}, 1)}
	p.targets[k] = t
	if ew.GetReadinessProbe() != nil {
		p.probed++
		p.m.Workloads.Set(float64(p.probed))
		p.perNamespace[t.ns]++
		p.setWorkloads(t.ns, p.perNamespace[t.ns])
	}
	p.wg.Add(1)
	p.running.Add(1)
	go func() {
		defer p.wg.Done()
		defer p.running.Add(-1)
		defer close(t.done)
		if ew.GetReadinessProbe() != nil {
			p.probeLoop(ctx, t)
		} else {
			p.clearLoop(ctx, t)
		}
	}()
}

// Delete ends the probes of a deleted workload.
func (p *Prober) Delete(o *watcherv1.Object) {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if t := p.targets[objkey.Of(o)]; t != nil {
		p.remove(t)
	}
}

// remove ends a target's goroutine and forgets it; p.mu is held.
func (p *Prober) remove(t *target) {
	t.cancel()
	delete(p.targets, t.key)
	if t.spec.GetReadinessProbe() != nil {
		p.probed--
		p.m.Workloads.Set(float64(p.probed))
		p.perNamespace[t.ns]--
		p.setWorkloads(t.ns, p.perNamespace[t.ns])
		if p.perNamespace[t.ns] == 0 {
			delete(p.perNamespace, t.ns)
		}
	}
}

// Stop ends every probe and waits for them: when it returns, nothing probes
// or writes any more. Updates after Stop are ignored.
func (p *Prober) Stop() {
	if p == nil {
		return
	}
	p.mu.Lock()
	p.stopped = true
	p.cancel()
	p.targets, p.probed = map[string]*target{}, 0
	for ns := range p.perNamespace {
		p.setWorkloads(ns, 0)
	}
	p.perNamespace = map[string]int{}
	p.mu.Unlock()
	p.wg.Wait()
	p.m.Workloads.Forget()
}

func (p *Prober) seconds(n int32) time.Duration { return time.Duration(n) * p.unit }

// offset spreads the first probes of a term over the period, the same for
// a workload in every term (a hash of its uid).
func offset(uid string, period time.Duration) time.Duration {
	if period <= 0 {
		return 0
	}
	h := fnv.New64a()
	_, _ = h.Write([]byte(uid))
	return time.Duration(h.Sum64() % uint64(period))
}

func (p *Prober) probeLoop(ctx context.Context, t *target) {
	probe := t.spec.GetReadinessProbe()
	period := p.seconds(max(probe.GetPeriodSeconds(), 1))
	created := time.Unix(0, t.view().GetMeta().GetCreationTimestamp())
	first := readiness.FirstProbe(created, p.now(), p.seconds(probe.GetInitialDelaySeconds()), offset(t.uid, period))
	if !wait(ctx, first.Sub(p.now())) {
		return
	}
	ticker := time.NewTicker(period)
	defer ticker.Stop()
	th := readiness.ThresholdsOf(probe)
	var st readiness.State
	for {
		rs := p.probeAddresses(ctx, t.ns, probe, t.spec.GetWorkloadIps())
		if ctx.Err() != nil {
			return
		}
		if refused, why := readiness.Refused(rs); refused {
			// No address of it is probed: one that may not be probed can
			// never pass, so the workload cannot be Ready.
			p.refused(ctx, t, why)
			select {
			case <-ctx.Done():
				return
			case <-ticker.C:
			}
			continue
		}
		ok, detail := readiness.Combine(rs)
		prev := st.Status
		st = st.Next(ok, th)
		if st.Status != prev {
			p.log.Debug("Probe reached a threshold", "workload", t.key, "status", st.Status.String(), "detail", detail)
		}
		obj := t.view()
		if d := readiness.Decide(true, st, readiness.ReadyCondition(obj.GetExternalWorkload()), detail); d.Action != readiness.None {
			_ = p.write(ctx, t, obj, d)
		}
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		}
	}
}

// refused writes Ready=False (ProbeRefused) for a workload whose addresses
// the prober may not reach, and reports it once per target: a Warning
// Event on the workload and a log line, naming what to change.
func (p *Prober) refused(ctx context.Context, t *target, why string) {
	obj := t.view()
	if !t.reported {
		t.reported = true
		meta := obj.GetMeta()
		ref := &corev1.ObjectReference{APIVersion: convert.ExternalWorkloadResource.GroupVersion().String(), Kind: "ExternalWorkload",
			Namespace: meta.GetNamespace(), Name: meta.GetName(), UID: types.UID(meta.GetUid()), ResourceVersion: meta.GetResourceVersion()}
		p.events.Eventf(ref, corev1.EventTypeWarning, readiness.ReasonProbeRefused, "Readiness probe not sent, the workload is not Ready: %s", why)
		p.log.Warn("Readiness probe refused: the workload's address may not be probed", "workload", t.key, "reason", why)
	}
	if d := readiness.DecideRefused(readiness.ReadyCondition(obj.GetExternalWorkload()), why); d.Action != readiness.None {
		_ = p.write(ctx, t, obj, d)
	}
}

// clearLoop removes the Ready condition a removed probe left behind,
// retrying after a conflict (once a newer view arrives) or an error.
func (p *Prober) clearLoop(ctx context.Context, t *target) {
	retry := backoff.Policy{First: p.unit, Max: 30 * p.unit}.Start()
	delay := retry.Next()
	for {
		obj := t.view()
		d := readiness.Decide(false, readiness.State{}, readiness.ReadyCondition(obj.GetExternalWorkload()), "")
		if d.Action == readiness.None {
			return
		}
		if p.write(ctx, t, obj, d) == nil {
			continue
		}
		select {
		case <-ctx.Done():
			return
		case <-t.wake:
		case <-time.After(delay):
			delay = retry.Next()
		}
	}
}

func wait(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	tm := time.NewTimer(d)
	defer tm.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-tm.C:
		return true
	}
}

// write sends the decision as a merge patch of the whole conditions list,
// conditional on the resourceVersion of the view it was decided on: if the
// workload changed since, the API server refuses (Conflict) and the next
// period decides again on the newer view.
func (p *Prober) write(ctx context.Context, t *target, obj *watcherv1.Object, d readiness.Decision) error {
	meta := obj.GetMeta()
	conds := readiness.Conditions(obj.GetExternalWorkload().GetConditions(), d, meta.GetGeneration(), p.now())
	patch, err := json.Marshal(map[string]any{
		"metadata": map[string]any{"resourceVersion": meta.GetResourceVersion()},
		"status":   map[string]any{"conditions": conds},
	})
	if err != nil {
		return err
	}
	rv, err := p.writer.PatchStatus(ctx, meta.GetNamespace(), meta.GetName(), patch)
	switch {
	case err == nil:
		p.m.ConditionWrites.WithLabelValues(resultSuccess).Inc()
		t.wrote(obj, conds, rv)
		if d.Action == readiness.Clear {
			p.log.Info("Readiness probe removed: removed the Ready condition it had written", "workload", t.key)
		} else {
			p.log.Info("Workload readiness changed", "workload", t.key, "ready", string(d.Status), "message", d.Message)
		}
		return nil
	case apierrors.IsConflict(err), apierrors.IsNotFound(err):
		p.m.ConditionWrites.WithLabelValues(resultConflict).Inc()
		p.log.Debug("Ready condition not written: the workload changed since", "workload", t.key, "err", err)
	case ctx.Err() != nil:
		// The term ended.
	default:
		p.m.ConditionWrites.WithLabelValues(resultError).Inc()
		p.log.Warn("Writing the Ready condition failed", "workload", t.key, "err", err)
	}
	return err
}

// probeAddresses probes every address of a workload at once, unless the
// policy refuses one of them: then it returns the refusals and dials
// nothing, not even the other address (the workload cannot be Ready).
func (p *Prober) probeAddresses(ctx context.Context, ns string, probe *watcherv1.ReadinessProbe, ips []string) []readiness.Result {
	var refused []readiness.Result
	for _, ip := range ips {
		if r, ok := p.refusal(probe, ns, ip); ok {
			refused = append(refused, r)
		}
	}
	if len(refused) > 0 {
		return refused
	}
	rs := make([]readiness.Result, len(ips))
	if len(ips) == 1 {
		rs[0] = p.probeOne(ctx, ns, probe, ips[0])
		return rs
	}
	// All at once: the slots bound them (probeOne).
	parallel.Each(len(ips), len(ips), func(i int) { rs[i] = p.probeOne(ctx, ns, probe, ips[i]) })
	return rs
}

// refusal checks one address against the policy, with the workload's own
// address (before any Dial a test or a proxy might put in front), and
// counts a refusal by reason.
func (p *Prober) refusal(probe *watcherv1.ReadinessProbe, namespace, ip string) (readiness.Result, bool) {
	var refusal probepolicy.Refusal
	if addr, err := netip.ParseAddr(ip); err != nil {
		refusal = probepolicy.Refusal{Reason: probepolicy.ReasonUnspecified, Message: fmt.Sprintf("%q is not an IP address", ip)}
	} else {
		refusal = p.check(namespace, addr)
	}
	if !refusal.Refused() {
		return readiness.Result{}, false
	}
	kind := "TCP"
	if _, ok := probe.GetAction().(*watcherv1.ReadinessProbe_HttpGet); ok {
		kind = "HTTP"
	}
	p.m.Refused.WithLabelValues(refusal.Reason).Inc()
	return readiness.Result{Refused: true, Detail: fmt.Sprintf("%s probe of %s not probed: %s", kind, ip, refusal.Message)}, true
}

// setWorkloads says how many probed workloads ns has: the shares of the
// slots follow.
func (p *Prober) setWorkloads(ns string, n int) {
	p.slots.Update(func() { p.table.SetWorkloads(ns, n) })
}

// probeOne probes one address of a workload of namespace ns once the slots
// grant ns one.
func (p *Prober) probeOne(ctx context.Context, ns string, probe *watcherv1.ReadinessProbe, ip string) readiness.Result {
	queued := time.Now()
	if !p.slots.Acquire(ctx, ns) {
		return readiness.Result{Detail: "term ended"}
	}
	defer p.slots.Release(ns)
	start := time.Now()
	p.m.SlotWait.Observe(start.Sub(queued).Seconds())
	timeout := p.seconds(max(probe.GetTimeoutSeconds(), 1))
	pctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var r readiness.Result
	switch a := probe.GetAction().(type) {
	case nil:
		r = readiness.Result{Detail: "the readiness probe has no tcpSocket or httpGet"}
	case *watcherv1.ReadinessProbe_TcpSocket:
		r = p.probeTCP(pctx, net.JoinHostPort(ip, strconv.Itoa(int(a.TcpSocket.GetPort()))), timeout)
	case *watcherv1.ReadinessProbe_HttpGet:
		r = p.probeHTTP(pctx, ip, a.HttpGet, timeout)
	}
	if ctx.Err() != nil {
		return r // the term ended: not a result of the workload's
	}
	p.m.ProbeDuration.Observe(time.Since(start).Seconds())
	if r.OK {
		p.m.Probes.WithLabelValues(resultSuccess).Inc()
	} else {
		p.m.Probes.WithLabelValues(resultFailure).Inc()
	}
	return r
}

func (p *Prober) probeTCP(ctx context.Context, addr string, timeout time.Duration) readiness.Result {
	conn, err := p.dial(ctx, "tcp", addr)
	if err != nil {
		return readiness.Result{Detail: fmt.Sprintf("TCP probe of %s: %s", addr, failure(ctx, err, timeout))}
	}
	_ = conn.Close()
	return readiness.Result{OK: true, Detail: fmt.Sprintf("TCP probe of %s succeeded", addr)}
}

func (p *Prober) probeHTTP(ctx context.Context, ip string, a *watcherv1.HTTPGetAction, timeout time.Duration) readiness.Result {
	scheme := strings.ToLower(a.GetScheme())
	if scheme == "" {
		scheme = "http"
	}
	path := a.GetPath()
	if path == "" {
		path = "/"
	}
	target := scheme + "://" + net.JoinHostPort(ip, strconv.Itoa(int(a.GetPort()))) + path
	u, err := url.Parse(target)
	if err != nil {
		return readiness.Result{Detail: fmt.Sprintf("HTTP probe GET %s: invalid URL: %v", target, err)}
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return readiness.Result{Detail: fmt.Sprintf("HTTP probe GET %s: %v", target, err)}
	}
	req.Header.Set("User-Agent", UserAgent)
	req.Header.Set("Accept", "*/*")
	resp, err := p.http.Do(req)
	if err != nil {
		var uerr *url.Error
		if errors.As(err, &uerr) {
			err = uerr.Err
		}
		return readiness.Result{Detail: fmt.Sprintf("HTTP probe GET %s: %s", target, failure(ctx, err, timeout))}
	}
	_, _ = io.CopyN(io.Discard, resp.Body, maxBodyBytes)
	_ = resp.Body.Close()
	detail := fmt.Sprintf("HTTP probe GET %s: %s", target, resp.Status)
	return readiness.Result{OK: resp.StatusCode >= 200 && resp.StatusCode < 400, Detail: detail}
}

// failure says why a probe failed, in words a user reads: the dial or read
// error, or that the probe ran out of time.
func failure(ctx context.Context, err error, timeout time.Duration) string {
	if errors.Is(ctx.Err(), context.DeadlineExceeded) || errors.Is(err, context.DeadlineExceeded) {
		return "timed out after " + timeout.String()
	}
	var op *net.OpError
	if errors.As(err, &op) && op.Err != nil {
		return op.Err.Error()
	}
	return err.Error()
}
