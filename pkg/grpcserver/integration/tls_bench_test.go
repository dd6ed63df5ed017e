package integration

import (
	"context"
	"testing"

	"google.golang.org/grpc"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/ipledger/ipledger/lab/testenv"
	"github.com/ipledger/ipledger/pkg/authz"
	"github.com/ipledger/ipledger/pkg/grpcserver"
	ipamv1 "github.com/ipledger/ipledger/proto/ipledger/ipam/v1"
	"github.com/ipledger/ipledger/proto/ipledger/ipam/v1/ipamv1grpc"
)

// What TLS costs a client of the real server (its interceptors, a
// TokenReview-backed token cached as in production): an authorized unary
// call on an open connection, and a new connection (handshake and one
// health check). docs/security.md, "TLS", quotes the ratios.
//
//	IPLEDGER_TOOLS_BIN=$(hack/build-tools.sh) go test ./pkg/grpcserver/integration -run '^$' -bench TLS -benchtime 2000x
func BenchmarkTLSUnaryCall(b *testing.B) {
	for _, mode := range []string{"plaintext", "tls"} {
		b.Run(mode, func(b *testing.B) {
			addr, opts := benchServer(b, mode)
			cc := dial(b, addr, opts...)
			c := ipamv1grpc.NewIPAMServiceClient(cc)
			ctx := context.Background()
			if _, err := c.ListPools(ctx, &ipamv1.ListPoolsRequest{}); err != nil {
				b.Fatal(err)
			}
			b.ResetTimer()
			for range b.N {
				if _, err := c.ListPools(ctx, &ipamv1.ListPoolsRequest{}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkTLSNewConnection(b *testing.B) {
	for _, mode := range []string{"plaintext", "tls"} {
		b.Run(mode, func(b *testing.B) {
			addr, opts := benchServer(b, mode)
			ctx := context.Background()
			b.ResetTimer()
			for range b.N {
				cc, err := grpc.NewClient(addr, opts...)
				if err != nil {
					b.Fatal(err)
				}
				if _, err := healthpb.NewHealthClient(cc).Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
					b.Fatal(err)
				}
				cc.Close()
			}
		})
	}
}

func benchServer(b *testing.B, mode string) (string, []grpc.DialOption) {
	b.Helper()
	env := testenv.Get(b)
	token := viewerTokenFile(b, env.Namespace(b, nil))
	cfg := grpcserver.Config{Plaintext: true}
	caFile := ""
	if mode == "tls" {
		certFile, keyFile := testenv.SelfSignedCert(b, "127.0.0.1")
		cfg = grpcserver.Config{TLSCertFile: certFile, TLSKeyFile: keyFile}
		caFile = certFile
	}
	f := start(b, cfg)
	f.srv.SetServing(true)
	opts, err := authz.DialOptions(token, caFile, mode == "plaintext")
	if err != nil {
		b.Fatal(err)
	}
	return f.srv.Addr().String(), opts
}
