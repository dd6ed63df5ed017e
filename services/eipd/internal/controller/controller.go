// Package controller keeps one Elastic IP on every Node an operator opted
// in (label node-restriction.kubernetes.io/ipledger-externalip-auto-assign=true,
// which a kubelet cannot set on itself) and gives the addresses of the
// others back. Before associating an address it checks, against EC2, that
// the instance a Node names is one of this cluster's and is that Node; it
// never takes an address from something outside the cluster. It reads Nodes and Pods from the watcher stream, decides with
// package decide, remembers its own EC2 changes with package expect, and
// writes EC2 (through awsec2), the Node's label and annotation, and Events.
// The stream may be behind the API server (a watcher replica that lags), so
// whatever would destroy something (disassociate, release, untag, clear a
// Node's published address) is first confirmed with a GET of the live Node,
// and done only if the live Node agrees. Everything that writes runs inside
// one leadership term: a NodeReconciler is created fresh per term with empty
// expectations.
package controller

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/protobuf/proto"

	"github.com/ipledger/ipledger/pkg/backoff"
	"github.com/ipledger/ipledger/pkg/stream"
	watcherv1 "github.com/ipledger/ipledger/proto/ipledger/watcher/v1"
	"github.com/ipledger/ipledger/services/eipd/internal/awsec2"
	"github.com/ipledger/ipledger/services/eipd/internal/decide"
	"github.com/ipledger/ipledger/services/eipd/internal/expect"
)

// Kubernetes keys eipd reads and writes.
const (
	// LabelOptIn on a Node (=true) asks for an Elastic IP. Only an operator
	// can set it: NodeRestriction forbids kubelets the prefix.
	LabelOptIn = decide.LabelOptIn
	// LabelAutoAssign is the deprecated opt-in, which a kubelet may set on
	// its own Node: honoured only with --legacy-opt-in=accept.
	LabelAutoAssign = decide.LabelLegacyOptIn
	// LabelExternalIP on a Node publishes its Elastic IP; on a Pod it names
	// the IP the Pod wants (which makes an orphan with that IP preferred).
	LabelExternalIP = "ipledger.io/externalip"
	// AnnotationAllocationID on a Node names its Elastic IP's allocation.
	AnnotationAllocationID = "ipledger.io/eip-allocation-id"
	// FieldManager is eipd's name in managedFields.
	FieldManager = "ipledger-eipd"
)

// Event reasons on Nodes.
const (
	ReasonAllocated         = "EIPAllocated"
	ReasonClaimed           = "EIPOrphanReused"
	ReasonAssociated        = "EIPAssociated"
	ReasonDuplicateReleased = "EIPDuplicateReleased"
	ReasonReleased          = "EIPReleased"
	ReasonKept              = "EIPKept"
	ReasonInvalidProviderID = "InvalidProviderID"
	ReasonEC2Error          = "EIPSyncFailed"
	// ReasonRefused: the Node's instance failed the trust check (not this
	// cluster's, not that Node): no address is associated with it.
	ReasonRefused = "EIPRefused"
	// ReasonHeldOutside: an address tagged for the Node is associated with
	// something outside the cluster; eipd leaves it alone.
	ReasonHeldOutside = "EIPHeldOutsideCluster"
	// ReasonDeprecatedOptIn: the Node asks only through the legacy label.
	ReasonDeprecatedOptIn = "DeprecatedOptInLabel"
	// ReasonWaiting: nothing the Node may take is free and eipd may not
	// allocate (a reserved set, or otherNodes: none).
	ReasonWaiting = "EIPWaiting"
	// ReasonTaintLifted: the Node's address is associated and published;
	// eipd removed its startup taint.
	ReasonTaintLifted = "EIPStartupTaintRemoved"
)

// DefaultStartupTaint is the key of the taint eipd removes from a Node
// once its Elastic IP is associated and published (--startup-taint).
const DefaultStartupTaint = "ipledger.io/eip-not-ready"

// Values of --legacy-opt-in.
const (
	LegacyOptInAccept = "accept"
	LegacyOptInIgnore = "ignore"
)

