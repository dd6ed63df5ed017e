package informers

import (
	"fmt"
	"log/slog"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/ipledger/ipledger/pkg/convert"
	watcherv1 "github.com/ipledger/ipledger/proto/ipledger/watcher/v1"
)

func TestStripManagedFields(t *testing.T) {
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "s",
		ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kubectl"}},
		Annotations: map[string]string{"kubectl.kubernetes.io/last-applied-configuration": "{}", "ipledger.io/loadBalancerIPs": "10.0.0.1",
			"metallb.io/address-pool": "p"}}}
	out, err := StripManagedFields(svc)
	if err != nil {
		t.Fatal(err)
	}
	got := out.(*corev1.Service)
	if got.ManagedFields != nil {
		t.Error("managedFields kept")
	}
	if len(got.Annotations) != 2 || got.Annotations["ipledger.io/loadBalancerIPs"] != "10.0.0.1" || got.Annotations["metallb.io/address-pool"] != "p" {
		t.Errorf("annotations %v, want only the ipledger.io/ and metallb.io/ ones", got.Annotations)
	}
}

// TestStripManagedFieldsBounds: what the informer caches is bounded before
// anything else sees it: an unknown annotation of 200 KB under ipledger.io/
// is dropped, a carried one over the limit becomes its marker, and labels
// over the limit become the one marker label.
func TestStripManagedFieldsBounds(t *testing.T) {
	big := strings.Repeat("x", 200_000)
	labels := map[string]string{}
	for i := 0; convert.LabelBytes(labels) <= convert.MaxLabelBytes; i++ {
		labels[fmt.Sprintf("example.com/l-%05d", i)] = strings.Repeat("v", 63)
	}
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "s", Labels: labels,
		Annotations: map[string]string{"ipledger.io/unknown": big, "ipledger.io/allow-shared-ip": big}}}
	out, _ := StripManagedFields(svc)
	got := out.(*corev1.Service)
	if len(got.Annotations) != 1 || got.Annotations["ipledger.io/allow-shared-ip"] != convert.TruncatedAnnotation(big) {
		t.Errorf("annotations %.300v, want only ipledger.io/allow-shared-ip's marker", got.Annotations)
	}
	if n, ok := convert.LabelsTruncated(got.Labels); !ok || n != convert.LabelBytes(labels) {
		t.Errorf("labels %.300v, want the marker of %d bytes", got.Labels, convert.LabelBytes(labels))
	}
}

// TestTransformCachesTheEncodedObject: what the informer caches is the
// store's encoded object, keyed and compared like the API object was (the
// cache must never hold the API object: that was most of the watcher's
// memory); transforming it again is a no-op, and an object that does not
// convert is counted and left for the handler to skip.
func TestTransformCachesTheEncodedObject(t *testing.T) {
	m := &metrics{convertErr: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "e"}, []string{"kind"})}
	h := &handler{kind: watcherv1.Kind_KIND_SERVICE, log: slog.New(slog.DiscardHandler), m: m}
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "s", ResourceVersion: "7",
		Labels: map[string]string{"app": "a"}, ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kubectl"}}}}
	out, err := h.transform(svc)
	if err != nil {
		t.Fatal(err)
	}
	c, ok := out.(cached)
	if !ok {
		t.Fatalf("cached %T, want the encoded object", out)
	}
	if key, err := cache.MetaNamespaceKeyFunc(out); err != nil || key != "ns/s" {
		t.Errorf("cache key %q (%v), want ns/s", key, err)
	}
	if a, err := meta.Accessor(out); err != nil || a.GetResourceVersion() != "7" {
		t.Errorf("resourceVersion through meta.Accessor: %v, want 7", err)
	}
	if c.Key() != "KIND_SERVICE/ns/s" || c.Labels()["app"] != "a" {
		t.Errorf("store object %s with labels %v", c.Key(), c.Labels())
	}
	if again, _ := h.transform(out); again != out {
		t.Error("transforming a cached object again changed it")
	}

	odd := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "x"}}
	if out, _ := h.transform(odd); out != odd {
		t.Errorf("an object that does not convert became %T, want it cached as it came", out)
	}
	if got := testutil.ToFloat64(m.convertErr.WithLabelValues("KIND_SERVICE")); got != 1 {
		t.Errorf("convert errors %v, want 1", got)
	}
}
