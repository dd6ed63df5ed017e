// Package integration tests pkg/authz against a real API server: its
// TokenReviews and SubjectAccessReviews, audiences, and the one review that
// concurrent first calls share. It is a separate package so that the pure
// tests of package authz (cache, token parsing, token files) run without
// starting a control plane.
package integration

import (
	"bytes"
	"context"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/ipledger/ipledger/lab/testenv"
	"github.com/ipledger/ipledger/pkg/authz"
)

func TestMain(m *testing.M) { testenv.Main(m) }

const (
	listAllocations = "/ipledger.ipam.v1.IPAMService/ListAllocations"
	reserveAddress  = "/ipledger.ipam.v1.IPAMService/ReserveAddress"
)

var rules = authz.Rules{
	listAllocations: {Verb: "list", Resource: "allocations"},
	reserveAddress:  {Verb: "create", Resource: "reservations"},
}

// lockedBuffer collects log output from concurrent goroutines.
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

// bindViewer binds ServiceAccount ns/name to ClusterRole ipledger:viewer.
func bindViewer(t testing.TB, client kubernetes.Interface, ns, name string) {
	t.Helper()
	crb := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "test-viewer-" + ns + "-" + name},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "ipledger:viewer"},
		Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Namespace: ns, Name: name}},
	}
	if _, err := client.RbacV1().ClusterRoleBindings().Create(context.Background(), crb, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = client.RbacV1().ClusterRoleBindings().Delete(context.Background(), crb.Name, metav1.DeleteOptions{})
	})
}

// newAuthorizer is authz.New accepting the audiences of an ipam server
// (ipam's own and the legacy one), as grpcserver.New sets them.
func newAuthorizer(client kubernetes.Interface, rules authz.Rules, log *slog.Logger) *authz.Authorizer {
	a := authz.New(client, rules, log)
	a.SetAudiences(authz.ServerAudiences(authz.IPAMAudience)...)
	return a
}

func withToken(token string) context.Context {
	md := metadata.MD{}
	if token != "" {
		md.Set("authorization", "Bearer "+token)
	}
	return metadata.NewIncomingContext(context.Background(), md)
}

// countingClient counts review requests reaching the API server.
func countingClient(t *testing.T, cfg *rest.Config, n *atomic.Int32) kubernetes.Interface {
	t.Helper()
	cfg = rest.CopyConfig(cfg)
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return testenv.RoundTripFunc(func(r *http.Request) (*http.Response, error) {
			if strings.HasSuffix(r.URL.Path, "/tokenreviews") || strings.HasSuffix(r.URL.Path, "/subjectaccessreviews") {
				n.Add(1)
			}
			return rt.RoundTrip(r)
		})
	})
	c, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestAuthorize(t *testing.T) {
	env := testenv.Get(t)
	ctx := context.Background()
	ns := env.Namespace(t, nil)
	noRBAC, err := env.GRPCToken(ctx, ns, "no-rbac")
	if err != nil {
		t.Fatal(err)
	}
	viewer, err := env.GRPCToken(ctx, ns, "viewer")
	if err != nil {
		t.Fatal(err)
	}
	bindViewer(t, env.Client, ns, "viewer")

	var logs lockedBuffer
	var reviews atomic.Int32
	a := newAuthorizer(countingClient(t, env.Config, &reviews), rules, slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug})))
	// RBAC reaches the API server's authorizer through an informer: wait
	// for the binding without caching the refusals meanwhile.
	a.SetCacheTTLs(0, 0)
	testenv.Eventually(t, 10*time.Second, func() error {
		_, err := a.Authorize(withToken(viewer), listAllocations)
		return err
	})
	a.SetCacheTTLs(authz.DefaultAllowTTL, authz.DefaultDenyTTL)

	tests := []struct {
		name     string
		token    string
		method   string
		want     codes.Code
		wantMsgs []string
	}{
		{"no token", "", listAllocations, codes.Unauthenticated, []string{"bearer token"}},
		{"garbage token", "not-a-token", listAllocations, codes.Unauthenticated, []string{"rejected"}},
		{"malformed JWT", "eyJhbGciOiJSUzI1NiJ9.e30.c2ln", listAllocations, codes.Unauthenticated, nil},
		{"ServiceAccount without RBAC", noRBAC, listAllocations, codes.PermissionDenied,
			[]string{"system:serviceaccount:" + ns + ":no-rbac", "list", "allocations.ipledger.io"}},
		{"viewer lists", viewer, listAllocations, codes.OK, nil},
		{"viewer may not reserve", viewer, reserveAddress, codes.PermissionDenied, []string{"create", "reservations.ipledger.io"}},
		{"method not in table", viewer, "/ipledger.ipam.v1.IPAMService/ExplainService", codes.PermissionDenied, []string{"no authorization rule"}},
		{"health is open", "", "/grpc.health.v1.Health/Check", codes.OK, nil},
		{"reflection is open", "", "/grpc.reflection.v1.ServerReflection/ServerReflectionInfo", codes.OK, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			gotCtx, err := a.Authorize(withToken(tt.token), tt.method)
			if status.Code(err) != tt.want {
				t.Fatalf("code = %v (%v), want %v", status.Code(err), err, tt.want)
			}
			for _, m := range tt.wantMsgs {
				if !strings.Contains(status.Convert(err).Message(), m) {
					t.Errorf("message %q does not name %q", status.Convert(err).Message(), m)
				}
			}
			if tt.want == codes.OK && tt.token != "" {
				if u, ok := authz.UserFrom(gotCtx); !ok || u.Username != "system:serviceaccount:"+ns+":viewer" {
					t.Errorf("UserFrom = %+v, %v", u, ok)
				}
			}
		})
	}

	// Answers are cached: a burst of calls with a reviewed token costs no
	// further review.
	before := reviews.Load()
	for range 20 {
		if _, err := a.Authorize(withToken(viewer), listAllocations); err != nil {
			t.Fatal(err)
		}
	}
	if got := reviews.Load() - before; got != 0 {
		t.Errorf("20 cached calls made %d reviews, want 0", got)
	}

	for name, token := range map[string]string{"viewer": viewer, "no-rbac": noRBAC, "garbage": "not-a-token"} {
		if strings.Contains(logs.String(), token) {
			t.Errorf("the %s token appears in the logs", name)
		}
	}
	if !strings.Contains(logs.String(), "no-rbac") {
		t.Errorf("denials are not logged with the user: %s", logs.String())
	}
}

