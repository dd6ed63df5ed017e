package integration

import (
	"context"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/grpc/status"

	"github.com/ipledger/ipledger/lab/testenv"
	"github.com/ipledger/ipledger/pkg/authz"
	"github.com/ipledger/ipledger/pkg/grpcserver"
	ipamv1 "github.com/ipledger/ipledger/proto/ipledger/ipam/v1"
	ipamv1grpc "github.com/ipledger/ipledger/proto/ipledger/ipam/v1/ipamv1grpc"
)

// TestTokenForAnotherServerIsRefused: an ipam server (its own audience and
// the legacy one) refuses, with the real API server's TokenReview, a token
// of a bound subject projected for the watcher, and accepts the same
// subject's token for ipam and, for one release, for the legacy audience.
func TestTokenForAnotherServerIsRefused(t *testing.T) {
	env := testenv.Get(t)
	ctx := context.Background()
	ns := env.Namespace(t, nil)
	viewerTokenFile(t, ns) // binds ns/viewer to ipledger:viewer and waits for RBAC
	f := start(t, grpcserver.Config{Plaintext: true, TokenAudiences: authz.ServerAudiences(authz.IPAMAudience)})
	client := ipamv1grpc.NewIPAMServiceClient(dial(t, f.srv.Addr().String()))
	for _, tt := range []struct {
		audience string
		want     codes.Code
	}{
		{authz.WatcherAudience, codes.Unauthenticated},
		{authz.EIPDAudience, codes.Unauthenticated},
		{authz.IPAMAudience, codes.OK},
		{authz.LegacyAudience, codes.OK},
	} {
		token, err := env.GRPCTokenFor(ctx, ns, "viewer", tt.audience)
		if err != nil {
			t.Fatal(err)
		}
		_, err = client.ListPools(metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+token), &ipamv1.ListPoolsRequest{})
		if got := status.Code(err); got != tt.want {
			t.Errorf("a token for %s at ipam: %v, want %v", tt.audience, err, tt.want)
		}
		if tt.want == codes.Unauthenticated && !strings.Contains(status.Convert(err).Message(), authz.IPAMAudience) {
			t.Errorf("the refusal %q does not name the audience to project", status.Convert(err).Message())
		}
	}
}

// TestOpenStreamsAreBounded: the streams of the methods open without a
// token (health Watch, reflection) are bounded in total; one more is
// refused with RESOURCE_EXHAUSTED, a closed one frees its slot, and unary
// health checks and authorized calls are served meanwhile.
func TestOpenStreamsAreBounded(t *testing.T) {
	const limit = 3
	ns := testenv.Get(t).Namespace(t, nil)
	opts := viewerDialOptions(t, viewerTokenFile(t, ns))
	f := start(t, grpcserver.Config{Plaintext: true, MaxOpenStreams: limit})
	cc := dial(t, f.srv.Addr().String())
	ctx := context.Background()

	// limit-1 health Watch streams and one reflection stream hold every slot.
	var cancels []context.CancelFunc
	for range limit - 1 {
		sctx, cancel := context.WithCancel(ctx)
		cancels = append(cancels, cancel)
		if err := healthWatch(sctx, cc); err != nil {
			t.Fatalf("health Watch within the limit: %v", err)
		}
	}
	rctx, cancelReflection := context.WithCancel(ctx)
	defer cancelReflection()
	if err := reflectionList(rctx, cc); err != nil {
		t.Fatalf("reflection within the limit: %v", err)
	}
	for _, cancel := range cancels {
		defer cancel()
	}

	if err := healthWatch(ctx, cc); status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "--grpc-max-open-streams") {
		t.Errorf("one more health Watch: %v, want RESOURCE_EXHAUSTED naming --grpc-max-open-streams", err)
	}
	if err := reflectionList(ctx, cc); status.Code(err) != codes.ResourceExhausted {
		t.Errorf("one more reflection stream: %v, want RESOURCE_EXHAUSTED", err)
	}
	if _, err := healthpb.NewHealthClient(cc).Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
		t.Errorf("a unary health check while the open streams are full: %v", err)
	}
	if _, err := ipamv1grpc.NewIPAMServiceClient(dial(t, f.srv.Addr().String(), opts...)).ListPools(ctx, &ipamv1.ListPoolsRequest{}); err != nil {
		t.Errorf("an authorized call while the open streams are full: %v", err)
	}
	if got := testenv.MetricValue(t, f.reg, "ipledger_grpc_server_open_streams_over_limit_total", nil); got != 2 {
		t.Errorf("ipledger_grpc_server_open_streams_over_limit_total = %v, want 2", got)
	}

	cancels[0]() // the server frees the slot once it sees the stream end
	testenv.Eventually(t, 10*time.Second, func() error {
		sctx, cancel := context.WithCancel(ctx)
		t.Cleanup(cancel)
		return healthWatch(sctx, cc)
	})
}

