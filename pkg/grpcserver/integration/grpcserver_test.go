// Package integration tests pkg/grpcserver against a real API server, whose
// TokenReviews and SubjectAccessReviews authorize the calls: the interceptor
// chain, health and reflection, TLS, token files, re-authorized streams and
// per-identity stream limits. It is a separate package so that the pure tests
// of package grpcserver run without starting a control plane.
package integration

import (
	"bytes"
	"context"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/grpc/status"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ipledger/ipledger/lab/testenv"
	"github.com/ipledger/ipledger/pkg/authz"
	"github.com/ipledger/ipledger/pkg/grpcserver"
	ipamv1 "github.com/ipledger/ipledger/proto/ipledger/ipam/v1"
	ipamv1grpc "github.com/ipledger/ipledger/proto/ipledger/ipam/v1/ipamv1grpc"
	watcherv1 "github.com/ipledger/ipledger/proto/ipledger/watcher/v1"
	watcherv1grpc "github.com/ipledger/ipledger/proto/ipledger/watcher/v1/watcherv1grpc"
)

func TestMain(m *testing.M) { testenv.Main(m) }

var rules = authz.Rules{
	ipamv1grpc.IPAMService_ListPools_FullMethodName:       {Verb: "list", Resource: "allocations"},
	ipamv1grpc.IPAMService_ListAllocations_FullMethodName: {Verb: "list", Resource: "allocations"},
	watcherv1grpc.WatcherService_Watch_FullMethodName:     {Verb: "watch", Resource: "snapshots"},
}

// ipam answers ListPools and panics in ListAllocations.
type ipam struct {
	ipamv1grpc.UnimplementedIPAMServiceServer
}

func (ipam) ListPools(context.Context, *ipamv1.ListPoolsRequest) (*ipamv1.ListPoolsResponse, error) {
	return &ipamv1.ListPoolsResponse{}, nil
}

func (ipam) ListAllocations(context.Context, *ipamv1.ListAllocationsRequest) (*ipamv1.ListAllocationsResponse, error) {
	panic("test panic in a handler")
}

// watcher streams one response; asked for kinds, it then holds the stream
// open until the stream's context ends, as the real Watch does.
type watcher struct {
	watcherv1grpc.UnimplementedWatcherServiceServer
}

func (watcher) Watch(req *watcherv1.WatchRequest, stream grpc.ServerStreamingServer[watcherv1.WatchResponse]) error {
	if err := stream.Send(&watcherv1.WatchResponse{}); err != nil || len(req.GetKinds()) == 0 {
		return err
	}
	<-stream.Context().Done()
	return nil
}

type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

type fixture struct {
	srv  *grpcserver.Server
	reg  *prometheus.Registry
	logs *lockedBuffer
	done chan error
	stop context.CancelFunc
}

// start serves ipam and watcher with cfg (Addr defaults to loopback:0).
func start(t testing.TB, cfg grpcserver.Config) *fixture {
	t.Helper()
	env := testenv.Get(t)
	if cfg.Addr == "" {
		cfg.Addr = "127.0.0.1:0"
	}
	cfg.DefaultAudiences(authz.IPAMAudience)
	f := &fixture{reg: prometheus.NewRegistry(), logs: &lockedBuffer{}, done: make(chan error, 1)}
	log := slog.New(slog.NewJSONHandler(f.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	srv, err := grpcserver.New(cfg, authz.New(env.Client, rules, log), log, f.reg)
	if err != nil {
		t.Fatal(err)
	}
	srv.Register(&ipamv1grpc.IPAMService_ServiceDesc, ipam{})
	srv.Register(&watcherv1grpc.WatcherService_ServiceDesc, watcher{})
	ctx, cancel := context.WithCancel(context.Background())
	go func() { f.done <- srv.Serve(ctx) }()
	f.srv, f.stop = srv, cancel
	t.Cleanup(func() {
		cancel()
		if err := <-f.done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return f
}

func dial(t testing.TB, addr string, opts ...grpc.DialOption) *grpc.ClientConn {
	t.Helper()
	if len(opts) == 0 {
		opts = []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}
	}
	cc, err := grpc.NewClient(addr, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return cc
}

// viewerTokenFile returns a token file of a ServiceAccount bound to
// ipledger:viewer, once the API server's authorizer knows the binding.
func viewerTokenFile(t testing.TB, ns string) string {
	t.Helper()
	env := testenv.Get(t)
	path := env.TokenFile(t, ns, "viewer")
	crb := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "test-viewer-" + ns},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "ipledger:viewer"},
		Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Namespace: ns, Name: "viewer"}},
	}
	if _, err := env.Client.RbacV1().ClusterRoleBindings().Create(context.Background(), crb, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = env.Client.RbacV1().ClusterRoleBindings().Delete(context.Background(), crb.Name, metav1.DeleteOptions{})
	})
	probe := authz.New(env.Client, rules, slog.New(slog.DiscardHandler))
	probe.SetAudiences(authz.IPAMAudience)
	probe.SetCacheTTLs(0, 0)
	md := authz.PlaintextTokenFromFile(path)
	testenv.Eventually(t, 10*time.Second, func() error {
		h, err := md.GetRequestMetadata(context.Background())
		if err != nil {
			return err
		}
		ctx := incoming(h)
		_, err = probe.Authorize(ctx, ipamv1grpc.IPAMService_ListPools_FullMethodName)
		return err
	})
	return path
}

