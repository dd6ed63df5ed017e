package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/ipledger/ipledger/lab/testenv"
	"github.com/ipledger/ipledger/services/ipam/internal/allocator"
)

// lbServices are a benchmark's N LoadBalancer Services of one class, with
// the objects the benchmark last wrote, so that a floor writes without
// reading first.
type lbServices struct {
	client kubernetes.Interface
	ns     string
	objs   []*corev1.Service
}

// createServices creates n LoadBalancer Services of class in ns from 32
// workers, with no node ports (none of the controllers measured needs them,
// and allocating them would slow creation down). Above injectAbove, or when
// IPLEDGER_BENCH_SETUP=etcd, they are written into etcd (injectServices).
func createServices(b *testing.B, env *testenv.Env, client kubernetes.Interface, ns, class string, n int) *lbServices {
	b.Helper()
	switch setup := os.Getenv("IPLEDGER_BENCH_SETUP"); {
	case setup == "etcd", setup != "api" && n > injectAbove:
		return injectServices(b, env, client, ns, class, n)
	}
	s := &lbServices{client: client, ns: ns, objs: make([]*corev1.Service, n)}
	start := time.Now()
	if err := parallel(n, 32, func(i int) error {
		name := fmt.Sprintf("s%05d", i)
		return retryLoaded(func() error {
			out, err := client.CoreV1().Services(ns).Create(context.Background(), lbService(ns, name, class), metav1.CreateOptions{})
			if apierrors.IsAlreadyExists(err) {
				// An earlier try timed out after the API server had created it.
				out, err = client.CoreV1().Services(ns).Get(context.Background(), name, metav1.GetOptions{})
			}
			s.objs[i] = out
			return err
		})
	}); err != nil {
		b.Fatal(err)
	}
	b.Logf("created %d Services in %s", n, time.Since(start).Round(time.Millisecond))
	return s
}

// setStatus writes status.loadBalancer.ingress of every Service — ip(i),
// or none where ip(i) is "" — with one UpdateStatus per Service from
// workers client workers, and returns how long that took: the floor a
// controller's status writes are compared with.
func (s *lbServices) setStatus(b *testing.B, workers int, ip func(i int) string) time.Duration {
	b.Helper()
	start := time.Now()
	if err := parallel(len(s.objs), workers, func(i int) error {
		return retryLoaded(func() error {
			svc := s.objs[i]
			svc.Status = corev1.ServiceStatus{}
			if v := ip(i); v != "" {
				vip := corev1.LoadBalancerIPModeVIP
				svc.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: v, IPMode: &vip}}
			} else {
				// The Service as it was created: without ipam's annotation.
				delete(svc.Annotations, allocator.AnnotationAllocatedFromPool)
			}
			out, err := s.client.CoreV1().Services(s.ns).UpdateStatus(context.Background(), svc, metav1.UpdateOptions{})
			if apierrors.IsConflict(err) {
				// An earlier try timed out after the API server had written
				// it: take the new resourceVersion and write again.
				if fresh, gerr := s.client.CoreV1().Services(s.ns).Get(context.Background(), svc.Name, metav1.GetOptions{}); gerr == nil {
					s.objs[i] = fresh
				}
				return err
			}
			if err == nil {
				s.objs[i] = out
			}
			return err
		})
	}); err != nil {
		b.Fatal(err)
	}
	return time.Since(start)
}

// floors measures both floors — every status written from 1 worker, then
// from 32 — and leaves every status empty again.
func (s *lbServices) floors(b *testing.B) (one, thirtyTwo time.Duration) {
	b.Helper()
	ipOf := func(base int) func(i int) string {
		return func(i int) string { return fmt.Sprintf("10.%d.%d.%d", base, i/250, i%250+1) }
	}
	one = s.setStatus(b, 1, ipOf(200))
	thirtyTwo = s.setStatus(b, 32, ipOf(201))
	s.setStatus(b, 32, func(int) string { return "" })
	return one, thirtyTwo
}

// retryLoaded runs write until it succeeds, again (up to 5 tries) when the
// API server timed out, was overloaded or saw a conflict: with 10,000
// objects on 2 shared cores a write now and then times out, and one such
// write should not void a 30-minute run. The floors include the retries'
// time.
func retryLoaded(write func() error) error {
	var err error
	for range 5 {
		err = write()
		if err == nil || !(apierrors.IsTimeout(err) || apierrors.IsServerTimeout(err) || apierrors.IsTooManyRequests(err) ||
			apierrors.IsConflict(err) || apierrors.IsInternalError(err)) {
			return err
		}
	}
	return err
}

// wipe empties every Service's status after a controller wrote it (the
// objects are read again first: the controller moved their
// resourceVersions).
func (s *lbServices) wipe(b *testing.B) {
	b.Helper()
	s.reread(b)
	start := time.Now()
	s.setStatus(b, 32, func(int) string { return "" })
	b.Logf("wiped %d statuses in %s", len(s.objs), time.Since(start).Round(time.Millisecond))
}

// reread reads every Service again: a controller's writes made the kept
// versions stale.
func (s *lbServices) reread(b *testing.B) {
	b.Helper()
	list, err := s.client.CoreV1().Services(s.ns).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		b.Fatal(err)
	}
	byName := make(map[string]*corev1.Service, len(list.Items))
	for i := range list.Items {
		byName[list.Items[i].Name] = &list.Items[i]
	}
	for i, svc := range s.objs {
		fresh, ok := byName[svc.Name]
		if !ok {
			b.Fatalf("Service %s/%s is gone", s.ns, svc.Name)
		}
		s.objs[i] = fresh
	}
}

// benchClient is the benchmark's own client, rate limits raised like ipam's.
func benchClient(env *testenv.Env) kubernetes.Interface {
	cfg := rest.CopyConfig(env.Config)
	cfg.QPS, cfg.Burst = 5000, 10000
	return kubernetes.NewForConfigOrDie(cfg)
}

// ipamStatusPatch is the status write ipam makes for a Service at
// resourceVersion rv and generation gen given ip from pool: one JSON merge
// patch of the status subresource carrying the ingress, ipam's condition
// and the allocated-from-pool annotation, conditional on rv.
func ipamStatusPatch(rv string, gen int64, ip, pool string) []byte {
	body, _ := json.Marshal(map[string]any{
		"metadata": map[string]any{"resourceVersion": rv,
			"annotations": map[string]any{allocator.AnnotationAllocatedFromPool: pool}},
		"status": map[string]any{
			"loadBalancer": map[string]any{"ingress": []any{map[string]any{"ip": ip, "ipMode": "VIP"}}},
			"conditions": []any{map[string]any{"type": "ipledger.io/AddressAllocated", "status": "True", "reason": "Allocated",
				"message": "Allocated " + ip + " from pool " + pool, "observedGeneration": gen,
				"lastTransitionTime": time.Now().UTC().Format(time.RFC3339)}},
		},
	})
	return body
}

// lbService is a benchmark's LoadBalancer Service of class: one port, no
// node ports (none of the controllers measured needs them, and allocating
// them would slow creation down).
func lbService(ns, name, class string) *corev1.Service {
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, LoadBalancerClass: &class, AllocateLoadBalancerNodePorts: new(false),
			Ports: []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(80)}}},
	}
}
