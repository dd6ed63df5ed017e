package controller

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/ipledger/ipledger/pkg/convert"
	"github.com/ipledger/ipledger/pkg/expect"
	"github.com/ipledger/ipledger/pkg/metaonly"
	"github.com/ipledger/ipledger/pkg/stream/objkey"
	watcherv1 "github.com/ipledger/ipledger/proto/ipledger/watcher/v1"
	"github.com/ipledger/ipledger/services/ipam/internal/allocator"
	"github.com/ipledger/ipledger/services/ipam/internal/objects"
	"github.com/ipledger/ipledger/services/ipam/internal/plan"
)

// svcStatus is the part of a Service ipam owns, and the version of the
// Service it was read from.
type svcStatus struct {
	plan.Status
	// base is the version this status was read from, or that ipam's write
	// of it produced. A write decided on this status is conditional on it.
	base version
}

// version is one stored version of a Service, as much as a status write
// needs: its resourceVersion, and every condition in order (a JSON merge
// patch replaces the whole list, so ipam's write carries the others as they
// are in this version, and the resourceVersion makes sure they still are).
type version struct {
	rv         string
	conditions []condition
}

// expectation is a status this term wrote and the resourceVersion the API
// server returned, kept (w.expect, flight.go) until the stream shows that
// version or a newer one.
type expectation struct {
	rv     string
	status svcStatus
}

func statusOf(obj *watcherv1.Object) svcStatus {
	s := svcStatus{Status: plan.StatusOf(obj)}
	s.base.rv = obj.GetMeta().GetResourceVersion()
	for _, c := range obj.GetService().GetConditions() {
		s.base.conditions = append(s.base.conditions,
			conditionJSON(c.GetType(), c.GetStatus(), c.GetReason(), c.GetMessage(), c.GetObservedGeneration(), time.Unix(0, c.GetLastTransitionTime())))
	}
	return s
}

// condition is one entry of a Service's status.conditions as a merge patch
// writes it back (a struct, not a map: ipam keeps one per Service while
// its write is in flight and until the stream shows it).
type condition struct {
	Type               string `json:"type"`
	Status             string `json:"status"`
	Reason             string `json:"reason"`
	Message            string `json:"message"`
	ObservedGeneration int64  `json:"observedGeneration"`
	LastTransitionTime string `json:"lastTransitionTime"`
}

func conditionJSON(typ, status, reason, message string, observedGeneration int64, lastTransition time.Time) condition {
	return condition{Type: typ, Status: status, Reason: reason, Message: message,
		ObservedGeneration: observedGeneration, LastTransitionTime: lastTransition.UTC().Format(time.RFC3339)}
}

// current is the Service's status as far as this term knows, with the
// newest version it knows of: what it wrote, until the stream has caught up
// with that write.
func (w *worker) current(obj *watcherv1.Object) svcStatus {
	key := objkey.Of(obj)
	streamed := statusOf(obj)
	rv := obj.GetMeta().GetResourceVersion()
	e, behind := w.expect.Check(key, func(e expectation) expect.Seen {
		if caughtUp(rv, e.rv) {
			return expect.Done
		}
		return expect.Behind
	})
	if !behind {
		return streamed
	}
	s := e.status
	if s.base.rv != e.rv {
		s.base = version{rv: e.rv, conditions: streamed.base.conditions}
	}
	return s
}

// caughtUp reports whether the streamed resourceVersion is the written one
// or newer. resourceVersions are opaque, but the API server's are etcd
// revisions; when either does not parse only equality counts.
func caughtUp(streamed, written string) bool {
	if streamed == written {
		return true
	}
	s, err1 := strconv.ParseUint(streamed, 10, 64)
	w, err2 := strconv.ParseUint(written, 10, 64)
	return err1 == nil && err2 == nil && s > w
}

type ingressJSON struct {
	IP     string `json:"ip"`
	IPMode string `json:"ipMode"`
}

// write is one Service's write of a pass: status and allocated-from-pool
// annotation in one status-subresource patch.
type write struct {
	// ref names the Service (and the version decided on, for its Event).
	// A write outlives its pass, and two passes' writes may be under way:
	// keeping the decoded Service instead kept two batches of them alive.
	ref  *corev1.ObjectReference
	key  string
	cur  svcStatus
	want svcStatus
	// decideAgain: once written, the Service is decided again (its
	// addresses are released once the status no longer shows them;
	// plan.Write.DecideAgain).
	decideAgain bool
	event       *plan.Event
	// gateway names the Gateway the Service serves, which is told event too
	// (its controller owns its status; ipam writes only Events on it).
	gateway *corev1.ObjectReference
}

