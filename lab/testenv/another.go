package testenv

import (
	"context"
	"testing"
	"time"
)

// Another starts a second control plane — its own etcd and kube-apiserver,
// ipledger's CRDs and RBAC installed — for a test about two clusters (two
// installs sharing one AWS account, say). It is stopped when the test ends.
func Another(t testing.TB) *Env {
	t.Helper()
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	env, err := start(ctx, dir)
	if err != nil {
		t.Fatalf("testenv: second control plane: %v", err)
	}
	t.Cleanup(env.CP.Stop)
	return env
}
