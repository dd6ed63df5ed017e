package controller

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	watcherv1 "github.com/ipledger/ipledger/proto/ipledger/watcher/v1"
	"github.com/ipledger/ipledger/services/ipam/internal/allocator"
	"github.com/ipledger/ipledger/services/ipam/internal/objects"
)

// ipMode is written with every ingress entry: the API server defaults it, and
// leaving it out would make every second pass see a difference.
const ipMode = "VIP"

// condition is the ipledger.io/AddressAllocated condition.
type condition struct {
	status, reason, message string
	observedGeneration      int64
	lastTransition          time.Time
}

// svcStatus is the part of a Service ipam owns.
type svcStatus struct {
	ingress []string // IPs, in order; every entry has ipMode VIP
	// foreign is true when the ingress has entries ipam would not write
	// (hostnames, another ipMode): they must be rewritten.
	foreign bool
	cond    *condition
	pool    string // ipledger.io/allocated-from-pool
}

// expectation is a status this term wrote and the resourceVersion the API
// server returned, kept until the stream shows that version or a newer one.
type expectation struct {
	rv     string
	status svcStatus
	at     time.Time
}

func statusOf(obj *watcherv1.Object) svcStatus {
	var s svcStatus
	svc := obj.GetService()
	for _, in := range svc.GetIngress() {
		if in.GetIp() == "" || in.GetHostname() != "" || (in.GetIpMode() != "" && in.GetIpMode() != ipMode) {
			s.foreign = true
		}
		if in.GetIp() != "" {
			s.ingress = append(s.ingress, in.GetIp())
		}
	}
	for _, c := range svc.GetConditions() {
		if c.GetType() == objects.ConditionType {
			s.cond = &condition{status: c.GetStatus(), reason: c.GetReason(), message: c.GetMessage(),
				observedGeneration: c.GetObservedGeneration(), lastTransition: time.Unix(0, c.GetLastTransitionTime())}
		}
	}
	s.pool = obj.GetMeta().GetAnnotations()[allocator.AnnotationAllocatedFromPool]
	return s
}

