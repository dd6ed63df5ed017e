package integration

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
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

var holdReq = &watcherv1.WatchRequest{Kinds: []watcherv1.Kind{watcherv1.Kind_KIND_SERVICE}}

// bindSubscriber binds ServiceAccount ns/name to ipledger:snapshot-subscriber
// and returns the binding's name.
func bindSubscriber(t *testing.T, ns, name string) string {
	t.Helper()
	env := testenv.Get(t)
	crb := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "test-subscriber-" + ns + "-" + name},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "ipledger:snapshot-subscriber"},
		Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Namespace: ns, Name: name}},
	}
	if _, err := env.Client.RbacV1().ClusterRoleBindings().Create(context.Background(), crb, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = env.Client.RbacV1().ClusterRoleBindings().Delete(context.Background(), crb.Name, metav1.DeleteOptions{})
	})
	return crb.Name
}

// subscriberConn returns a connection sending the token of ServiceAccount
// ns/name, bound to ipledger:snapshot-subscriber, once RBAC lets it watch.
func subscriberConn(t *testing.T, addr, ns, name string) (*grpc.ClientConn, string) {
	t.Helper()
	env := testenv.Get(t)
	tokenFile := env.TokenFile(t, ns, name)
	binding := bindSubscriber(t, ns, name)
	opts, err := authz.DialOptions(tokenFile, "", true)
	if err != nil {
		t.Fatal(err)
	}
	cc := dial(t, addr, opts...)
	// The API server's authorizer learns of bindings through an informer;
	// a refusal is cached by the server for DefaultDenyTTL.
	testenv.Eventually(t, 20*time.Second, func() error { return probeWatch(cc) })
	return cc, binding
}

// probeWatch runs a Watch that the server ends by itself (no kinds: one
// response) and returns its status: nil once the caller may watch.
func probeWatch(cc *grpc.ClientConn) error {
	s, err := watcherv1grpc.NewWatcherServiceClient(cc).Watch(context.Background(), &watcherv1.WatchRequest{})
	for err == nil {
		_, err = s.Recv()
	}
	if errors.Is(err, io.EOF) {
		return nil
	}
	return err
}

// openStream starts a held Watch and waits for its first response; the stream
// ends with the test or when the server ends it.
func openStream(t *testing.T, cc *grpc.ClientConn) (grpc.ServerStreamingClient[watcherv1.WatchResponse], error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	s, err := watcherv1grpc.NewWatcherServiceClient(cc).Watch(ctx, holdReq)
	if err == nil {
		_, err = s.Recv()
	}
	if err != nil {
		cancel()
		return nil, err
	}
	return s, nil
}

// endsWithin reads s until it ends and returns its error and how long that took.
func endsWithin(t *testing.T, s grpc.ServerStreamingClient[watcherv1.WatchResponse], bound time.Duration) (error, time.Duration) {
	t.Helper()
	start := time.Now()
	errc := make(chan error, 1)
	go func() {
		for {
			if _, err := s.Recv(); err != nil {
				errc <- err
				return
			}
		}
	}()
	select {
	case err := <-errc:
		return err, time.Since(start)
	case <-time.After(bound):
		t.Fatalf("the stream is still open %s after its access was revoked", bound)
		return nil, 0
	}
}

// TestTokenForTheKubernetesAPIIsRefused: a token without ipledger's audience
// (a token for the Kubernetes API) gets UNAUTHENTICATED from a real server,
// though its subject may watch.
func TestTokenForTheKubernetesAPIIsRefused(t *testing.T) {
	env := testenv.Get(t)
	ns := env.Namespace(t, nil)
	f := start(t, grpcserver.Config{Plaintext: true})
	subscriberConn(t, f.srv.Addr().String(), ns, "subscriber")
	apiToken, err := env.ServiceAccountToken(context.Background(), ns, "subscriber")
	if err != nil {
		t.Fatal(err)
	}
	plain := watcherv1grpc.NewWatcherServiceClient(dial(t, f.srv.Addr().String()))
	ctx := metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer "+apiToken)
	s, err := plain.Watch(ctx, holdReq)
	if err == nil {
		_, err = s.Recv()
	}
	if status.Code(err) != codes.Unauthenticated || !strings.Contains(err.Error(), "audience") {
		t.Fatalf("Watch with a token for the Kubernetes API: %v, want Unauthenticated naming the audience", err)
	}
	_, err = ipamv1grpc.NewIPAMServiceClient(dial(t, f.srv.Addr().String())).ListPools(ctx, &ipamv1.ListPoolsRequest{})
	if status.Code(err) != codes.Unauthenticated {
		t.Fatalf("ListPools with a token for the Kubernetes API: %v, want Unauthenticated", err)
	}
}

