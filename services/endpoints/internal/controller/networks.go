package controller

import (
	"net/netip"

	"google.golang.org/protobuf/proto"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/ipledger/ipledger/pkg/stream"
	watcherv1 "github.com/ipledger/ipledger/proto/ipledger/watcher/v1"
	"github.com/ipledger/ipledger/services/endpoints/internal/clusternet"
	"github.com/ipledger/ipledger/services/endpoints/internal/planner"
	"github.com/ipledger/ipledger/services/endpoints/internal/probepolicy"
)

// The cluster's own networks, in a term: learnt from the store when the term
// starts, learnt again when a Node, ServiceCIDR or the API server's slice
// changes what they hold, and every workload with an address in a network
// that came or went is judged again and its Services queued, so that a
// refused address leaves its slices within one pass. The planner and the
// prober read the networks of the moment (st.networks).

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
	for _, w := range st.c.store.List(watcherv1.Kind_KIND_EXTERNAL_WORKLOAD) {
		if inAny(w.GetExternalWorkload().GetWorkloadIps(), changed) {
			st.judge(w)
			st.queueSelecting(w)
		}
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

// refuse is the planner's Refuse: the message of an address no slice may
// hold under the networks of the moment.
func (st *termState) refuse(a netip.Addr) string {
	return st.networks.Load().Slice(a, st.c.cfg.Probe.Policy).Message
}

// refusal is the first of the workload's addresses no slice may hold.
func (st *termState) refusal(w *watcherv1.Object) probepolicy.Refusal {
	for _, ip := range w.GetExternalWorkload().GetWorkloadIps() {
		a, err := netip.ParseAddr(ip)
		if err != nil {
			continue
		}
		if r := st.networks.Load().Slice(a, st.c.cfg.Probe.Policy); r.Refused() {
			return r
		}
	}
	return probepolicy.Refusal{}
}

// judge records whether the workload has an address no slice may hold,
// counts it by reason, and tells the workload (an Event) when it becomes
// refused or its reason changes.
func (st *termState) judge(w *watcherv1.Object) {
	key := stream.Key(w)
	r := st.refusal(w)
	st.mu.Lock()
	old := st.refused[key]
	if r.Refused() {
		st.refused[key] = r.Reason
	} else {
		delete(st.refused, key)
	}
	st.mu.Unlock()
	if old == r.Reason {
		return
	}
	m := st.c.Metrics.WorkloadsRefused
	if old != "" {
		m.WithLabelValues(old).Dec()
	}
	if !r.Refused() {
		return
	}
	m.WithLabelValues(r.Reason).Inc()
	meta := w.GetMeta()
	ref := &corev1.ObjectReference{APIVersion: planner.WorkloadAPIVersion, Kind: planner.WorkloadKind,
		Namespace: meta.GetNamespace(), Name: meta.GetName(), UID: types.UID(meta.GetUid())}
	st.recorder.Eventf(ref, corev1.EventTypeWarning, "AddressRefused", "No EndpointSlice will hold this workload: %s", r.Message)
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