// writeService writes what differs of a Service's status and its
// allocated-from-pool annotation (and kube-vip.io/loadbalancerIPs, under
// --write-kube-vip-annotation) in one merge patch on the status
// subresource (statusPatch), and returns the resourceVersion after it. The
// API server keeps metadata.annotations from a Service status write (its
// status strategy resets spec, not metadata; TestOneWritePerAllocation
// checks it), so the annotation costs no second write. The write is
// conditional on the version the decision was based on: a Conflict means
// the Service changed since (another controller, the next leader after this
// term ended) and the caller must decide again from fresh data.
//
// The response is asked for as metadata only (PartialObjectMetadata) and
// only its resourceVersion and annotations are decoded: the conditions
// after a write conditional on a version are known without reading them
// (statusPatch returns them), and decoding the whole Service of every
// write was most of ipam's garbage during a cold start.
func (c *Controller) writeService(ctx context.Context, wr *write) (string, error) {
	ns, name := wr.ref.Namespace, wr.ref.Name
	if cond := wr.want.Cond; cond != nil {
		cond.LastTransition = transitionTime(wr.cur.Cond, cond, time.Now())
	}
	body, conditions := statusPatch(wr.cur, wr.want)
	if body == nil {
		wr.want.base = wr.cur.base
		return wr.cur.base.rv, nil
	}
	raw, err := c.client.CoreV1().RESTClient().Patch(types.MergePatchType).
		Namespace(ns).Resource("services").Name(name).SubResource("status").
		Param("fieldManager", convert.IPAMFieldManager).SetHeader("Accept", metaonly.Accept).
		Body(body).Do(ctx).Raw()
	if err != nil {
		return "", fmt.Errorf("patch status of Service %s/%s: %w", ns, name, err)
	}
	out, err := metaonly.Parse(raw)
	if err != nil {
		return "", fmt.Errorf("patch status of Service %s/%s: %w", ns, name, err)
	}
	if got := out.Annotations[allocator.AnnotationAllocatedFromPool]; got != wr.want.Pool {
		// An API server that ignores metadata in status writes would
		// otherwise make every pass write this Service again: fail, so the
		// retry backs off and the log says why.
		return "", fmt.Errorf("the API server did not keep annotation %s=%q from the status write of Service %s/%s (it shows %q)",
			allocator.AnnotationAllocatedFromPool, wr.want.Pool, ns, name, got)
	}
	wr.want.base = version{rv: out.ResourceVersion, conditions: conditions}
	return out.ResourceVersion, nil
}

// transitionTime is the lastTransitionTime of want: cur's while the status
// stays the same.
func transitionTime(cur, want *plan.Condition, now time.Time) time.Time {
	if cur != nil && cur.Status == want.Status && !cur.LastTransition.IsZero() {
		return cur.LastTransition.UTC()
	}
	return now.UTC()
}

