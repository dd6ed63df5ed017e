package integration

import (
	"context"
	"fmt"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/ipledger/ipledger/lab/testenv"
)

// serviceWrites records every version of one Service the API server stores
// from rv on.
type serviceWrites struct {
	mu       sync.Mutex
	versions []*corev1.Service
}

func (h *harness) watchWrites(name, rv string) *serviceWrites {
	h.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	w, err := h.env.Client.CoreV1().Services(h.ns).Watch(ctx, metav1.ListOptions{
		FieldSelector: "metadata.name=" + name, ResourceVersion: rv,
	})
	if err != nil {
		h.t.Fatal(err)
	}
	sw := &serviceWrites{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ev := range w.ResultChan() {
			switch ev.Type {
			case watch.Modified:
				sw.mu.Lock()
				sw.versions = append(sw.versions, ev.Object.(*corev1.Service))
				sw.mu.Unlock()
			case watch.Error:
				if ctx.Err() == nil {
					h.t.Errorf("watch of Service %s: %v", name, ev.Object)
				}
			}
		}
	}()
	h.t.Cleanup(func() { cancel(); w.Stop(); <-done })
	return sw
}

func (sw *serviceWrites) list() []*corev1.Service {
	sw.mu.Lock()
	defer sw.mu.Unlock()
	return append([]*corev1.Service(nil), sw.versions...)
}

func describe(s *corev1.Service) string {
	return fmt.Sprintf("rv %s ingress %v conditions %d pool %q", s.ResourceVersion, s.Status.LoadBalancer.Ingress,
		len(s.Status.Conditions), s.Annotations["ipledger.io/allocated-from-pool"])
}

// One allocation costs exactly one Service write: the ingress, the condition
// and the allocated-from-pool annotation arrive in the same version, and
// neither a later pass nor a restart writes the Service again. Releasing it
// clears all three in one write too.
func TestOneWritePerAllocation(t *testing.T) {
	h := newHarness(t)
	ctx := context.Background()
	h.pool("tone-one", "10.77.9.1/32")
	a := h.service("a", map[string]string{"team": "web"})
	writes := h.watchWrites("a", a.ResourceVersion)
	r := h.start("ipam-0")
	h.expect(wait, map[string]string{"a": "10.77.9.1"})
	testenv.Eventually(t, wait, func() error {
		if len(writes.list()) == 0 {
			return fmt.Errorf("the watch has not shown ipam's write yet")
		}
		return nil
	})
	first := writes.list()[0]
	if len(first.Status.LoadBalancer.Ingress) != 1 || len(first.Status.Conditions) != 1 ||
		first.Annotations["ipledger.io/allocated-from-pool"] != "tone-one" || first.Annotations["team"] != "web" {
		t.Fatalf("ipam's first write is %s, annotations %v: want the IP, the condition and the pool annotation together", describe(first), first.Annotations)
	}

	// A restart re-decides a and writes nothing: prove the new term has
	// passed over every Service by waiting for one created after it.
	// The new term verifies a in b's pass at the latest (a holder tops up
	// a batch); c's answer then comes from a later pass, whose write went
	// out after any the verify of a could have made.
	r = h.restart(r, "ipam-1")
	h.service("b", nil)
	h.expect(wait, map[string]string{"a": "10.77.9.1", "b": "PoolExhausted"})
	h.service("c", nil)
	h.expect(wait, map[string]string{"c": "PoolExhausted"})
	if got := writes.list(); len(got) != 1 {
		for _, s := range got {
			t.Log(describe(s))
		}
		t.Fatalf("a was written %d times, want 1", len(got))
	}

	// a becomes a ClusterIP Service: one write of ours (the spec), then one
	// of ipam clearing the status and the annotation together.
	patch := []byte(`{"spec":{"type":"ClusterIP","loadBalancerClass":null,"externalTrafficPolicy":null,"allocateLoadBalancerNodePorts":null,"ports":[{"name":"http","port":80,"targetPort":8080,"protocol":"TCP","nodePort":null}]}}`)
	if _, err := h.env.Client.CoreV1().Services(h.ns).Patch(ctx, "a", types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	h.expect(wait, map[string]string{"b": "10.77.9.1"})
	h.service("d", nil) // the barrier again: a's writes went out before d's answer
	h.expect(wait, map[string]string{"d": "PoolExhausted"})
	got := writes.list()
	if len(got) != 3 {
		for _, s := range got {
			t.Log(describe(s))
		}
		t.Fatalf("a was written %d times, want 3 (allocation, spec change, release)", len(got))
	}
	if last := got[2]; len(last.Status.LoadBalancer.Ingress) != 0 || len(last.Status.Conditions) != 0 ||
		last.Annotations["ipledger.io/allocated-from-pool"] != "" || last.Annotations["team"] != "web" {
		t.Fatalf("ipam's release write is %s, annotations %v: want status and pool annotation cleared together", describe(last), last.Annotations)
	}
	_ = r
}

// The stream's echo of ipam's own status write is not decided again: each
// Service created while ipam serves is decided exactly once, while a status
// written by someone else (the wipe of TestWipedStatusRestoredFromLedger) is.
// The last Service is the barrier: once it holds its address the stream has
// brought the earlier ones' echoes, and their marks were taken by its pass.
func TestOwnWriteEchoIsNotDecidedAgain(t *testing.T) {
	h := newHarness(t)
	h.pool("techo-"+h.lease[len("ipam-"):], "10.77.17.0/29")
	h.service("s0", nil)
	r := h.start("ipam-0")
	h.expect(wait, map[string]string{"s0": "10.77.17.0"})
	before := testenv.MetricValue(t, r.reg, "ipledger_ipam_services_decided_total", nil)
	want := map[string]string{"s0": "10.77.17.0"}
	for i := 1; i <= 4; i++ {
		name := fmt.Sprintf("s%d", i)
		h.service(name, nil)
		want[name] = fmt.Sprintf("10.77.17.%d", i)
		h.expect(wait, want)
	}
	if got := testenv.MetricValue(t, r.reg, "ipledger_ipam_services_decided_total", nil) - before; got != 4 {
		t.Errorf("4 Services created one after another were decided %v times, want 4: the echoes of ipam's own writes were decided again", got)
	}
}