func TestHealthAndReflection(t *testing.T) {
	f := start(t, grpcserver.Config{Plaintext: true})
	cc := dial(t, f.srv.Addr().String())
	health := healthpb.NewHealthClient(cc)
	ctx := context.Background()

	check := func(service string) healthpb.HealthCheckResponse_ServingStatus {
		t.Helper()
		resp, err := health.Check(ctx, &healthpb.HealthCheckRequest{Service: service})
		if err != nil {
			t.Fatalf("health check %q without a token: %v", service, err)
		}
		return resp.GetStatus()
	}
	if got := check(""); got != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Errorf("before SetServing(true): %v, want NOT_SERVING", got)
	}
	f.srv.SetServing(true)
	for _, svc := range []string{"", "ipledger.ipam.v1.IPAMService", "ipledger.watcher.v1.WatcherService"} {
		if got := check(svc); got != healthpb.HealthCheckResponse_SERVING {
			t.Errorf("after SetServing(true), %q: %v, want SERVING", svc, got)
		}
	}
	f.srv.SetServing(false)
	if got := check("ipledger.ipam.v1.IPAMService"); got != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Errorf("after SetServing(false): %v, want NOT_SERVING", got)
	}

	stream, err := reflectionpb.NewServerReflectionClient(cc).ServerReflectionInfo(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(&reflectionpb.ServerReflectionRequest{
		MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{ListServices: "*"},
	}); err != nil {
		t.Fatal(err)
	}
	resp, err := stream.Recv()
	if err != nil {
		t.Fatalf("reflection without a token: %v", err)
	}
	var names []string
	for _, s := range resp.GetListServicesResponse().GetService() {
		names = append(names, s.GetName())
	}
	for _, want := range []string{"ipledger.ipam.v1.IPAMService", "ipledger.watcher.v1.WatcherService", "grpc.health.v1.Health"} {
		if !strings.Contains(strings.Join(names, " "), want) {
			t.Errorf("reflection lists %v, missing %s", names, want)
		}
	}
}