// Config holds the controller's flags.
type Config struct {
	// MinReconciliationInterval spaces event-driven syncs of one Node
	// (kubestatic's flag). Correctness does not depend on it: expectations
	// and tag lookups do; it only limits EC2 traffic.
	MinReconciliationInterval time.Duration
	// RequeueInterval re-checks every Node (and sweeps stale addresses).
	RequeueInterval time.Duration
	// PreventEIPDeallocation keeps the addresses of Nodes that no longer
	// want one, disassociated and untagged (orphans to reuse).
	PreventEIPDeallocation bool
	// ConsistencyTimeout is how long EC2 may take to show a change before
	// eipd stops expecting it (the timeout of package expect's pkg/expect
	// Sets, as --expectation-timeout is endpoints').
	ConsistencyTimeout time.Duration
	// PendingPoll is how soon a Node waiting for EC2 to catch up is retried.
	PendingPoll time.Duration
	// Workers syncing Nodes in parallel (one Node is never synced twice at once).
	Workers int
	// LegacyOptIn says whether the legacy label LabelAutoAssign still opts
	// a Node in: "accept" (the default of this release, deprecated and
	// logged) or "ignore" (only LabelOptIn counts).
	LegacyOptIn string
	// InstanceClusterTag is the EC2 tag key=value that makes an instance
	// one of this cluster's; empty means ipledger.io/cluster=<ClusterID>.
	InstanceClusterTag string
	// VPCID, when set, is the VPC every instance of the cluster is in.
	VPCID string
	// ClusterID is eipd's --cluster-id (set by the app, not a flag here).
	ClusterID string
	// ReservedSets is the path of the --reserved-sets file ("" for none):
	// the sets of pre-allocated addresses Nodes take (decide.Reservations).
	ReservedSets string
	// StartupTaint is the key of the taint eipd removes from a Node that
	// wants an address once it is associated and published ("" for none).
	StartupTaint string
}

// Defaults fills the fields left unset.
func (c *Config) Defaults() {
	if c.MinReconciliationInterval == 0 {
		c.MinReconciliationInterval = 10 * time.Second
	}
	if c.RequeueInterval <= 0 {
		c.RequeueInterval = time.Minute
	}
	if c.ConsistencyTimeout <= 0 {
		c.ConsistencyTimeout = time.Minute
	}
	if c.PendingPoll <= 0 {
		c.PendingPoll = time.Second
	}
	if c.Workers <= 0 {
		c.Workers = 4
	}
	if c.LegacyOptIn == "" {
		c.LegacyOptIn = LegacyOptInAccept
	}
	if c.StartupTaint == "" {
		c.StartupTaint = DefaultStartupTaint
	}
}

// Membership returns the check that makes an instance one of this
// cluster's.
func (c *Config) Membership() (decide.Membership, error) {
	m := decide.Membership{TagKey: decide.TagCluster, TagValue: c.ClusterID, VPCID: c.VPCID}
	if c.InstanceClusterTag != "" {
		k, v, ok := strings.Cut(c.InstanceClusterTag, "=")
		if !ok || k == "" || v == "" {
			return m, fmt.Errorf("--instance-cluster-tag %q: want key=value, e.g. kubernetes.io/cluster/prod=owned", c.InstanceClusterTag)
		}
		m.TagKey, m.TagValue = k, v
	}
	if m.TagValue == "" {
		return m, errors.New("no cluster ID to check instances against: set --cluster-id (or --instance-cluster-tag)")
	}
	return m, nil
}

// Flags registers the controller's flags with the current values as their
// defaults (call Defaults first).
func (c *Config) Flags(fs *flag.FlagSet) {
	fs.DurationVar(&c.MinReconciliationInterval, "node-min-reconciliation-interval", c.MinReconciliationInterval, "minimum time between two event-driven reconciliations of the same Node")
	fs.DurationVar(&c.RequeueInterval, "node-reconciliation-requeue-interval", c.RequeueInterval, "how often every Node is reconciled again, and stale addresses swept")
	fs.BoolVar(&c.PreventEIPDeallocation, "prevent-eip-deallocation", c.PreventEIPDeallocation, "keep the Elastic IPs of Nodes that no longer want one (disassociated, reusable) instead of releasing them")
	fs.DurationVar(&c.ConsistencyTimeout, "ec2-consistency-timeout", c.ConsistencyTimeout, "how long EC2 may take to list an address eipd allocated or tagged before eipd stops waiting for it")
	fs.IntVar(&c.Workers, "workers", c.Workers, "Nodes reconciled in parallel")
	fs.StringVar(&c.LegacyOptIn, "legacy-opt-in", c.LegacyOptIn, "whether the deprecated label "+LabelAutoAssign+"=true, which a kubelet can set on its own Node, still asks for an Elastic IP: "+
		"accept (default in this release, logged as deprecated) or ignore (only "+LabelOptIn+"=true, which only an operator can set, counts). The default becomes ignore in 0.4.0")
	fs.StringVar(&c.InstanceClusterTag, "instance-cluster-tag", c.InstanceClusterTag, "EC2 tag key=value an instance must carry before eipd associates an Elastic IP with it (default "+decide.TagCluster+"=<cluster-id>; e.g. kubernetes.io/cluster/<name>=owned)")
	fs.StringVar(&c.VPCID, "vpc-id", c.VPCID, "when set, eipd associates Elastic IPs only with instances in this VPC")
	fs.StringVar(&c.ReservedSets, "reserved-sets", c.ReservedSets, "YAML file of reserved sets: Elastic IPs allocated beforehand (a partner's allowlist) that the Nodes of chosen instances take, in order, waiting when none is free; eipd never allocates for them nor releases them. "+
		"With a file, Nodes no set serves get an orphan or nothing unless it says otherNodes: allocate (docs/eipd.md#reserved-sets). Read at start")
	fs.StringVar(&c.StartupTaint, "startup-taint", c.StartupTaint, "key of the taint eipd removes from a Node once its Elastic IP is associated and the Node's "+LabelExternalIP+" label shows it: "+
		"give it to new Nodes (node group, Karpenter NodePool startupTaints) so that nothing is scheduled on them before their address is on. Must start with ipledger.io/ (the only taints the install's admission policy lets eipd remove)")
}

