package controller

import (
	"context"
	"encoding/json"
	"net/netip"
	"strings"

	"google.golang.org/protobuf/proto"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/ipledger/ipledger/pkg/stream"
	watcherv1 "github.com/ipledger/ipledger/proto/ipledger/watcher/v1"
	"github.com/ipledger/ipledger/services/endpoints/internal/clusternet"
	"github.com/ipledger/ipledger/services/endpoints/internal/grants"
	"github.com/ipledger/ipledger/services/endpoints/internal/planner"
	"github.com/ipledger/ipledger/services/endpoints/internal/probepolicy"
	"github.com/ipledger/ipledger/services/endpoints/internal/readiness"
)

// Which workload addresses a term admits into slices and probes, and how
// the workloads are told (docs/security.md, "What an ExternalWorkload may
// name"):
//
//   - the cluster's own networks (package clusternet) are learnt from the
//     store when the term starts, learnt again when a Node, ServiceCIDR or
//     the API server's slice changes what they hold; every workload with an
//     address in a network that came or went is judged again and its
//     Services queued, so that a refused address leaves its slices within
//     one pass;
//   - the namespace's grants (package grants), per --workload-grants; a
//     Namespace whose grants change has its workloads judged again;
//   - judging a workload counts it by reason and, when what its
//     AddressAccepted condition should say differs from what it says,
//     queues it on the term's condition queue, whose worker writes the
//     condition (and an Event) — never the stream's handler.

// ConditionAddressAccepted is the condition endpoints writes on a workload
// whose address it refuses or, in report mode, would refuse; a workload
// whose addresses are all admitted carries none.
const ConditionAddressAccepted = "AddressAccepted"

// Reasons of the condition, also Event reasons.
const (
	ReasonClusterAddress       = "ClusterAddress"
	ReasonUnusableAddress      = "UnusableAddress"
	ReasonNotGranted           = "NotGranted"
	ReasonNotGrantedReportOnly = "NotGrantedReportOnly"
)

// Refusal reasons of the grants, beside clusternet.Reasons, in the metric.
const (
	refusedNotGranted           = "not-granted"
	refusedNotGrantedReportOnly = "not-granted-report-only"
)

// isNetworkKind reports whether the cluster's networks are learnt from kind.
func isNetworkKind(kind watcherv1.Kind) bool {
	switch kind {
	case watcherv1.Kind_KIND_NODE, watcherv1.Kind_KIND_SERVICE_CIDR, watcherv1.Kind_KIND_KUBERNETES_ENDPOINT_SLICE:
		return true
	}
	return false
}

// networkFieldsChanged reports whether an update of a network kind's object
// may change the networks: a Node's Pod ranges or addresses, or anything of
// the others (which carry nothing else). A Node's status updates, most of
// its changes, do not.
func networkFieldsChanged(old, o *watcherv1.Object) bool {
	if old == nil || o.GetKind() != watcherv1.Kind_KIND_NODE {
		return true
	}
	a, b := old.GetNode(), o.GetNode()
	return !proto.Equal(&watcherv1.Node{PodCidrs: a.GetPodCidrs(), Addresses: a.GetAddresses()},
		&watcherv1.Node{PodCidrs: b.GetPodCidrs(), Addresses: b.GetAddresses()})
}

// grantsChanged reports whether a Namespace's update changed its grants.
func grantsChanged(old, o *watcherv1.Object) bool {
	return old.GetMeta().GetAnnotations()[grants.Annotation] != o.GetMeta().GetAnnotations()[grants.Annotation]
}

// learnNetworks reads the networks from the store as they are now.
func (st *termState) learnNetworks() *clusternet.Networks {
	s := st.c.store
	return clusternet.Learn(s.List(watcherv1.Kind_KIND_NODE), s.List(watcherv1.Kind_KIND_SERVICE_CIDR),
		s.List(watcherv1.Kind_KIND_KUBERNETES_ENDPOINT_SLICE))
}

// relearnNetworks learns the networks again and, where they changed, judges
// every workload with an address in a network that came or went and queues
// the Services selecting it.
func (st *termState) relearnNetworks() {
	st.netMu.Lock()
	defer st.netMu.Unlock()
	next := st.learnNetworks()
	changed := clusternet.Changed(st.networks.Swap(next), next)
	if len(changed) == 0 {
		return
	}
	st.log.Info("The cluster's networks changed: judging the workloads in them again", "changed", len(changed), "networks", next.Len())
	for w := range st.c.store.All(watcherv1.Kind_KIND_EXTERNAL_WORKLOAD) {
		if inAny(w.GetExternalWorkload().GetWorkloadIps(), changed) {
			st.judge(w)
			st.queueSelecting(w)
		}
	}
}

