package stream

import (
	"bytes"
	"compress/flate"
	"fmt"
	"io"
	"testing"
	"time"

	"github.com/klauspost/compress/zstd"

	watcherv1 "github.com/ipledger/ipledger/proto/ipledger/watcher/v1"
)

func TestZZCompress(t *testing.T) {
	const n = 10000
	mk := func(i int) *watcherv1.Object {
		return &watcherv1.Object{Kind: watcherv1.Kind_KIND_SERVICE,
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
	dict := encode(mk(987654))
	var buf bytes.Buffer
	w, _ := flate.NewWriterDict(&buf, flate.BestCompression, dict)
	var raw, comp int
	start := time.Now()
	var outs [][]byte
	for i := range n {
		e := encode(mk(i))
		raw += len(e)
		buf.Reset()
		w.Reset(&buf)
		w.Write(e)
		w.Close()
		comp += buf.Len()
		outs = append(outs, bytes.Clone(buf.Bytes()))
	}
	el := time.Since(start)
	start = time.Now()
	r := flate.NewReaderDict(bytes.NewReader(nil), dict)
	var out bytes.Buffer
	for _, c := range outs {
		r.(flate.Resetter).Reset(bytes.NewReader(c), dict)
		out.Reset()
		io.Copy(&out, r)
	}
	dl := time.Since(start)
	enc, _ := zstd.NewWriter(nil, zstd.WithEncoderDictRaw(1, dict), zstd.WithEncoderCRC(false), zstd.WithEncoderConcurrency(1), zstd.WithEncoderLevel(zstd.SpeedDefault), zstd.WithZeroFrames(true))
	dec, _ := zstd.NewReader(nil, zstd.WithDecoderDictRaw(1, dict), zstd.WithDecoderConcurrency(1))
	var zc int
	start = time.Now()
	var zouts [][]byte
	for i := range n {
		e := encode(mk(i))
		c := enc.EncodeAll(e, nil)
		zc += len(c)
		zouts = append(zouts, c)
	}
	zel := time.Since(start)
	start = time.Now()
	var dst []byte
	for _, c := range zouts {
		var err error
		dst, err = dec.DecodeAll(c, dst[:0])
		if err != nil { t.Fatal(err) }
	}
	t.Logf("zstd %d B/obj compress %v decompress %v", zc/n, zel/n, time.Since(start)/n)
	t.Logf("raw %d B/obj, compressed %d B/obj; compress %v/obj decompress %v/obj", raw/n, comp/n, el/n, dl/n)
}