// EC2 is what the controller needs from EC2 (implemented by *awsec2.Client).
type EC2 interface {
	ListManaged(ctx context.Context) ([]decide.Address, error)
	// Allocate returns an address tagged for node, existing (except those
	// in skip) or new.
	Allocate(ctx context.Context, node string, skip map[string]bool) (decide.Address, error)
	TagNode(ctx context.Context, allocationID, node string) error
	UntagNode(ctx context.Context, allocationID string) error
	Associate(ctx context.Context, allocationID string, t decide.Target) (string, error)
	Disassociate(ctx context.Context, associationID string) error
	Release(ctx context.Context, allocationID string) error
	// Instances describes instances in one call; absent ones are missing
	// from the map.
	Instances(ctx context.Context, ids []string) (map[string]decide.Instance, error)
	// InterfaceOwners describes the instances the associated addresses
	// among addrs are associated with, by network interface ID.
	InterfaceOwners(ctx context.Context, addrs []decide.Address) (map[string]decide.Instance, error)
}

// Store is the read-only view of the cluster (implemented by *stream.Store).
type Store interface {
	Get(kind watcherv1.Kind, namespace, name string) (*watcherv1.Object, bool)
	List(kind watcherv1.Kind) []*watcherv1.Object
}

// Queue is the per-term work queue (implemented by *leader.Queue[string]).
type Queue interface {
	Add(item string)
	AddAfter(item string, d time.Duration)
}

// Controller is built once per process; Runs are built per term.
type Controller struct {
	cfg     Config
	ec2     EC2
	source  Source
	store   Store
	reg     prometheus.Registerer
	kube    kubernetes.Interface
	log     *slog.Logger
	metrics *metrics
	status  *StatusBook
	member  decide.Membership
	legacy  bool
	// reserved are the reserved sets (zero: no --reserved-sets file).
	reserved decide.Reservations
}

// New returns a controller. Its Events go through each NodeReconciler's
// recorder; source is the stream each term's worker follows (nil if no
// term is run: tests that drive a NodeReconciler themselves); reg receives
// its metrics and each term's workqueue metrics.
func New(cfg Config, ec2 EC2, source Source, store Store, kube kubernetes.Interface, log *slog.Logger, reg prometheus.Registerer) (*Controller, error) {
	// A zero MinReconciliationInterval is kept: it means no spacing.
	minInterval := cfg.MinReconciliationInterval
	cfg.Defaults()
	cfg.MinReconciliationInterval = minInterval
	var legacy bool
	switch cfg.LegacyOptIn {
	case LegacyOptInAccept:
		legacy = true
		log.Warn("Deprecated: Nodes labelled "+LabelAutoAssign+"=true get an Elastic IP, and a kubelet can set that label on its own Node. "+
			"Label the Nodes that should have one "+LabelOptIn+"=true (only an operator can), then run with --legacy-opt-in=ignore: "+
			"it becomes the default in 0.4.0", "flag", "--legacy-opt-in="+cfg.LegacyOptIn)
	case LegacyOptInIgnore:
	default:
		return nil, fmt.Errorf("--legacy-opt-in=%q: want %s or %s", cfg.LegacyOptIn, LegacyOptInAccept, LegacyOptInIgnore)
	}
	member, err := cfg.Membership()
	if err != nil {
		return nil, err
	}
	if !strings.HasPrefix(cfg.StartupTaint, "ipledger.io/") {
		return nil, fmt.Errorf("--startup-taint=%q: the install's admission policy ipledger-eipd-node-labels lets eipd remove only taints whose key starts with ipledger.io/; use %s (the default) or another ipledger.io/ key", cfg.StartupTaint, DefaultStartupTaint)
	}
	var reserved decide.Reservations
	if cfg.ReservedSets != "" {
		if reserved, err = decide.LoadReservations(cfg.ReservedSets); err != nil {
			return nil, err
		}
		log.Info("Reserved sets: Nodes they serve take only their addresses; eipd never releases them",
			"sets", reserved.SetNames(), "otherNodes", reserved.OtherNodes, "file", cfg.ReservedSets)
	}
	m, err := newMetrics(reg)
	if err != nil {
		return nil, err
	}
	return &Controller{cfg: cfg, ec2: ec2, source: source, store: store, reg: reg, kube: kube, log: log, metrics: m, status: NewStatusBook(), member: member, legacy: legacy, reserved: reserved}, nil
}

// Config returns the controller's effective configuration.
func (c *Controller) Config() Config { return c.cfg }

// Status is the per-Node outcome book the gRPC server reads.
func (c *Controller) Status() *StatusBook { return c.status }