// TestOpenStreamsAreReauthorized: a stream whose subject loses its binding
// is ended by the server within twice the authorization cache's TTL with
// PERMISSION_DENIED; one whose ServiceAccount is deleted with UNAUTHENTICATED,
// within that plus the kube-apiserver's own cache of authenticated tokens.
func TestOpenStreamsAreReauthorized(t *testing.T) {
	env := testenv.Get(t)
	const ttl = time.Second
	bound := 2*ttl + 3*time.Second // plus the API server's RBAC informer and the test's slack
	f := start(t, grpcserver.Config{Plaintext: true, AuthCacheTTL: ttl})
	addr := f.srv.Addr().String()

	t.Run("binding deleted", func(t *testing.T) {
		ns := env.Namespace(t, nil)
		cc, binding := subscriberConn(t, addr, ns, "revoked")
		s, err := openStream(t, cc)
		if err != nil {
			t.Fatal(err)
		}
		if err := env.Client.RbacV1().ClusterRoleBindings().Delete(context.Background(), binding, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		err, took := endsWithin(t, s, bound)
		if status.Code(err) != codes.PermissionDenied || !strings.Contains(err.Error(), "watch snapshots") {
			t.Fatalf("stream ended with %v, want PermissionDenied naming watch snapshots", err)
		}
		t.Logf("ended %s after the binding was deleted", took.Round(time.Millisecond))
	})
	t.Run("ServiceAccount deleted", func(t *testing.T) {
		ns := env.Namespace(t, nil)
		cc, _ := subscriberConn(t, addr, ns, "deleted")
		s, err := openStream(t, cc)
		if err != nil {
			t.Fatal(err)
		}
		if err := env.Client.CoreV1().ServiceAccounts(ns).Delete(context.Background(), "deleted", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		// The kube-apiserver itself caches a successful token authentication
		// for 10s (its TokenSuccessCacheTTL).
		err, took := endsWithin(t, s, bound+10*time.Second)
		if status.Code(err) != codes.Unauthenticated {
			t.Fatalf("stream ended with %v, want Unauthenticated", err)
		}
		t.Logf("ended %s after the ServiceAccount was deleted", took.Round(time.Millisecond))
	})
}

// TestStreamsPerIdentityAreLimited: one identity may hold a bounded number of
// open streams; one more gets RESOURCE_EXHAUSTED, other identities are not
// affected, and a closed stream frees its slot.
func TestStreamsPerIdentityAreLimited(t *testing.T) {
	env := testenv.Get(t)
	ns := env.Namespace(t, nil)
	const limit = 3
	f := start(t, grpcserver.Config{Plaintext: true, MaxStreamsPerIdentity: limit})
	addr := f.srv.Addr().String()
	greedy, _ := subscriberConn(t, addr, ns, "greedy")
	var cancels []context.CancelFunc
	for i := range limit {
		ctx, cancel := context.WithCancel(context.Background())
		t.Cleanup(cancel)
		cancels = append(cancels, cancel)
		s, err := watcherv1grpc.NewWatcherServiceClient(greedy).Watch(ctx, holdReq)
		if err == nil {
			_, err = s.Recv()
		}
		if err != nil {
			t.Fatalf("stream %d of %d: %v", i+1, limit, err)
		}
	}
	_, err := openStream(t, greedy)
	if status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), fmt.Sprint(limit)) {
		t.Fatalf("stream %d: %v, want ResourceExhausted naming the limit", limit+1, err)
	}
	other, _ := subscriberConn(t, addr, ns, "other")
	if _, err := openStream(t, other); err != nil {
		t.Fatalf("another identity: %v", err)
	}
	cancels[0]()
	testenv.Eventually(t, 10*time.Second, func() error { return probeWatch(greedy) })
}