// TestConcurrentCallsShareOneReview proves that a burst of first calls with
// one token sends one TokenReview and one SubjectAccessReview.
func TestConcurrentCallsShareOneReview(t *testing.T) {
	env := testenv.Get(t)
	ctx := context.Background()
	ns := env.Namespace(t, nil)
	viewer, err := env.GRPCToken(ctx, ns, "viewer")
	if err != nil {
		t.Fatal(err)
	}
	bindViewer(t, env.Client, ns, "viewer")
	probe := newAuthorizer(env.Client, rules, slog.New(slog.DiscardHandler))
	probe.SetCacheTTLs(0, 0)
	testenv.Eventually(t, 10*time.Second, func() error {
		_, err := probe.Authorize(withToken(viewer), listAllocations)
		return err
	})

	var reviews atomic.Int32
	a := newAuthorizer(countingClient(t, env.Config, &reviews), rules, slog.New(slog.DiscardHandler))
	var wg sync.WaitGroup
	errs := make(chan error, 50)
	for range 50 {
		wg.Go(func() {
			if _, err := a.Authorize(withToken(viewer), listAllocations); err != nil {
				errs <- err
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if got := reviews.Load(); got != 2 {
		t.Errorf("50 concurrent first calls made %d reviews, want 2 (one TokenReview, one SubjectAccessReview)", got)
	}
}

// BenchmarkAuthorize: one call of a viewer, answered from the cache or
// reviewed anew (a TokenReview and a SubjectAccessReview against the real
// API server on loopback). docs/security.md quotes it.
func BenchmarkAuthorize(b *testing.B) {
	env := testenv.Get(b)
	ctx := context.Background()
	ns := "bench-authorize"
	viewer, err := env.GRPCToken(ctx, ns, "viewer")
	if err != nil {
		b.Fatal(err)
	}
	bindViewer(b, env.Client, ns, "viewer")
	for _, c := range []struct {
		name string
		ttl  time.Duration
	}{{"uncached", 0}, {"cached", time.Hour}} {
		b.Run(c.name, func(b *testing.B) {
			a := newAuthorizer(env.Client, rules, slog.New(slog.DiscardHandler))
			a.SetCacheTTLs(0, 0)
			testenv.Eventually(b, 10*time.Second, func() error {
				_, err := a.Authorize(withToken(viewer), listAllocations)
				return err
			})
			a.SetCacheTTLs(c.ttl, c.ttl)
			for b.Loop() {
				if _, err := a.Authorize(withToken(viewer), listAllocations); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
