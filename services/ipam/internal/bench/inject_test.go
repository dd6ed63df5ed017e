package bench

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"net/netip"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"

	"github.com/ipledger/ipledger/lab/testenv"
)

// injectAbove is the size from which createServices writes the Services
// into etcd (injectServices) instead of creating them through the API
// server, unless IPLEDGER_BENCH_SETUP says "api" or "etcd".
const injectAbove = 20000

// injectServices makes n Services like those createServices makes, written
// straight into etcd. kube-apiserver 1.37 lists every IPAddress object after
// each ClusterIP it allocates (ipallocator.Allocator.Used, for a metric),
// under the allocator's lock, so creating Services through it slows as they
// accumulate: 156/s at first, 16/s at 30,000 (BENCHMARKS.md), hours for
// 100,000. One Service is created through the API server as the template;
// every other is its stored form with name, uid, ClusterIP and creation
// time changed (the same bytes an API create stores, managed fields
// included), written with the IPAddress object that holds its ClusterIP in
// one etcd transaction that fails if either key exists. The API server's
// watch cache, and so every watcher, sees them as created; its allocator
// sees their ClusterIPs as taken.
func injectServices(b *testing.B, env *testenv.Env, client kubernetes.Interface, ns, class string, n int) *lbServices {
	b.Helper()
	ctx := context.Background()
	start := time.Now()
	s := &lbServices{client: client, ns: ns, objs: make([]*corev1.Service, n)}
	tmpl, err := client.CoreV1().Services(ns).Create(ctx, lbService(ns, "s00000", class), metav1.CreateOptions{})
	if err != nil {
		b.Fatal(err)
	}
	s.objs[0] = tmpl
	addr, err := client.NetworkingV1().IPAddresses().Get(ctx, tmpl.Spec.ClusterIP, metav1.GetOptions{})
	if err != nil {
		b.Fatalf("the template's IPAddress %s: %v", tmpl.Spec.ClusterIP, err)
	}
	svcEnc, addrEnc := storageEncoder(corev1.SchemeGroupVersion), storageEncoder(schema.GroupVersion{Group: "networking.k8s.io", Version: "v1"})
	etcd := &etcdGateway{url: env.CP.EtcdURL}
	// ClusterIPs from 10.104.0.0 on, inside the control plane's
	// 10.96.0.0/12; one the API server gave out already is skipped.
	var next atomic.Uint32
	first := netip.MustParseAddr("10.104.0.0").As4()
	base := uint32(first[0])<<24 | uint32(first[1])<<16 | uint32(first[2])<<8 | uint32(first[3])
	if err := parallel(n-1, 32, func(j int) error {
		i := j + 1
		svc := tmpl.DeepCopy()
		svc.Name, svc.UID, svc.ResourceVersion = fmt.Sprintf("s%05d", i), uuid.NewUUID(), ""
		svc.CreationTimestamp = metav1.Now()
		for k := range svc.ManagedFields {
			svc.ManagedFields[k].Time = &svc.CreationTimestamp
		}
		ip := addr.DeepCopy()
		ip.UID, ip.ResourceVersion, ip.CreationTimestamp = uuid.NewUUID(), "", svc.CreationTimestamp
		ip.Spec.ParentRef.Name = svc.Name
		for k := range ip.ManagedFields {
			ip.ManagedFields[k].Time = &svc.CreationTimestamp
		}
		for tries := 0; ; tries++ {
			if tries == 100 {
				return fmt.Errorf("Service %s: 100 ClusterIPs from 10.104.0.0 on were taken", svc.Name)
			}
			o := base + next.Add(1) - 1
			clusterIP := netip.AddrFrom4([4]byte{byte(o >> 24), byte(o >> 16), byte(o >> 8), byte(o)}).String()
			svc.Spec.ClusterIP, svc.Spec.ClusterIPs, ip.Name = clusterIP, []string{clusterIP}, clusterIP
			sb, err := runtime.Encode(svcEnc, svc)
			if err != nil {
				return err
			}
			ab, err := runtime.Encode(addrEnc, ip)
			if err != nil {
				return err
			}
			rev, ok, err := etcd.createBoth(ctx, "/registry/services/specs/"+ns+"/"+svc.Name, sb, "/registry/ipaddresses/"+clusterIP, ab)
			if err != nil {
				return fmt.Errorf("Service %s: %w", svc.Name, err)
			}
			if ok {
				svc.ResourceVersion = strconv.FormatInt(rev, 10)
				s.objs[i] = svc
				return nil
			}
		}
	}); err != nil {
		b.Fatal(err)
	}
	b.Logf("created %d Services in %s (written into etcd, template made by the API server)", n, time.Since(start).Round(time.Millisecond))
	return s
}

// storageEncoder encodes objects of gv as the control plane stores them
// (--storage-media-type protobuf).
func storageEncoder(gv schema.GroupVersion) runtime.Encoder {
	info, ok := runtime.SerializerInfoForMediaType(scheme.Codecs.SupportedMediaTypes(), runtime.ContentTypeProtobuf)
	if !ok {
		panic("no protobuf serializer")
	}
	return scheme.Codecs.EncoderForVersion(info.Serializer, gv)
}

// etcdGateway speaks to etcd's JSON gateway (/v3/kv/...), which needs no
// etcd client module.
type etcdGateway struct{ url string }

// createBoth puts both keys in one transaction if neither exists, and
// returns the revision it wrote at and whether it did.
func (g *etcdGateway) createBoth(ctx context.Context, k1 string, v1 []byte, k2 string, v2 []byte) (int64, bool, error) {
	b64 := func(b []byte) string { return base64.StdEncoding.EncodeToString(b) }
	absent := func(k string) map[string]any {
		return map[string]any{"key": b64([]byte(k)), "target": "CREATE", "result": "EQUAL", "create_revision": "0"}
	}
	put := func(k string, v []byte) map[string]any {
		return map[string]any{"request_put": map[string]any{"key": b64([]byte(k)), "value": b64(v)}}
	}
	body, _ := json.Marshal(map[string]any{
		"compare": []any{absent(k1), absent(k2)},
		"success": []any{put(k1, v1), put(k2, v2)},
	})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, g.url+"/v3/kv/txn", bytes.NewReader(body))
	if err != nil {
		return 0, false, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, false, err
	}
	defer resp.Body.Close()
	var out struct {
		Header    struct{ Revision string } `json:"header"`
		Succeeded bool                      `json:"succeeded"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil || resp.StatusCode != http.StatusOK {
		return 0, false, fmt.Errorf("etcd txn: HTTP %d: %v", resp.StatusCode, err)
	}
	rev, err := strconv.ParseInt(out.Header.Revision, 10, 64)
	return rev, out.Succeeded, err
}