// statusPatch is the JSON merge patch that turns cur into want (ingress,
// ipam's condition, the allocated-from-pool and kube-vip annotations), or nil when they do
// not differ, and the Service's conditions once it has applied. It is
// conditional on cur's version (metadata.resourceVersion) and carries the
// conditions of that version with only ipam's own replaced, removed or
// appended: a merge patch replaces the whole list, and the precondition
// makes sure that list is still the stored one. (A merge patch costs the API
// server much less than a strategic merge patch.)
func statusPatch(cur, want svcStatus) (body []byte, conditions []condition) {
	patch := map[string]any{}
	meta := map[string]any{}
	conditions = cur.base.conditions
	annotations := map[string]any{}
	if cur.Pool != want.Pool {
		annotations[allocator.AnnotationAllocatedFromPool] = nullIfEmpty(want.Pool) // null removes the annotation
	}
	// kube-vip's annotation goes with the status it names, under ipam's
	// field manager, which tells the watcher it is ipam's and no request.
	if cur.KubeVIP != want.KubeVIP {
		annotations[allocator.AnnotationKubeVIPLoadBalancerIPs] = nullIfEmpty(want.KubeVIP)
	}
	if len(annotations) > 0 {
		meta["annotations"] = annotations
	}
	statusChanged := cur.Foreign != want.Foreign || !slices.Equal(cur.Ingress, want.Ingress) || !plan.CondEqual(cur.Cond, want.Cond)
	if !statusChanged && len(meta) == 0 {
		return nil, conditions
	}
	if statusChanged {
		var ingress any // null clears the list
		if len(want.Ingress) > 0 {
			list := make([]ingressJSON, 0, len(want.Ingress))
			for _, ip := range want.Ingress {
				list = append(list, ingressJSON{IP: ip, IPMode: plan.IPMode})
			}
			ingress = list
		}
		status := map[string]any{"loadBalancer": map[string]any{"ingress": ingress}}
		if !plan.CondEqual(cur.Cond, want.Cond) {
			var conds any // null clears the list
			conditions = mergeCondition(cur.base.conditions, want.Cond)
			if len(conditions) > 0 {
				conds = conditions
			} else {
				conditions = nil
			}
			status["conditions"] = conds
		}
		patch["status"] = status
	}
	if cur.base.rv != "" {
		meta["resourceVersion"] = cur.base.rv
	}
	if len(meta) > 0 {
		patch["metadata"] = meta
	}
	body, _ = json.Marshal(patch)
	return body, conditions
}

// mergeCondition returns conditions with ipam's replaced by ours in place
// (appended when it had none, removed when ours is nil); every other
// condition is kept as it is, in its place.
func mergeCondition(conditions []condition, ours *plan.Condition) []condition {
	var mine *condition
	if ours != nil {
		c := conditionJSON(objects.ConditionType, ours.Status, ours.Reason, ours.Message, ours.ObservedGeneration, ours.LastTransition)
		mine = &c
	}
	out := make([]condition, 0, len(conditions)+1)
	for _, c := range conditions {
		if c.Type != objects.ConditionType {
			out = append(out, c)
		} else if mine != nil {
			out = append(out, *mine)
			mine = nil
		}
	}
	if mine != nil {
		out = append(out, *mine)
	}
	return out
}

func serviceRef(obj *watcherv1.Object) *corev1.ObjectReference {
	m := obj.GetMeta()
	return &corev1.ObjectReference{Kind: "Service", APIVersion: "v1", Namespace: m.GetNamespace(), Name: m.GetName(),
		UID: types.UID(m.GetUid()), ResourceVersion: m.GetResourceVersion()}
}

// gatewayRef names the streamed Gateway svc serves; nil for none.
func (w *worker) gatewayRef(svc *watcherv1.Object) *corev1.ObjectReference {
	link, ok, _ := objects.LinkedGateway(svc, w.c.cfg.GatewayServiceNamespaces)
	if !ok {
		return nil
	}
	gw, ok := w.store().Get(watcherv1.Kind_KIND_GATEWAY, link.Namespace, link.Name)
	if !ok {
		return nil
	}
	return &corev1.ObjectReference{Kind: "Gateway", APIVersion: objects.GatewayGroup + "/v1", Namespace: link.Namespace, Name: link.Name,
		UID: types.UID(gw.GetMeta().GetUid())}
}

func configMapRef(ns, name string) *corev1.ObjectReference {
	return &corev1.ObjectReference{Kind: "ConfigMap", APIVersion: "v1", Namespace: ns, Name: name}
}

func poolRef(obj *watcherv1.Object) *corev1.ObjectReference {
	m := obj.GetMeta()
	return &corev1.ObjectReference{Kind: "IPPool", APIVersion: "ipledger.io/v1alpha1", Name: m.GetName(), UID: types.UID(m.GetUid())}
}

// event records an Event with the term's recorder: Events are writes, and
// end with the term.
func (w *worker) event(ref *corev1.ObjectReference, typ, reason, msg string) {
	w.term.Recorder().Event(ref, typ, reason, msg)
}

func addrs(ips []netip.Addr) string {
	s := make([]string, len(ips))
	for i, ip := range ips {
		s[i] = ip.String()
	}
	return strings.Join(s, ", ")
}

// nullIfEmpty is v in a merge patch, where null removes the key.
func nullIfEmpty(v string) any {
	if v == "" {
		return nil
	}
	return v
}
