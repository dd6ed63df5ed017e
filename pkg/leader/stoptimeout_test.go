package leader

import (
	"context"
	"log/slog"
	"os"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes/fake"
)

// TestStopTimeoutExits: a term whose worker ignores Stopping past
// StopTimeout ends the process with code 1. The Lease lives in a fake
// clientset: what is under test is the stop bound, which needs the unexported
// exit hook, not the API server (pkg/leader/integration tests elections
// against a real one).
func TestStopTimeoutExits(t *testing.T) {
	codes := make(chan int, 1)
	release := make(chan struct{})
	exit = func(code int) {
		codes <- code
		close(release)
	}
	t.Cleanup(func() { exit = os.Exit })
	cfg := Config{
		LeaseName: "test-lease", LeaseNamespace: "test", Identity: "stuck",
		LeaseDuration: 3 * time.Second, RenewDeadline: 2 * time.Second, RetryPeriod: 250 * time.Millisecond,
		StopTimeout: 500 * time.Millisecond,
	}
	leading := make(chan struct{})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, fake.NewClientset(), cfg, func(*Term) (Worker, error) {
			return WorkerFunc(func(term *Term) error {
				close(leading)
				<-release // ignores Stopping
				return nil
			}), nil
		}, slog.New(slog.DiscardHandler), nil)
	}()
	select {
	case <-leading:
	case <-time.After(10 * time.Second):
		t.Fatal("the only candidate never led")
	}
	cancel()
	select {
	case code := <-codes:
		if code != 1 {
			t.Errorf("exit code %d, want 1", code)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a term that overran StopTimeout did not exit the process")
	}
	if err := <-done; err != nil {
		t.Errorf("Run: %v", err)
	}
}