// regrant judges again the workloads of a Namespace whose grants changed.
func (st *termState) regrant(ns *watcherv1.Object) {
	if !st.c.cfg.WorkloadGrants.Checks() {
		return
	}
	for _, w := range st.c.store.ListNamespace(watcherv1.Kind_KIND_EXTERNAL_WORKLOAD, ns.GetMeta().GetName()) {
		st.judge(w)
		st.queueSelecting(w)
	}
}

func inAny(ips []string, prefixes []netip.Prefix) bool {
	for _, ip := range ips {
		a, err := netip.ParseAddr(ip)
		if err != nil {
			continue
		}
		a = a.Unmap().WithZone("")
		for _, p := range prefixes {
			if p.Contains(a) {
				return true
			}
		}
	}
	return false
}

// admission is what a term admits for the workloads of one namespace, at
// one moment: the networks, the probe policy and the namespace's grants.
type admission struct {
	nets      *clusternet.Networks
	policy    probepolicy.Policy
	mode      grants.Mode
	namespace string
	nsAnn     map[string]string
}

func (st *termState) admission(namespace string) admission {
	ad := admission{nets: st.networks.Load(), policy: st.c.cfg.Probe.Policy, mode: st.c.cfg.WorkloadGrants, namespace: namespace}
	if ad.mode.Checks() && namespace != "" {
		ns, _ := st.c.store.Get(watcherv1.Kind_KIND_NAMESPACE, "", namespace)
		ad.nsAnn = ns.GetMeta().GetAnnotations()
	}
	return ad
}

// slice is the planner's Refuse: why a may not enter a slice.
func (ad admission) slice(a netip.Addr) string {
	if r := ad.nets.Slice(a, ad.policy); r.Refused() {
		return r.Message
	}
	if ad.mode == grants.Enforce {
		return grants.Check(ad.namespace, ad.nsAnn, a)
	}
	return ""
}

// probe is the prober's refusal beyond its policy (which it applies after).
func (ad admission) probe(a netip.Addr) probepolicy.Refusal {
	if r := ad.nets.Probe(a, ad.policy); r.Refused() {
		return r
	}
	if ad.mode == grants.Enforce && ad.namespace != "" {
		if msg := grants.Check(ad.namespace, ad.nsAnn, a); msg != "" {
			return probepolicy.Refusal{Reason: refusedNotGranted, Message: msg}
		}
	}
	return probepolicy.Refusal{}
}

// verdict is what a term decides of one workload's addresses.
type verdict struct {
	// refusal: an address no slice may hold, whatever the grants.
	refusal probepolicy.Refusal
	// ungranted: an address outside the namespace's grants (report or
	// enforce mode), in words.
	ungranted string
}

func (ad admission) judge(ew *watcherv1.ExternalWorkload) verdict {
	var v verdict
	for _, ip := range ew.GetWorkloadIps() {
		a, err := netip.ParseAddr(ip)
		if err != nil {
			continue
		}
		if r := ad.nets.Slice(a, ad.policy); r.Refused() && !v.refusal.Refused() {
			v.refusal = r
		}
		if ad.mode.Checks() && v.ungranted == "" {
			v.ungranted = grants.Check(ad.namespace, ad.nsAnn, a)
		}
	}
	return v
}

// metricReason is the verdict's label in ipledger_endpoints_workloads_refused,
// "" when admitted.
func (v verdict) metricReason(mode grants.Mode) string {
	switch {
	case v.refusal.Refused():
		return v.refusal.Reason
	case v.ungranted != "" && mode == grants.Enforce:
		return refusedNotGranted
	case v.ungranted != "":
		return refusedNotGrantedReportOnly
	}
	return ""
}

// unusable are the refusals of probepolicy.Builtin: addresses that are no
// VM's anywhere, rather than the cluster's own.
var unusable = map[string]bool{probepolicy.ReasonUnspecified: true, probepolicy.ReasonLoopback: true, probepolicy.ReasonLinkLocal: true,
	probepolicy.ReasonMulticast: true, probepolicy.ReasonCloudMetadata: true}