func TestAuthPanicAndMetrics(t *testing.T) {
	env := testenv.Get(t)
	ns := env.Namespace(t, nil)
	viewerFile := viewerTokenFile(t, ns)
	noRBACFile := env.TokenFile(t, ns, "no-rbac")
	f := start(t, grpcserver.Config{Plaintext: true})
	addr := f.srv.Addr().String()
	ctx := context.Background()

	anonymous := ipamv1grpc.NewIPAMServiceClient(dial(t, addr))
	_, err := anonymous.ListPools(ctx, &ipamv1.ListPoolsRequest{})
	if status.Code(err) != codes.Unauthenticated {
		t.Errorf("ListPools without a token: %v, want Unauthenticated", err)
	}

	// One token file whose content rotates from one ServiceAccount to
	// another proves the client re-reads it.
	tokenFile := filepath.Join(t.TempDir(), "token")
	copyFile(t, noRBACFile, tokenFile)
	opts, err := authz.DialOptions(tokenFile, "", true)
	if err != nil {
		t.Fatal(err)
	}
	cc := dial(t, addr, opts...)
	client := ipamv1grpc.NewIPAMServiceClient(cc)
	_, err = client.ListPools(ctx, &ipamv1.ListPoolsRequest{})
	if status.Code(err) != codes.PermissionDenied || !strings.Contains(err.Error(), "list allocations.ipledger.io") {
		t.Errorf("ListPools without RBAC: %v, want PermissionDenied naming list allocations.ipledger.io", err)
	}
	copyFile(t, viewerFile, tokenFile)
	if _, err := client.ListPools(ctx, &ipamv1.ListPoolsRequest{}); err != nil {
		t.Errorf("ListPools as viewer after the token file rotated: %v", err)
	}

	// A panic becomes Internal, and the server keeps serving.
	_, err = client.ListAllocations(ctx, &ipamv1.ListAllocationsRequest{})
	if status.Code(err) != codes.Internal {
		t.Errorf("ListAllocations (panics): %v, want Internal", err)
	}
	if _, err := client.ListPools(ctx, &ipamv1.ListPoolsRequest{}); err != nil {
		t.Errorf("ListPools after a panic: %v", err)
	}

	// Streams go through the same chain: viewer may not watch snapshots.
	stream, err := watcherv1grpc.NewWatcherServiceClient(cc).Watch(ctx, &watcherv1.WatchRequest{})
	if err == nil {
		_, err = stream.Recv()
	}
	if status.Code(err) != codes.PermissionDenied || !strings.Contains(err.Error(), "watch snapshots") {
		t.Errorf("Watch as viewer: %v, want PermissionDenied naming watch snapshots", err)
	}

	wantCounts := []struct {
		method, code string
		want         float64
	}{
		{"ListPools", "OK", 2},
		{"ListPools", "PermissionDenied", 1},
		{"ListPools", "Unauthenticated", 1},
		{"ListAllocations", "Internal", 1},
		{"Watch", "PermissionDenied", 1},
	}
	for _, w := range wantCounts {
		testenv.Eventually(t, 5*time.Second, func() error {
			got := handled(t, f.reg, w.method, w.code)
			if got != w.want {
				return fmt.Errorf("%s %s: count %v, want %v", w.method, w.code, got, w.want)
			}
			return nil
		})
	}
	if got := testenv.MetricValue(t, f.reg, "ipledger_grpc_server_panics_recovered_total", nil); got != 1 {
		t.Errorf("panics recovered = %v, want 1", got)
	}

	logs := f.logs.String()
	for _, file := range []string{viewerFile, noRBACFile} {
		token, _ := os.ReadFile(file)
		if strings.Contains(logs, strings.TrimSpace(string(token))) {
			t.Errorf("a bearer token appears in the server's logs")
		}
	}
	if !strings.Contains(logs, "test panic in a handler") || !strings.Contains(logs, `"grpcMethod":"ListAllocations"`) {
		t.Errorf("the panic or the call is not logged:\n%s", logs)
	}
}

func TestTokenNeedsTransportSecurity(t *testing.T) {
	env := testenv.Get(t)
	ns := env.Namespace(t, nil)
	f := start(t, grpcserver.Config{Plaintext: true})
	// gRPC must refuse to send TokenFromFile's token on a plaintext
	// connection (at dial or at call time).
	creds := authz.TokenFromFile(env.TokenFile(t, ns, "someone"))
	cc, err := grpc.NewClient(f.srv.Addr().String(),
		grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithPerRPCCredentials(creds))
	if err == nil {
		defer cc.Close()
		_, err = ipamv1grpc.NewIPAMServiceClient(cc).ListPools(context.Background(), &ipamv1.ListPoolsRequest{})
	}
	if err == nil || !strings.Contains(err.Error(), "transport") {
		t.Fatalf("TokenFromFile over plaintext: %v, want a refusal to send without transport security", err)
	}
	if got := handled(t, f.reg, "ListPools", "Unauthenticated") + handled(t, f.reg, "ListPools", "PermissionDenied"); got != 0 {
		t.Errorf("the server saw %v calls; the client must not have sent any", got)
	}
}