// Wants reports whether a Node (as the stream shows it) should have an
// Elastic IP: not being deleted, and opted in (decide.NodeOptIn).
func (c *Controller) Wants(node *watcherv1.Object) bool {
	return c.optIn(node) != decide.NoOptIn
}

func (c *Controller) optIn(node *watcherv1.Object) decide.OptIn {
	if node == nil || node.GetMeta().GetDeletionTimestamp() != 0 {
		return decide.NoOptIn
	}
	return decide.NodeOptIn(node.GetMeta().GetLabels(), c.legacy)
}

// NodeReconciler reconciles the Nodes' Elastic IPs for one term: its
// queue, its expectations and what it has told the Nodes.
type NodeReconciler struct {
	c      *Controller
	queue  Queue
	events record.EventRecorder
	exp    *expect.Expectations

	mu       sync.Mutex
	lastSync map[string]time.Time
	// warned are the Nodes told this term that their opt-in is deprecated.
	warned map[string]bool
	// served holds, for each admitted Node a reserved set serves, the set.
	served map[string]string
	// waiters are the Nodes waiting for an address, by the set they wait
	// on ("" for Nodes no set serves).
	waiters map[string]string
}

// NewNodeReconciler starts a term's state on a fresh queue; events is the term's
// recorder (nil: no Events).
func (c *Controller) NewNodeReconciler(queue Queue, events record.EventRecorder) *NodeReconciler {
	c.status.Reset() // the last term's outcomes say nothing about this one
	c.metrics.setWaiting(nil, c.reserved.SetNames())
	return &NodeReconciler{c: c, queue: queue, events: events, exp: expect.New(c.cfg.ConsistencyTimeout, nil), lastSync: map[string]time.Time{}, warned: map[string]bool{},
		served: map[string]string{}, waiters: map[string]string{}}
}

// Handler enqueues the Nodes whose Elastic IP may need work. Pods are read
// from the store when an orphan is chosen; their events need no sync.
func (r *NodeReconciler) Handler() stream.HandlerFuncs {
	return stream.HandlerFuncs{
		AddFunc: func(o *watcherv1.Object) {
			if o.GetKind() == watcherv1.Kind_KIND_NODE && (r.c.Wants(o) || hasEIP(o)) {
				r.enqueue(o.GetMeta().GetName())
			}
		},
		UpdateFunc: func(old, o *watcherv1.Object) {
			if o.GetKind() == watcherv1.Kind_KIND_NODE && (r.c.Wants(o) || r.c.Wants(old) || hasEIP(o)) && changed(old, o, r.c.cfg.StartupTaint) {
				r.enqueue(o.GetMeta().GetName())
			}
		},
		DeleteFunc: func(o *watcherv1.Object) {
			if o.GetKind() == watcherv1.Kind_KIND_NODE && (r.c.Wants(o) || hasEIP(o)) {
				r.queue.Add(o.GetMeta().GetName())
			}
		},
	}
}

// changed reports whether an update touches anything eipd reads. Kubelet
// heartbeats only bump the resourceVersion of the compact Node: syncing on
// each would cost two EC2 calls per Node every few seconds, and a throttled
// account. Drift is caught by the periodic requeue instead. The startup
// taint is left out: it only ever goes, and eipd is what removes it (a sync
// after its own removal would cost the same two calls for nothing).
func changed(old, o *watcherv1.Object, startupTaint string) bool {
	if old == nil {
		return true
	}
	strip := func(x *watcherv1.Object) *watcherv1.Object {
		c := proto.Clone(x).(*watcherv1.Object)
		if c.Meta != nil {
			c.Meta.ResourceVersion, c.Meta.Generation = "", 0
		}
		if n := c.GetNode(); n != nil {
			n.TaintKeys = slices.DeleteFunc(n.TaintKeys, func(k string) bool { return k == startupTaint })
		}
		return c
	}
	return !proto.Equal(strip(old), strip(o))
}

func hasEIP(node *watcherv1.Object) bool {
	return node.GetMeta().GetAnnotations()[AnnotationAllocationID] != ""
}

// enqueue applies the minimum interval between event-driven syncs of a Node.
func (r *NodeReconciler) enqueue(node string) {
	r.mu.Lock()
	last, ok := r.lastSync[node]
	r.mu.Unlock()
	if wait := r.c.cfg.MinReconciliationInterval - time.Since(last); ok && wait > 0 {
		r.queue.AddAfter(node, wait)
		return
	}
	r.queue.Add(node)
}