// condition is what the workload's AddressAccepted condition should say
// (nil: none).
func (v verdict) condition(mode grants.Mode) *metav1.Condition {
	switch {
	case v.refusal.Refused():
		reason := ReasonClusterAddress
		if unusable[v.refusal.Reason] {
			reason = ReasonUnusableAddress
		}
		return &metav1.Condition{Type: ConditionAddressAccepted, Status: metav1.ConditionFalse, Reason: reason,
			Message: "No EndpointSlice holds this workload: " + v.refusal.Message}
	case v.ungranted != "" && mode == grants.Enforce:
		return &metav1.Condition{Type: ConditionAddressAccepted, Status: metav1.ConditionFalse, Reason: ReasonNotGranted,
			Message: "No EndpointSlice holds this workload: " + v.ungranted}
	case v.ungranted != "":
		return &metav1.Condition{Type: ConditionAddressAccepted, Status: metav1.ConditionTrue, Reason: ReasonNotGrantedReportOnly,
			Message: "Served for now, refused once endpoints runs with --workload-grants=enforce: " + v.ungranted}
	}
	return nil
}

// conditionSays reports whether the observed condition of that type says
// what want says (nil: that there is none).
func conditionSays(observed []*watcherv1.Condition, want *metav1.Condition) bool {
	for _, c := range observed {
		if c.GetType() != ConditionAddressAccepted {
			continue
		}
		return want != nil && c.GetStatus() == string(want.Status) && c.GetReason() == want.Reason && c.GetMessage() == want.Message
	}
	return want == nil
}

// judge counts the workload by its verdict and queues it on the condition
// queue when its condition should say something else.
func (st *termState) judge(w *watcherv1.Object) {
	key := stream.Key(w)
	mode := st.c.cfg.WorkloadGrants
	v := st.admission(w.GetMeta().GetNamespace()).judge(w.GetExternalWorkload())
	reason := v.metricReason(mode)
	st.mu.Lock()
	old := st.refused[key]
	if reason != "" {
		st.refused[key] = reason
	} else {
		delete(st.refused, key)
	}
	st.mu.Unlock()
	if old != reason {
		m := st.c.Metrics.WorkloadsRefused
		if old != "" {
			m.WithLabelValues(old).Dec()
		}
		if reason != "" {
			m.WithLabelValues(reason).Inc()
		}
	}
	if !conditionSays(w.GetExternalWorkload().GetConditions(), v.condition(mode)) {
		st.enqueueCondition(key)
	}
}

// syncCondition writes the AddressAccepted condition of one workload as its
// verdict of the moment says, conditional on the resourceVersion it was
// decided on (a Conflict waits for the newer version, which the stream
// brings and judge queues again), with an Event when it refuses.
func (st *termState) syncCondition(ctx context.Context, key string) error {
	ns, name, _ := strings.Cut(key, "/")
	w, ok := st.c.store.Get(watcherv1.Kind_KIND_EXTERNAL_WORKLOAD, ns, name)
	if !ok || st.c.status == nil {
		return nil
	}
	mode := st.c.cfg.WorkloadGrants
	want := st.admission(ns).judge(w.GetExternalWorkload()).condition(mode)
	observed := w.GetExternalWorkload().GetConditions()
	if conditionSays(observed, want) {
		return nil
	}
	meta := w.GetMeta()
	patch, err := json.Marshal(map[string]any{
		"metadata": map[string]any{"resourceVersion": meta.GetResourceVersion()},
		"status":   map[string]any{"conditions": readiness.WithCondition(observed, ConditionAddressAccepted, want, meta.GetGeneration(), st.c.now())},
	})
	if err != nil {
		return err
	}
	if _, err := st.c.status.PatchStatus(ctx, ns, name, patch); err != nil {
		if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
			return nil
		}
		return err
	}
	if want != nil {
		ref := &corev1.ObjectReference{APIVersion: planner.WorkloadAPIVersion, Kind: planner.WorkloadKind, Namespace: ns, Name: name, UID: types.UID(meta.GetUid())}
		st.recorder.Event(ref, corev1.EventTypeWarning, want.Reason, want.Message)
		st.log.Info("Workload address refused", "workload", key, "reason", want.Reason, "message", want.Message)
	}
	return nil
}

// forget drops a deleted workload from the refused count.
func (st *termState) forget(w *watcherv1.Object) {
	key := stream.Key(w)
	st.mu.Lock()
	old, ok := st.refused[key]
	delete(st.refused, key)
	st.mu.Unlock()
	if ok {
		st.c.Metrics.WorkloadsRefused.WithLabelValues(old).Dec()
	}
}

// resetRefused takes the term's count out of the gauge when it ends.
func (st *termState) resetRefused() {
	st.mu.Lock()
	refused := st.refused
	st.refused = map[string]string{}
	st.mu.Unlock()
	for _, reason := range refused {
		st.c.Metrics.WorkloadsRefused.WithLabelValues(reason).Dec()
	}
}
