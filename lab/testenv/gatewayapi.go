package testenv

import (
	"context"
	"encoding/json"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
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

// gatewayAPI is the Gateway API's CRDs as thirdPartyCRDs.
var gatewayAPI = thirdPartyCRDs{what: "the Gateway API CRDs", module: "sigs.k8s.io/gateway-api", version: GatewayAPIVersion, files: GatewayAPICRDs,
	names: []string{"crd/gateways.gateway.networking.k8s.io", "crd/gatewayclasses.gateway.networking.k8s.io"}}

// MetalLBVersion is the MetalLB release whose CRDs the tests install: the
// one hack/tools/metallb pins, whose speaker test/cluster runs.
const MetalLBVersion = "v0.16.1"

// metalLB is MetalLB's CRDs that ipledger reads (what announces an
// address, and from which node), from the go.universe.tf/metallb module.
var metalLB = thirdPartyCRDs{what: "MetalLB's CRDs", module: "go.universe.tf/metallb", version: MetalLBVersion,
	files: []string{"config/crd/bases/metallb.io_ipaddresspools.yaml", "config/crd/bases/metallb.io_l2advertisements.yaml",
		"config/crd/bases/metallb.io_bgpadvertisements.yaml", "config/crd/bases/metallb.io_servicel2statuses.yaml",
		"config/crd/bases/metallb.io_servicebgpstatuses.yaml"},
	names: []string{"crd/ipaddresspools.metallb.io", "crd/l2advertisements.metallb.io", "crd/bgpadvertisements.metallb.io",
		"crd/servicel2statuses.metallb.io", "crd/servicebgpstatuses.metallb.io"}}

// Kubectl runs kubectl against one cluster and returns its output.
type Kubectl func(ctx context.Context, args ...string) ([]byte, error)

// WaitEstablished waits until the CRDs named (crd/<name>, or -f with
// their files) are Established. kubectl wait fails at once, with
// ".status.conditions accessor error", on a CRD just created whose status
// has no conditions yet: it is asked again until timeout passes.
func WaitEstablished(ctx context.Context, kubectl Kubectl, timeout time.Duration, names ...string) ([]byte, error) {
	var out []byte
	err := Poll(timeout, func() error {
		var err error
		out, err = kubectl(ctx, append([]string{"wait", "--for=condition=Established", "--timeout=10s"}, names...)...)
		return err
	})
	return out, err
}

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
func InstallGatewayAPIWith(t testing.TB, kubectl Kubectl) { gatewayAPI.install(t, kubectl) }

// UninstallGatewayAPIWith deletes the Gateway API CRDs, and with them every
// Gateway and GatewayClass, and waits until they are gone.
func UninstallGatewayAPIWith(t testing.TB, kubectl Kubectl) { gatewayAPI.uninstall(t, kubectl) }

// InstallMetalLB applies MetalLB's CRDs of MetalLBVersion that ipledger
// reads (IPAddressPool, L2/BGPAdvertisement, ServiceL2/BGPStatus; no
// MetalLB process runs) to the test's API server, as InstallGatewayAPI;
// UninstallMetalLB deletes them earlier than the test's end.
func (e *Env) InstallMetalLB(t testing.TB) { metalLB.install(t, e.Kubectl) }

// UninstallMetalLB deletes MetalLB's CRDs, and with them all their objects.
func (e *Env) UninstallMetalLB(t testing.TB) { metalLB.uninstall(t, e.Kubectl) }

// thirdPartyCRDs are CRDs ipledger reads but does not ship, as files of a
// Go module.
type thirdPartyCRDs struct {
	what, module, version string
	files, names          []string // paths in the module; kubectl names
}

func (c thirdPartyCRDs) install(t testing.TB, kubectl Kubectl) {
	t.Helper()
	args := []string{"apply", "--server-side"}
	for _, f := range c.manifests(t) {
		args = append(args, "-f", f)
	}
	ctx := context.Background()
	if out, err := kubectl(ctx, args...); err != nil {
		t.Fatalf("install %s: %v: %s", c.what, err, out)
	}
	t.Cleanup(func() { c.uninstall(t, kubectl) })
	if out, err := WaitEstablished(ctx, kubectl, time.Minute, c.names...); err != nil {
		t.Fatalf("%s are not established: %v: %s", c.what, err, out)
	}
}

func (c thirdPartyCRDs) uninstall(t testing.TB, kubectl Kubectl) {
	t.Helper()
	if out, err := kubectl(context.Background(), append([]string{"delete", "--ignore-not-found", "--wait"}, c.names...)...); err != nil {
		t.Errorf("delete %s: %v: %s", c.what, err, out)
	}
}

// manifests are the paths of the CRDs' files in the module cache.
func (c thirdPartyCRDs) manifests(t testing.TB) []string {
	t.Helper()
	out, err := exec.Command("go", "mod", "download", "-json", c.module+"@"+c.version).Output()
	var mod struct{ Dir, Error string }
	if jerr := json.Unmarshal(out, &mod); err != nil || jerr != nil || mod.Dir == "" {
		t.Fatalf("download %s@%s for its CRDs: %v %s %s", c.module, c.version, err, mod.Error, exitStderr(err))
	}
	paths := make([]string, len(c.files))
	for i, f := range c.files {
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
