package connect

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
)

// An API server that never answers the port-forward's upgrade: forward gives
// up when the command's context ends, though the forwarder's own life goes on.
func TestForwardGivesUpWithTheCommand(t *testing.T) {
	hang := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-hang:
		case <-r.Context().Done():
		}
	}))
	defer srv.Close()
	defer close(hang)
	life, stop := context.WithCancel(context.Background())
	defer stop()
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ipledger-system", Name: "ipledger-ipam-0"}}
	done := make(chan error, 1)
	go func() {
		_, err := forward(ctx, life, &rest.Config{Host: srv.URL}, pod, 9443)
		done <- err
	}()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "port-forward to ipam Pod ipledger-system/ipledger-ipam-0 port 9443: not ready") {
			t.Errorf("forward: %v, want not ready", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("forward still waits 10s after the command's context ended")
	}
}