// Sweep lists the managed addresses and enqueues every Node that has one
// but should not (deleted while eipd was away, or missed). Call it only once
// the store is synced: against a partial store every address looks stale.
// The view may be behind, so each such Node is first confirmed against the
// API server (GETs, at most sweepConfirmParallelism at a time): a Node that
// is still labelled is left alone — its address untouched, its own periodic
// sync goes on — and one that cannot be read waits for the next sweep.
func (r *NodeReconciler) Sweep(ctx context.Context) error {
	view, err := r.c.ec2.ListManaged(ctx)
	if err != nil {
		return err
	}
	view, _ = r.exp.Apply(view)
	r.c.metrics.observe(view, r.c.reserved)
	r.wakeWhereFree(view)
	var candidates []string
	for _, a := range decide.Stale(view, func(node string) bool {
		o, ok := r.c.store.Get(watcherv1.Kind_KIND_NODE, "", node)
		return ok && r.c.Wants(o)
	}) {
		if len(candidates) == 0 || candidates[len(candidates)-1] != a.Node {
			candidates = append(candidates, a.Node)
		}
	}
	for i, res := range r.c.liveNodes(ctx, candidates, sweepConfirmParallelism) {
		node := candidates[i]
		switch {
		case res.err != nil:
			r.c.log.Warn("Cannot confirm with the API server that a Node gave up its Elastic IP; retrying at the next sweep",
				"node", node, "err", res.err)
		case res.exists && r.c.Wants(res.obj):
			r.refused(r.c.log.With("node", node), "sweep")
		default:
			r.queue.Add(node)
		}
	}
	// Nodes whose last sync failed are not re-added here: the queue's
	// retries are capped at one interval (RetryLimiter).
	return nil
}

// RetryLimiter is the queue's backoff for failed syncs: client-go's
// controller limiter capped at the requeue interval, so that a Node whose
// sync failed — however often, as in a throttling storm — is retried within
// one interval.
func (c *Controller) RetryLimiter() workqueue.TypedRateLimiter[string] {
	return backoff.Queue[string](c.cfg.RequeueInterval)
}

// Sync brings one Node's Elastic IP to what its labels ask for. It is the
// queue's sync function: nil ends in Forget, an error in AddRateLimited.
func (r *NodeReconciler) Sync(ctx context.Context, node string) error {
	r.mu.Lock()
	r.lastSync[node] = time.Now()
	r.mu.Unlock()
	obj, exists := r.c.store.Get(watcherv1.Kind_KIND_NODE, "", node)
	log := r.c.log.With("node", node)
	err := r.sync(ctx, log, node, obj, exists)
	result := "ok"
	if err != nil {
		result = "error"
		r.c.status.Set(node, StateError, err.Error())
		if exists && !errors.Is(err, context.Canceled) {
			r.event(obj, corev1.EventTypeWarning, ReasonEC2Error, "Elastic IP sync failed: %v", err)
		}
	}
	r.c.metrics.syncs.WithLabelValues(result).Inc()
	return err
}

func (r *NodeReconciler) sync(ctx context.Context, log *slog.Logger, node string, obj *watcherv1.Object, exists bool) error {
	view, err := r.c.ec2.ListManaged(ctx)
	if err != nil {
		return err
	}
	view, waiting := r.exp.Apply(view)
	r.c.metrics.observe(view, r.c.reserved)
	return r.reconcile(ctx, log, round{node: node, obj: obj, exists: exists, view: view, waiting: waiting})
}

// round is what one pass of a sync decides from: the Node as obj shows it
// — from the view, or (confirmed) just read from the API server — and EC2's
// managed addresses as the term's expectations correct them.
type round struct {
	node      string
	obj       *watcherv1.Object
	exists    bool
	view      []decide.Address
	waiting   map[string]bool
	confirmed bool
}

// reconcile acts on one Node in the two steps of package decide: it gathers
// what decide.Triage needs, then — for a Node that wants an address — its
// instance (admitted by decide.Admit) and what decide.Assign needs, and
// carries out each decision. An intent that destroys something is never
// carried out on the view's word: the live Node is read and reconciled
// instead.
func (r *NodeReconciler) reconcile(ctx context.Context, log *slog.Logger, rd round) error {
	t := decide.Triage(r.nodeFacts(rd))
	if t.Next != decide.NextLookUp {
		return r.actOnTriage(ctx, log, rd, t)
	}
	if t.WarnLegacy {
		r.warnLegacy(log, rd.obj)
	}
	insts, err := r.c.ec2.Instances(ctx, []string{t.InstanceID})
	if err != nil {
		return err
	}
	inst, found := insts[t.InstanceID]
	target, refusal := decide.Admit(decide.Claim{
		Node: rd.node, InstanceID: t.InstanceID, InternalIPs: internalIPs(rd.obj), Rivals: r.rivals(rd.node, t.InstanceID),
	}, inst, found, r.c.member)
	if refusal != nil {
		r.serve(rd.node, "") // a refused Node waits on no set: it must not hold others back
		r.stopWaiting(rd.node)
		r.refuse(log, rd.obj, t.InstanceID, refusal)
		return nil
	}
	if target.NetworkInterfaceID == "" {
		return fmt.Errorf("instance %s: %w", t.InstanceID, awsec2.ErrNoPrimaryInterface)
	}
	// An address tagged for the Node but associated outside the cluster was
	// not associated by eipd: it is someone else's, whatever its tags say.
	// It is neither reassociated nor released as a duplicate.
	held := map[string]bool{}
	if rd.view, err = r.withoutHeldOutside(ctx, log, rd.obj, rd.node, rd.view, map[string]decide.Instance{target.NetworkInterfaceID: inst}, held); err != nil {
		return err
	}
	set := r.c.reserved.InstanceSet(inst)
	r.serve(rd.node, set)
	a := decide.Assign(r.choiceInput(rd, target, set), rd.obj.GetNode().GetUnschedulable(), rd.confirmed)
	return r.actOnAssignment(ctx, log, rd, a, set, held)
}

