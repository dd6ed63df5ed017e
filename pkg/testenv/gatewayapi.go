package testenv

import (
	"context"
	"encoding/json"
	"os/exec"
	"path/filepath"
	"testing"
)

// GatewayAPIVersion is the sigs.k8s.io/gateway-api release whose CRDs the
// tests install; the watcher's tests build objects with its Go types, so
// services/watcher/go.mod requires the same version.
const GatewayAPIVersion = "v1.6.3"

// GatewayAPICRDs are the Gateway API CRDs (standard channel) that ipledger
// reads, as files of the sigs.k8s.io/gateway-api module.
var GatewayAPICRDs = []string{
	"config/crd/standard/gateway.networking.k8s.io_gatewayclasses.yaml",
	"config/crd/standard/gateway.networking.k8s.io_gateways.yaml",
}

// gatewayAPICRDNames are the CRDs' names, for kubectl wait and delete.
var gatewayAPICRDNames = []string{"crd/gateways.gateway.networking.k8s.io", "crd/gatewayclasses.gateway.networking.k8s.io"}

// Kubectl runs kubectl against one cluster and returns its output.
type Kubectl func(ctx context.Context, args ...string) ([]byte, error)

// InstallGatewayAPI applies the Gateway API CRDs to the test's API server
// (InstallGatewayAPIWith).
func (e *Env) InstallGatewayAPI(t testing.TB) { InstallGatewayAPIWith(t, e.Kubectl) }

// UninstallGatewayAPI deletes the Gateway API CRDs from the test's API
// server (UninstallGatewayAPIWith).
func (e *Env) UninstallGatewayAPI(t testing.TB) { UninstallGatewayAPIWith(t, e.Kubectl) }

// InstallGatewayAPIWith applies the Gateway API CRDs of GatewayAPIVersion
// (from the module cache, downloaded once through the module proxy) with
// kubectl and waits until they are served. They are deleted when the test
// ends; UninstallGatewayAPIWith deletes them earlier.
func InstallGatewayAPIWith(t testing.TB, kubectl Kubectl) {
	t.Helper()
	args := []string{"apply", "--server-side"}
	for _, f := range gatewayAPIManifests(t) {
		args = append(args, "-f", f)
	}
	ctx := context.Background()
	if out, err := kubectl(ctx, args...); err != nil {
		t.Fatalf("install the Gateway API CRDs: %v: %s", err, out)
	}
	t.Cleanup(func() { UninstallGatewayAPIWith(t, kubectl) })
	if out, err := kubectl(ctx, append([]string{"wait", "--for=condition=Established", "--timeout=60s"}, gatewayAPICRDNames...)...); err != nil {
		t.Fatalf("the Gateway API CRDs are not established: %v: %s", err, out)
	}
}

// UninstallGatewayAPIWith deletes the Gateway API CRDs, and with them every
// Gateway and GatewayClass, and waits until they are gone.
func UninstallGatewayAPIWith(t testing.TB, kubectl Kubectl) {
	t.Helper()
	if out, err := kubectl(context.Background(), append([]string{"delete", "--ignore-not-found", "--wait"}, gatewayAPICRDNames...)...); err != nil {
		t.Errorf("delete the Gateway API CRDs: %v: %s", err, out)
	}
}

// gatewayAPIManifests are the paths of GatewayAPICRDs of GatewayAPIVersion
// in the module cache.
func gatewayAPIManifests(t testing.TB) []string {
	t.Helper()
	out, err := exec.Command("go", "mod", "download", "-json", "sigs.k8s.io/gateway-api@"+GatewayAPIVersion).Output()
	var mod struct{ Dir, Error string }
	if jerr := json.Unmarshal(out, &mod); err != nil || jerr != nil || mod.Dir == "" {
		t.Fatalf("download sigs.k8s.io/gateway-api@%s for its CRDs: %v %s %s", GatewayAPIVersion, err, mod.Error, exitStderr(err))
	}
	paths := make([]string, len(GatewayAPICRDs))
	for i, f := range GatewayAPICRDs {
		paths[i] = filepath.Join(mod.Dir, f)
	}
	return paths
}

func exitStderr(err error) string {
	if ee, ok := err.(*exec.ExitError); ok {
		return string(ee.Stderr)
	}
	return ""
}