// TestStreamsPerConnectionAndHeaderSizeAreBounded: one connection carries
// at most MaxConcurrentStreams streams (the next waits for a free one, and
// another connection is served), and request headers beyond
// MaxHeaderListSize are refused.
func TestStreamsPerConnectionAndHeaderSizeAreBounded(t *testing.T) {
	f := start(t, grpcserver.Config{Plaintext: true, MaxConcurrentStreams: 2, MaxHeaderListSize: 8 << 10})
	cc := dial(t, f.srv.Addr().String())
	ctx := context.Background()
	for range 2 {
		sctx, cancel := context.WithCancel(ctx)
		defer cancel()
		if err := healthWatch(sctx, cc); err != nil {
			t.Fatal(err)
		}
	}
	// A third stream on the same connection is not started while two are
	// open: it is still waiting when its deadline ends it.
	wctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
	defer cancel()
	if err := healthWatch(wctx, cc); status.Code(err) != codes.DeadlineExceeded {
		t.Errorf("a third stream on a connection limited to 2: %v, want it kept waiting (DeadlineExceeded)", err)
	}
	other := dial(t, f.srv.Addr().String())
	sctx, cancelOther := context.WithCancel(ctx)
	defer cancelOther()
	if err := healthWatch(sctx, other); err != nil {
		t.Errorf("a stream on another connection: %v", err)
	}

	health := healthpb.NewHealthClient(other)
	big := metadata.AppendToOutgoingContext(ctx, "x-padding", strings.Repeat("x", 16<<10))
	if _, err := health.Check(big, &healthpb.HealthCheckRequest{}); err == nil {
		t.Error("a call with 16 KiB of headers at a server limited to 8 KiB: served, want refused")
	} else {
		t.Logf("16 KiB of headers: %v", err)
	}
	if _, err := health.Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
		t.Errorf("a call with small headers after a refused one: %v", err)
	}
}

// healthWatch opens a health Watch stream and returns once the server
// answered its first message (the stream holds a slot until ctx ends) or
// refused it.
func healthWatch(ctx context.Context, cc *grpc.ClientConn) error {
	s, err := healthpb.NewHealthClient(cc).Watch(ctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		return err
	}
	_, err = s.Recv()
	return err
}

// reflectionList opens a reflection stream and lists the services once;
// the stream stays open until ctx ends.
func reflectionList(ctx context.Context, cc *grpc.ClientConn) error {
	s, err := reflectionpb.NewServerReflectionClient(cc).ServerReflectionInfo(ctx)
	if err != nil {
		return err
	}
	// A Send that meets a stream the server already ended returns io.EOF;
	// the server's status is what Recv then returns (grpc.ClientStream).
	if err := s.Send(&reflectionpb.ServerReflectionRequest{
		MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{ListServices: "*"},
	}); err != nil && !errors.Is(err, io.EOF) {
		return err
	}
	_, err = s.Recv()
	return err
}

func viewerDialOptions(t *testing.T, tokenFile string) []grpc.DialOption {
	t.Helper()
	opts, err := authz.DialOptions(tokenFile, "", true)
	if err != nil {
		t.Fatal(err)
	}
	return opts
}