func TestTLSAndGracefulStop(t *testing.T) {
	env := testenv.Get(t)
	ns := env.Namespace(t, nil)
	viewerFile := viewerTokenFile(t, ns)
	certFile, keyFile := testenv.SelfSignedCert(t, "127.0.0.1")
	f := start(t, grpcserver.Config{TLSCertFile: certFile, TLSKeyFile: keyFile})
	f.srv.SetServing(true)

	opts, err := authz.DialOptions(viewerFile, certFile, false)
	if err != nil {
		t.Fatal(err)
	}
	cc := dial(t, f.srv.Addr().String(), opts...)
	if _, err := ipamv1grpc.NewIPAMServiceClient(cc).ListPools(context.Background(), &ipamv1.ListPoolsRequest{}); err != nil {
		t.Fatalf("ListPools over TLS: %v", err)
	}
	pemBytes, err := os.ReadFile(certFile)
	if err != nil {
		t.Fatal(err)
	}
	block, _ := pem.Decode(pemBytes)
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	if got := testenv.MetricValue(t, f.reg, "ipledger_grpc_server_certificate_expiry_timestamp_seconds", nil); got != float64(cert.NotAfter.Unix()) {
		t.Errorf("certificate expiry metric = %v, want the certificate's NotAfter %v", got, cert.NotAfter.Unix())
	}
	plain := dial(t, f.srv.Addr().String())
	if _, err := healthpb.NewHealthClient(plain).Check(context.Background(), &healthpb.HealthCheckRequest{}); err == nil {
		t.Errorf("a plaintext client reached a TLS server")
	}

	f.stop()
	select {
	case err := <-f.done:
		if err != nil {
			t.Fatalf("Serve after cancel: %v", err)
		}
		f.done <- nil // for the cleanup
	case <-time.After(grpcserver.DefaultShutdownTimeout + 5*time.Second):
		t.Fatal("Serve did not return after its context ended")
	}
	if _, err := net.DialTimeout("tcp", f.srv.Addr().String(), time.Second); err == nil {
		t.Errorf("still accepting connections after stop")
	}
}

func TestNewRejectsUnsafeConfigs(t *testing.T) {
	env := testenv.Get(t)
	a := authz.New(env.Client, rules, nil)
	aud := authz.ServerAudiences(authz.IPAMAudience)
	if _, err := grpcserver.New(grpcserver.Config{Addr: "127.0.0.1:0", TokenAudiences: aud}, a, nil, nil); err == nil {
		t.Error("New without TLS files and without Plaintext: want an error")
	}
	if _, err := grpcserver.New(grpcserver.Config{Addr: "127.0.0.1:0", Plaintext: true, TokenAudiences: aud}, nil, nil, nil); err == nil {
		t.Error("New without an authorizer: want an error")
	}
	if _, err := grpcserver.New(grpcserver.Config{Addr: "127.0.0.1:0", Plaintext: true}, a, nil, nil); err == nil {
		t.Error("New without audiences: want an error")
	}
	// Two servers may share a registry.
	reg := prometheus.NewRegistry()
	for range 2 {
		s, err := grpcserver.New(grpcserver.Config{Addr: "127.0.0.1:0", Plaintext: true, TokenAudiences: aud}, a, nil, reg)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		if err := s.Serve(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

// handled counts calls of ipam's or watcher's method that ended with code.
func handled(t *testing.T, reg *prometheus.Registry, method, code string) float64 {
	t.Helper()
	service := "ipledger.ipam.v1.IPAMService"
	if method == "Watch" {
		service = "ipledger.watcher.v1.WatcherService"
	}
	return testenv.MetricValue(t, reg, "ipledger_grpc_server_handled_total",
		map[string]string{"grpc_service": service, "grpc_method": method, "grpc_code": code})
}

func incoming(h map[string]string) context.Context {
	return metadata.NewIncomingContext(context.Background(), metadata.New(h))
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	// Write a new file and rename it over the old, as the kubelet swaps
	// projected tokens atomically.
	tmp := to + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, to); err != nil {
		t.Fatal(err)
	}
}
