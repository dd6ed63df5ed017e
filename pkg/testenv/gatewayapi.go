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

// InstallGatewayAPI applies the Gateway API CRDs of GatewayAPIVersion (from
// the module cache, downloaded once through the module proxy) and waits
// until they are served. They are deleted when the test ends;
// UninstallGatewayAPI deletes them earlier.
func (e *Env) InstallGatewayAPI(t testing.TB) {
	t.Helper()
	args := []string{"apply", "--server-side"}
	for _, f := range GatewayAPIManifests(t) {
		args = append(args, "-f", f)
	}
	ctx := context.Background()
	if out, err := e.Kubectl(ctx, args...); err != nil {
		t.Fatalf("install the Gateway API CRDs: %v: %s", err, out)
	}
	t.Cleanup(func() { e.UninstallGatewayAPI(t) })
	if out, err := e.Kubectl(ctx, "wait", "--for=condition=Established", "--timeout=60s",
		"crd/gateways.gateway.networking.k8s.io", "crd/gatewayclasses.gateway.networking.k8s.io"); err != nil {
		t.Fatalf("the Gateway API CRDs are not established: %v: %s", err, out)
	}
}

// UninstallGatewayAPI deletes the Gateway API CRDs, and with them every
// Gateway and GatewayClass, and waits until they are gone.
func (e *Env) UninstallGatewayAPI(t testing.TB) {
	t.Helper()
	if out, err := e.Kubectl(context.Background(), "delete", "--ignore-not-found", "--wait",
		"crd/gateways.gateway.networking.k8s.io", "crd/gatewayclasses.gateway.networking.k8s.io"); err != nil {
		t.Errorf("delete the Gateway API CRDs: %v: %s", err, out)
	}
}

// GatewayAPIManifests are the paths of GatewayAPICRDs of GatewayAPIVersion
// in the module cache (downloaded once through the module proxy), for a
// test that applies them to a cluster of its own.
func GatewayAPIManifests(t testing.TB) []string {
	t.Helper()
	dir := gatewayAPIModule(t)
	out := make([]string, len(GatewayAPICRDs))
	for i, f := range GatewayAPICRDs {
		out[i] = filepath.Join(dir, f)
	}
	return out
}

// gatewayAPIModule is the folder of sigs.k8s.io/gateway-api@GatewayAPIVersion
// in the module cache.
func gatewayAPIModule(t testing.TB) string {
	t.Helper()
	out, err := exec.Command("go", "mod", "download", "-json", "sigs.k8s.io/gateway-api@"+GatewayAPIVersion).Output()
	var mod struct{ Dir, Error string }
	if jerr := json.Unmarshal(out, &mod); err != nil || jerr != nil || mod.Dir == "" {
		t.Fatalf("download sigs.k8s.io/gateway-api@%s for its CRDs: %v %s %s", GatewayAPIVersion, err, mod.Error, exitStderr(err))
	}
	return mod.Dir
}

func exitStderr(err error) string {
	if ee, ok := err.(*exec.ExitError); ok {
		return string(ee.Stderr)
	}
	return ""
}