// nodeFacts gathers what decide.Triage looks at.
func (r *NodeReconciler) nodeFacts(rd round) decide.NodeFacts {
	f := decide.NodeFacts{Node: rd.node, Tagged: taggedFor(rd.node, rd.view), Waiting: rd.waiting[rd.node], Confirmed: rd.confirmed}
	if rd.exists {
		f.OptIn = r.c.optIn(rd.obj)
		f.Published = published(rd.obj)
		f.ProviderID = rd.obj.GetNode().GetProviderId()
	}
	return f
}

// actOnTriage carries out every decision of decide.Triage but NextLookUp.
func (r *NodeReconciler) actOnTriage(ctx context.Context, log *slog.Logger, rd round, t decide.Triaged) error {
	switch t.Next {
	case decide.NextConfirm:
		return r.confirm(ctx, log, rd, true)
	case decide.NextGiveBack:
		return r.giveBack(ctx, log, rd)
	case decide.NextAwaitEC2:
		log.Debug("Waiting for EC2 to list the Node's address")
		r.c.status.Set(rd.node, StatePending, t.Reason)
		r.queue.AddAfter(rd.node, r.c.cfg.PendingPoll)
	case decide.NextAwaitProviderID:
		r.c.status.Set(rd.node, StatePending, t.Reason)
	case decide.NextInvalidProviderID:
		r.c.status.Set(rd.node, StateError, t.Reason)
		r.event(rd.obj, corev1.EventTypeWarning, ReasonInvalidProviderID, "Cannot give the Node an Elastic IP: %s", t.Reason)
		// A Node update requeues it; until then it is looked at again every
		// interval, like every Node in error.
		r.queue.AddAfter(rd.node, r.c.cfg.RequeueInterval)
	default:
		return fmt.Errorf("node %s: triage %v has no action here (a bug in eipd)", rd.node, t.Next)
	}
	return nil
}

// choiceInput gathers what decide.Choose (through decide.Assign) looks at
// for an admitted Node.
func (r *NodeReconciler) choiceInput(rd round, target decide.Target, set string) decide.Input {
	return decide.Input{
		Node:                rd.node,
		Target:              target,
		CurrentAllocationID: rd.obj.GetMeta().GetAnnotations()[AnnotationAllocationID],
		Addresses:           rd.view,
		PodRefs:             r.podRefs(),
		Reservations:        r.c.reserved,
		Set:                 set,
		Ahead:               r.ahead(rd.obj, set, taggedNodes(rd.view)),
	}
}

// actOnAssignment carries out a decision of decide.Assign. held are the
// addresses tagged for the Node but held outside the cluster: a new
// allocation must not return one of them.
func (r *NodeReconciler) actOnAssignment(ctx context.Context, log *slog.Logger, rd round, a decide.Assignment, set string, held map[string]bool) error {
	switch a.Step {
	case decide.Cordoned:
		r.stopWaiting(rd.node)
		r.c.status.Set(rd.node, StatePending, a.Reason)
		return nil
	case decide.Waits:
		r.wait(log, rd.obj, set, a.Reason)
		return nil
	}
	r.stopWaiting(rd.node)
	if a.Step == decide.ConfirmDuplicates {
		return r.confirm(ctx, log, rd, false)
	}
	if err := r.releaseDuplicates(ctx, log, rd.obj, a.Plan); err != nil {
		return err
	}
	addr, ok, err := r.obtain(ctx, log, rd.obj, a.Plan, set, held)
	if err != nil || !ok {
		return err
	}
	if err := r.associate(ctx, log, rd.obj, addr, a.Target); err != nil {
		return err
	}
	if err := r.publish(ctx, rd.obj, addr.PublicIP, addr.AllocationID); err != nil {
		return err
	}
	r.c.status.Set(rd.node, StateAssociated, "")
	r.queue.AddAfter(rd.node, r.c.cfg.RequeueInterval)
	return r.liftStartupTaint(ctx, log, rd.obj, addr, a.Seen)
}

// releaseDuplicates gives back the further addresses tagged for the Node
// (decide.Plan.Release), keeping the plan's.
func (r *NodeReconciler) releaseDuplicates(ctx context.Context, log *slog.Logger, obj *watcherv1.Object, plan decide.Plan) error {
	for _, dup := range plan.Release {
		if err := r.giveBackOne(ctx, dup); err != nil {
			return err
		}
		r.c.metrics.duplicates.Inc()
		log.Info("Released a duplicate Elastic IP", "allocationID", dup.AllocationID, "ip", dup.PublicIP, "kept", plan.Address.AllocationID)
		r.event(obj, corev1.EventTypeWarning, ReasonDuplicateReleased, "Node had %d Elastic IPs; kept %s (%s), %s %s (%s)",
			len(plan.Release)+1, plan.Address.PublicIP, plan.Address.AllocationID, r.releaseVerb(dup), dup.PublicIP, dup.AllocationID)
	}
	return nil
}

