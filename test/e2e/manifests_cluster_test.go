package e2e

import (
	"bytes"
	"context"
	"path/filepath"
	"testing"

	"github.com/ipledger/ipledger/pkg/testenv"
)

// TestNoInstallSharesAClusterID: an Elastic IP's ipledger.io/cluster tag is
// what keeps two clusters of one AWS account apart, so no kustomization we
// ship may choose the cluster ID for the operator (eipd refuses to start
// without one, saying how to set it).
func TestNoInstallSharesAClusterID(t *testing.T) {
	env := testenv.Get(t)
	for _, k := range kustomizations {
		out, err := env.Kubectl(context.Background(), "kustomize", filepath.Join(env.Root, "deploy/kustomize", k))
		if err != nil {
			t.Fatal(err)
		}
		if bytes.Contains(out, []byte("--cluster-id")) {
			t.Errorf("%s sets eipd's --cluster-id: every cluster installed from it would share the tag and sweep each other's addresses", k)
		}
	}
}
