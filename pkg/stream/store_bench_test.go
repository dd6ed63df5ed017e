package stream

import (
	"fmt"
	"runtime"
	"testing"

	"github.com/ipledger/ipledger/lab/heapstat"
	watcherv1 "github.com/ipledger/ipledger/proto/ipledger/watcher/v1"
)

// BenchmarkStoreHeldBytes weighs what the store keeps per Service at
// 100,000 Services of the shape ipam's benchmarks create (one port, one
// address, ipam's condition) with ipam's one attribute, the creation time:
// B/Service in all, encoding-B/Service the encodings alone (their bytes as
// allocated), and the rest is keys, the namespace index and the attribute.
func BenchmarkStoreHeldBytes(b *testing.B) {
	const n = 100000
	objs := make([]*watcherv1.Object, n)
	for i := range objs {
		objs[i] = &watcherv1.Object{Kind: watcherv1.Kind_KIND_SERVICE,
			Meta: &watcherv1.ObjectMeta{Namespace: fmt.Sprintf("bench-%d", i%100), Name: fmt.Sprintf("svc-%06d", i),
				Uid: fmt.Sprintf("0f8fad5b-d9cb-469f-a165-%012d", i), ResourceVersion: fmt.Sprint(1000000 + i), CreationTimestamp: int64(i) * 1e9,
				Annotations: map[string]string{"ipledger.io/allocated-from-pool": "bench"}},
			Body: &watcherv1.Object_Service{Service: &watcherv1.Service{Type: "LoadBalancer", ClusterIps: []string{fmt.Sprintf("10.104.%d.%d", i/250, i%250)},
				LoadBalancerClass: "bench.ipledger.io/lb", ExternalTrafficPolicy: "Cluster", IpFamilyPolicy: "SingleStack", IpFamilies: []string{"IPv4"},
				Ports:   []*watcherv1.ServicePort{{Protocol: "TCP", Port: 80, TargetPortNumber: 80}},
				Ingress: []*watcherv1.LoadBalancerIngress{{Ip: fmt.Sprintf("10.96.%d.%d", i/250, i%250), IpMode: "VIP"}},
				Conditions: []*watcherv1.Condition{{Type: "ipledger.io/AddressAllocated", Status: "True", Reason: "Allocated",
					Message: fmt.Sprintf("allocated 10.96.%d.%d from pool bench", i/250, i%250), ObservedGeneration: 1, LastTransitionTime: int64(i) * 1e9}}}}}
	}
	for b.Loop() {
		before := heapstat.Live()
		s := newStore()
		s.AddAttribute(watcherv1.Kind_KIND_SERVICE, "created", func(o *watcherv1.Object) any { return o.GetMeta().GetCreationTimestamp() })
		var encoded int
		for _, o := range objs {
			s.put(o, nil)
		}
		for _, enc := range s.kinds[watcherv1.Kind_KIND_SERVICE].objs {
			encoded += cap(enc)
		}
		after := heapstat.Live()
		runtime.KeepAlive(s)
		b.ReportMetric(heapstat.PerItem(before, after, n), "B/Service")
		b.ReportMetric(float64(encoded)/n, "encoding-B/Service")
	}
}