// obtain returns the address the plan gives the Node: the one tagged for
// it, an orphan it claims, or a new one. ok is false when the Node must
// wait for EC2 (it is requeued).
func (r *NodeReconciler) obtain(ctx context.Context, log *slog.Logger, obj *watcherv1.Object, plan decide.Plan, set string, held map[string]bool) (addr decide.Address, ok bool, err error) {
	switch plan.Action {
	case decide.ClaimOrphan:
		return r.claim(ctx, log, obj, plan.Address, set)
	case decide.Allocate:
		return r.allocate(ctx, log, obj, held)
	}
	return plan.Address, true, nil
}

// claim tags an orphan (or a free address of the Node's reserved set) for
// the Node, unless the term's expectations say another Node is taking it.
func (r *NodeReconciler) claim(ctx context.Context, log *slog.Logger, obj *watcherv1.Object, addr decide.Address, set string) (decide.Address, bool, error) {
	node := obj.GetMeta().GetName()
	if !r.exp.Claim(node, addr.AllocationID, addr.PublicIP) {
		r.queue.AddAfter(node, r.c.cfg.PendingPoll)
		return addr, false, nil
	}
	if err := r.c.ec2.TagNode(ctx, addr.AllocationID, node); err != nil {
		r.exp.Forget(node)
		return addr, false, err
	}
	addr.Node = node
	if set != "" {
		log.Info("Took an Elastic IP of its reserved set", "allocationID", addr.AllocationID, "ip", addr.PublicIP, "reservedSet", set)
		r.event(obj, corev1.EventTypeNormal, ReasonClaimed, "Took Elastic IP %s (%s) of reserved set %s", addr.PublicIP, addr.AllocationID, set)
		return addr, true, nil
	}
	log.Info("Reusing an orphan Elastic IP", "allocationID", addr.AllocationID, "ip", addr.PublicIP)
	r.event(obj, corev1.EventTypeNormal, ReasonClaimed, "Reusing orphan Elastic IP %s (%s)", addr.PublicIP, addr.AllocationID)
	return addr, true, nil
}

// allocate allocates a new address tagged for the Node (skipping the
// addresses held outside the cluster). An allocation whose outcome EC2 did
// not answer is expected: the Node waits until EC2 lists it rather than
// allocate a duplicate.
func (r *NodeReconciler) allocate(ctx context.Context, log *slog.Logger, obj *watcherv1.Object, held map[string]bool) (decide.Address, bool, error) {
	node := obj.GetMeta().GetName()
	addr, err := r.c.ec2.Allocate(ctx, node, held)
	if errors.Is(err, awsec2.ErrUncertain) {
		r.exp.Uncertain(node)
		r.c.status.Set(node, StatePending, err.Error())
		log.Warn("Allocation outcome unknown; waiting for EC2 to list the Node's address before trying again", "err", err)
		r.queue.AddAfter(node, r.c.cfg.PendingPoll)
		return addr, false, nil
	}
	if err != nil {
		return addr, false, err
	}
	r.exp.Allocated(node, addr.AllocationID, addr.PublicIP)
	log.Info("Allocated an Elastic IP", "allocationID", addr.AllocationID, "ip", addr.PublicIP)
	r.event(obj, corev1.EventTypeNormal, ReasonAllocated, "Allocated Elastic IP %s (%s)", addr.PublicIP, addr.AllocationID)
	return addr, true, nil
}

// associate associates the Node's address with its target, unless EC2
// already shows it there.
func (r *NodeReconciler) associate(ctx context.Context, log *slog.Logger, obj *watcherv1.Object, addr decide.Address, target decide.Target) error {
	if addr.AssociatedWith(target) {
		return nil
	}
	if _, err := r.c.ec2.Associate(ctx, addr.AllocationID, target); err != nil {
		return err
	}
	log.Info("Associated the Elastic IP", "allocationID", addr.AllocationID, "ip", addr.PublicIP,
		"instance", target.InstanceID, "networkInterface", target.NetworkInterfaceID, "privateIP", target.PrivateIP)
	r.event(obj, corev1.EventTypeNormal, ReasonAssociated, "Associated Elastic IP %s with %s (%s %s)", addr.PublicIP, target.InstanceID, target.NetworkInterfaceID, target.PrivateIP)
	return nil
}

