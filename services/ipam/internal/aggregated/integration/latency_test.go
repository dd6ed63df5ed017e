package integration

import (
	"context"
	"net"
	"os/exec"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/client-go/rest"

	"github.com/ipledger/ipledger/lab/testenv"
	"github.com/ipledger/ipledger/pkg/ipamapi"
	ipamv1 "github.com/ipledger/ipledger/proto/ipledger/ipam/v1"
	ipamv1grpc "github.com/ipledger/ipledger/proto/ipledger/ipam/v1/ipamv1grpc"
)

// The read latency of the two paths to the same answers (docs/architecture.md):
//
//	go test ./internal/aggregated/integration -run '^$' -bench . -benchtime 200x
//
// BenchmarkListThroughAggregation: a person's client (client certificate)
// lists allocations through the kube-apiserver, which authenticates,
// authorizes (RBAC) and proxies to the aggregated server, which authorizes
// again (SubjectAccessReview, cached). BenchmarkListOverGRPC: the same
// list from the same state over a loopback gRPC connection, what the
// plugin's call costs once its port-forward is open (the port-forward's own
// hops, API server and kubelet, need a node; lab/testenv has none).
func BenchmarkListThroughAggregation(b *testing.B) {
	env := testenv.Get(b)
	serve(b, env)
	bind(b, env, "bench-viewer", "ipledger:viewer")
	cfg, err := env.CP.UserConfig("bench-viewer")
	if err != nil {
		b.Fatal(err)
	}
	cfg.GroupVersion = &ipamapi.SchemeGroupVersion
	cfg.APIPath = "/apis"
	cfg.NegotiatedSerializer = serializer.NewCodecFactory(ipamapi.NewScheme()).WithoutConversion()
	rc, err := rest.RESTClientFor(cfg)
	if err != nil {
		b.Fatal(err)
	}
	list := func() {
		var l ipamapi.AllocationList
		if err := rc.Get().Resource("allocations").Do(context.Background()).Into(&l); err != nil || len(l.Items) != 3 {
			b.Fatalf("list: %v (%d items)", err, len(l.Items))
		}
	}
	list() // warm: connections, ipam's SubjectAccessReview cache
	b.ResetTimer()
	for range b.N {
		list()
	}
}

func BenchmarkListOverGRPC(b *testing.B) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	srv := grpc.NewServer()
	ipamv1grpc.RegisterIPAMServiceServer(srv, grpcFake{fake: &fakeIPAM{}})
	go func() { _ = srv.Serve(ln) }()
	b.Cleanup(srv.Stop)
	conn, err := grpc.NewClient("passthrough:///"+ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { conn.Close() })
	c := ipamv1grpc.NewIPAMServiceClient(conn)
	list := func() {
		resp, err := c.ListAllocations(context.Background(), &ipamv1.ListAllocationsRequest{})
		if err != nil || len(resp.GetAllocations()) != 4 {
			b.Fatalf("list: %v", err)
		}
	}
	list()
	b.ResetTimer()
	for range b.N {
		list()
	}
}

// BenchmarkPluginThroughAggregation: one `kubectl ipledger allocations -A`
// as a person, process start to exit (discovery, then the list).
func BenchmarkPluginThroughAggregation(b *testing.B) {
	env := testenv.Get(b)
	serve(b, env)
	bind(b, env, "bench-plugin", "ipledger:viewer")
	kubeconfig, err := env.CP.UserKubeconfig(b.TempDir(), "bench-plugin")
	if err != nil {
		b.Fatal(err)
	}
	bin := env.Plugin(b)
	run := func() {
		if out, err := exec.Command(bin, "--kubeconfig", kubeconfig, "allocations", "-A").CombinedOutput(); err != nil {
			b.Fatalf("%v\n%s", err, out)
		}
	}
	run()
	b.ResetTimer()
	for range b.N {
		run()
	}
}

// grpcFake serves fakeIPAM's reads over gRPC.
type grpcFake struct {
	ipamv1grpc.UnimplementedIPAMServiceServer
	fake *fakeIPAM
}

func (g grpcFake) ListAllocations(ctx context.Context, r *ipamv1.ListAllocationsRequest) (*ipamv1.ListAllocationsResponse, error) {
	return g.fake.ListAllocations(ctx, r)
}