// current is the Service's status as far as this term knows: what it wrote,
// until the stream has caught up with that write.
func (w *worker) current(obj *watcherv1.Object) svcStatus {
	key := objects.Key(obj)
	streamed := statusOf(obj)
	e, ok := w.expect[key]
	if !ok {
		return streamed
	}
	if caughtUp(obj.GetMeta().GetResourceVersion(), e.rv) || time.Since(e.at) > 2*time.Minute {
		delete(w.expect, key)
		return streamed
	}
	return e.status
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

func (s svcStatus) showsAny(held []allocator.Allocation) bool {
	for _, h := range held {
		if slices.Contains(s.ingress, h.IP.String()) {
			return true
		}
	}
	return false
}

// without is s with held's IPs, our condition and annotation removed.
func (s svcStatus) without(held []allocator.Allocation) svcStatus {
	out := svcStatus{foreign: s.foreign}
	for _, ip := range s.ingress {
		if !slices.ContainsFunc(held, func(h allocator.Allocation) bool { return h.IP.String() == ip }) {
			out.ingress = append(out.ingress, ip)
		}
	}
	return out
}

// equal compares what ipam writes: ingress, condition (not its transition
// time) and annotation.
func (s svcStatus) equal(o svcStatus) bool {
	if s.foreign != o.foreign || !slices.Equal(s.ingress, o.ingress) || s.pool != o.pool {
		return false
	}
	if (s.cond == nil) != (o.cond == nil) {
		return false
	}
	if s.cond == nil {
		return true
	}
	a, b := s.cond, o.cond
	return a.status == b.status && a.reason == b.reason && a.message == b.message && a.observedGeneration == b.observedGeneration
}

type ingressJSON struct {
	IP     string `json:"ip"`
	IPMode string `json:"ipMode"`
}

// writeService writes what differs of a Service's status and its
// allocated-from-pool annotation in one merge patch on the status
// subresource, and returns the resourceVersion after it. The API server keeps
// metadata.annotations from a Service status write (its status strategy
// resets spec, not metadata; TestOneWritePerAllocation checks it), so the
// annotation costs no second write.
func (c *Controller) writeService(ctx context.Context, wr *write) (string, error) {
	ns, name := wr.obj.GetMeta().GetNamespace(), wr.obj.GetMeta().GetName()
	rv := wr.obj.GetMeta().GetResourceVersion()
	patch := map[string]any{}
	meta := map[string]any{}
	guard := wr.release
	if wr.cur.pool != wr.want.pool {
		var pool any // null removes the annotation
		if wr.want.pool != "" {
			pool = wr.want.pool
		}
		meta["annotations"] = map[string]any{allocator.AnnotationAllocatedFromPool: pool}
	}
	statusChanged := wr.cur.foreign != wr.want.foreign || !slices.Equal(wr.cur.ingress, wr.want.ingress) || !condEqual(wr.cur.cond, wr.want.cond)
	if statusChanged {
		var ingress any // null clears the list
		if len(wr.want.ingress) > 0 {
			list := make([]ingressJSON, 0, len(wr.want.ingress))
			for _, ip := range wr.want.ingress {
				list = append(list, ingressJSON{IP: ip, IPMode: ipMode})
			}
			ingress = list
		}
		status := map[string]any{"loadBalancer": map[string]any{"ingress": ingress}}
		// A JSON merge patch replaces the conditions list, so it carries the
		// other controllers' conditions as streamed, guarded by the
		// resourceVersion they were read at. (A merge patch costs the API
		// server much less than a strategic merge patch.)
		var conds []map[string]any
		for _, c := range wr.obj.GetService().GetConditions() {
			if c.GetType() == objects.ConditionType {
				continue
			}
			conds = append(conds, map[string]any{
				"type": c.GetType(), "status": c.GetStatus(), "reason": c.GetReason(), "message": c.GetMessage(),
				"observedGeneration": c.GetObservedGeneration(),
				"lastTransitionTime": time.Unix(0, c.GetLastTransitionTime()).UTC().Format(time.RFC3339),
			})
		}
		guard = guard || len(conds) > 0
		if cond := wr.want.cond; cond != nil {
			ltt := time.Now().UTC()
			if wr.cur.cond != nil && wr.cur.cond.status == cond.status && !wr.cur.cond.lastTransition.IsZero() {
				ltt = wr.cur.cond.lastTransition.UTC()
			}
			cond.lastTransition = ltt
			conds = append(conds, map[string]any{
				"type": objects.ConditionType, "status": cond.status, "reason": cond.reason, "message": cond.message,
				"observedGeneration": cond.observedGeneration, "lastTransitionTime": ltt.Format(time.RFC3339),
			})
		}
		switch {
		case len(conds) > 0:
			status["conditions"] = conds
		case wr.cur.cond != nil:
			status["conditions"] = nil
		}
		patch["status"] = status
	}
	if !statusChanged && len(meta) == 0 {
		return rv, nil
	}
	if guard {
		// Only replace what we saw: another writer's newer conditions
		// (or, on release, another controller's ingress) make this write
		// fail and be decided again.
		meta["resourceVersion"] = rv
	}
	if len(meta) > 0 {
		patch["metadata"] = meta
	}
	body, _ := json.Marshal(patch)
	out, err := c.client.CoreV1().Services(ns).Patch(ctx, name, types.MergePatchType, body, metav1.PatchOptions{FieldManager: "ipledger-ipam"}, "status")
	if err != nil {
		return "", fmt.Errorf("patch status of Service %s/%s: %w", ns, name, err)
	}
	if got := out.Annotations[allocator.AnnotationAllocatedFromPool]; got != wr.want.pool {
		// An API server that ignores metadata in status writes would
		// otherwise make every pass write this Service again: fail, so the
		// retry backs off and the log says why.
		return "", fmt.Errorf("the API server did not keep annotation %s=%q from the status write of Service %s/%s (it shows %q)",
			allocator.AnnotationAllocatedFromPool, wr.want.pool, ns, name, got)
	}
	return out.ResourceVersion, nil
}

func condEqual(a, b *condition) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.status == b.status && a.reason == b.reason && a.message == b.message && a.observedGeneration == b.observedGeneration
}

func serviceRef(obj *watcherv1.Object) *corev1.ObjectReference {
	m := obj.GetMeta()
	return &corev1.ObjectReference{Kind: "Service", APIVersion: "v1", Namespace: m.GetNamespace(), Name: m.GetName(),
		UID: types.UID(m.GetUid()), ResourceVersion: m.GetResourceVersion()}
}

func configMapRef(ns, name string) *corev1.ObjectReference {
	return &corev1.ObjectReference{Kind: "ConfigMap", APIVersion: "v1", Namespace: ns, Name: name}
}

func poolRef(obj *watcherv1.Object) *corev1.ObjectReference {
	m := obj.GetMeta()
	return &corev1.ObjectReference{Kind: "IPPool", APIVersion: "ipledger.io/v1alpha1", Name: m.GetName(), UID: types.UID(m.GetUid())}
}

func (c *Controller) event(ref *corev1.ObjectReference, typ, reason, msg string) {
	if c.recorder != nil {
		c.recorder.Event(ref, typ, reason, msg)
	}
}