// giveBack handles a Node that should have no address: it disassociates
// and releases (or keeps, as an orphan) every address tagged for it, and
// clears the Node's label and annotation if the Node still exists.
func (r *NodeReconciler) giveBack(ctx context.Context, log *slog.Logger, rd round) error {
	node, obj := rd.node, rd.obj
	view, err := r.withoutHeldOutside(ctx, log, obj, node, rd.view, nil, nil)
	if err != nil {
		return err
	}
	found := false
	for _, a := range view {
		if a.Node != node {
			continue
		}
		found = true
		if err := r.giveBackOne(ctx, a); err != nil {
			return err
		}
		log.Info("Gave back an Elastic IP", "allocationID", a.AllocationID, "ip", a.PublicIP, "kept", r.keeps(a))
		if r.keeps(a) {
			r.event(nodeRef(node, obj), corev1.EventTypeNormal, ReasonKept, "Disassociated Elastic IP %s (%s) and kept it for reuse", a.PublicIP, a.AllocationID)
		} else {
			r.event(nodeRef(node, obj), corev1.EventTypeNormal, ReasonReleased, "Released Elastic IP %s (%s)", a.PublicIP, a.AllocationID)
		}
	}
	if rd.exists {
		if err := r.publish(ctx, obj, "", ""); err != nil {
			return err
		}
	}
	if rd.waiting[node] {
		// An unanswered allocation may still show up tagged for this Node.
		r.queue.AddAfter(node, r.c.cfg.PendingPoll)
		return nil
	}
	if !found {
		r.exp.Forget(node)
	}
	r.c.status.Forget(node)
	r.stopWaiting(node)
	r.mu.Lock()
	delete(r.lastSync, node)
	delete(r.served, node)
	r.mu.Unlock()
	return nil
}

// giveBackOne disassociates an address, then releases it, or — with
// --prevent-eip-deallocation, or for an address of a reserved set — removes
// its Node tag so it becomes an orphan; the Nodes waiting on its set are
// woken.
func (r *NodeReconciler) giveBackOne(ctx context.Context, a decide.Address) error {
	if a.Associated() {
		if err := r.c.ec2.Disassociate(ctx, a.AssociationID); err != nil {
			return err
		}
	}
	if r.keeps(a) {
		if err := r.c.ec2.UntagNode(ctx, a.AllocationID); err != nil {
			return err
		}
		r.exp.Orphaned(a.AllocationID)
		if set := r.c.reserved.AddressSet(a); set != "" {
			r.wake(set)
		}
		return nil
	}
	if err := r.c.ec2.Release(ctx, a.AllocationID); err != nil {
		return err
	}
	r.exp.Released(a.AllocationID)
	return nil
}

// keeps reports whether an address given back stays, as an orphan.
func (r *NodeReconciler) keeps(a decide.Address) bool {
	return r.c.cfg.PreventEIPDeallocation || r.c.reserved.NeverReleased(a)
}

func (r *NodeReconciler) releaseVerb(a decide.Address) string {
	if r.keeps(a) {
		return "kept as an orphan"
	}
	return "released"
}

// podRefs counts the Pods asking for each public IP.
func (r *NodeReconciler) podRefs() map[string]int {
	refs := map[string]int{}
	for _, p := range r.c.store.List(watcherv1.Kind_KIND_POD) {
		if ip := p.GetMeta().GetLabels()[LabelExternalIP]; ip != "" && p.GetMeta().GetDeletionTimestamp() == 0 {
			refs[ip]++
		}
	}
	return refs
}

// publish writes (or with ip == "" removes) the Node's label and annotation,
// unless the store already shows them.
func (r *NodeReconciler) publish(ctx context.Context, obj *watcherv1.Object, ip, allocationID string) error {
	meta := obj.GetMeta()
	if meta.GetLabels()[LabelExternalIP] == ip && meta.GetAnnotations()[AnnotationAllocationID] == allocationID {
		return nil
	}
	value := func(s string) any {
		if s == "" {
			return nil // JSON merge patch: null deletes the key
		}
		return s
	}
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{
		"labels":      map[string]any{LabelExternalIP: value(ip)},
		"annotations": map[string]any{AnnotationAllocationID: value(allocationID)},
	}})
	if err != nil {
		return err
	}
	_, err = r.c.kube.CoreV1().Nodes().Patch(ctx, meta.GetName(), types.MergePatchType, patch, metav1.PatchOptions{FieldManager: FieldManager})
	if err != nil {
		return fmt.Errorf("patch node %s: %w", meta.GetName(), err)
	}
	return nil
}

func (r *NodeReconciler) event(obj any, eventType, reason, format string, args ...any) {
	if r.events == nil {
		return
	}
	var ref *corev1.ObjectReference
	switch o := obj.(type) {
	case *watcherv1.Object:
		ref = nodeRef(o.GetMeta().GetName(), o)
	case *corev1.ObjectReference:
		ref = o
	default:
		return
	}
	r.events.Eventf(ref, eventType, reason, format, args...)
}

func nodeRef(name string, obj *watcherv1.Object) *corev1.ObjectReference {
	return &corev1.ObjectReference{APIVersion: "v1", Kind: "Node", Name: name, UID: types.UID(obj.GetMeta().GetUid())}
}
