package app

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ipledger/ipledger/lab/testenv"
	"github.com/ipledger/ipledger/pkg/stream"
	watcherv1 "github.com/ipledger/ipledger/proto/ipledger/watcher/v1"
)

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestRevokedSubscriberIsCutOff: a subscriber (the real pkg/stream client)
// whose RoleBinding is deleted mid-stream has its stream ended by the watcher
// within twice the authorization cache's TTL, and its client says so: a
// warning when the open stream ends, then an error naming PERMISSION_DENIED
// and the missing grant on every refused reconnect.
func TestRevokedSubscriberIsCutOff(t *testing.T) {
	env := testenv.Get(t)
	ctx := context.Background()
	const ttl = time.Second
	w, _ := startWatcher(t, env, func(c *Config) { c.GRPC.AuthCacheTTL = ttl })
	ns := env.Namespace(t, nil)
	tokenFile := env.TokenFile(t, ns, "subscriber")
	crb := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "test-subscriber-" + ns},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "ipledger:snapshot-subscriber"},
		Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Namespace: ns, Name: "subscriber"}},
	}
	if _, err := env.Client.RbacV1().ClusterRoleBindings().Create(ctx, crb, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Client.RbacV1().ClusterRoleBindings().Delete(ctx, crb.Name, metav1.DeleteOptions{}) })
	raw := dial(t, w.Addr().String(), tokenFile)
	testenv.Eventually(t, 20*time.Second, func() error {
		if code := watchErr(t, raw, &watcherv1.WatchRequest{Kinds: servicesOnly}); code != codes.OK {
			return fmt.Errorf("Watch: %v", code)
		}
		return nil
	})

	var logs syncBuffer
	client, err := stream.New(stream.Config{Target: w.Addr().String(), TokenFile: tokenFile, Plaintext: true, Kinds: servicesOnly,
		Namespaces: []string{ns}, MinBackoff: 50 * time.Millisecond, MaxBackoff: 200 * time.Millisecond},
		slog.New(slog.NewJSONHandler(&logs, nil)), nil)
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- client.Run(runCtx) }()
	t.Cleanup(func() { stop(); <-done })
	waitCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := client.WaitForSync(waitCtx); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 10*time.Second, func() error {
		if n := w.Store().Subscribers(); n != 1 {
			return fmt.Errorf("%d subscribers, want 1", n)
		}
		return nil
	})

	if err := env.Client.RbacV1().ClusterRoleBindings().Delete(ctx, crb.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	revoked := time.Now()
	bound := 2*ttl + 3*time.Second // plus the API server's RBAC informer and slack
	testenv.Eventually(t, bound, func() error {
		if n := w.Store().Subscribers(); n != 0 {
			return fmt.Errorf("the revoked subscriber is still subscribed %s after its binding was deleted", time.Since(revoked).Round(time.Millisecond))
		}
		// The open stream's end is a warning (an expired token ends streams
		// too, and the reconnect fixes that); the refused reconnect an error.
		for _, level := range []string{"WARN", "ERROR"} {
			found := false
			for _, line := range strings.Split(logs.String(), "\n") {
				found = found || strings.Contains(line, `"level":"`+level+`"`) && strings.Contains(line, "PermissionDenied") &&
					strings.Contains(line, "watch snapshots")
			}
			if !found {
				return fmt.Errorf("the client logged no %s naming PermissionDenied and watch snapshots:\n%s", level, logs.String())
			}
		}
		return nil
	})
	t.Logf("cut off and reported %s after the binding was deleted", time.Since(revoked).Round(time.Millisecond))
}
