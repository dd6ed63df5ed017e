package containerimage

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// Binary is one ipledger binary and the image it ships in.
type Binary struct {
	// Name is the binary's name, and its archive's (<Name>.tar).
	Name string
	// Package is its main package, relative to the repository root.
	Package string
	// Repository is the image repository deploy/kustomize/base references.
	Repository string
}

// Registry is where ipledger's images live: deploy/kustomize/base names
// <Registry>/<service> at the tag v<VERSION> (fully qualified, so that no
// runtime resolves it against a registry ipledger does not own).
const Registry = "ghcr.io/ipledger"

// Binaries are the images ipledger ships: one per service, built from
// services/<service>/cmd/ipledger-<service> into <Registry>/<service> (the
// Dockerfile's --build-arg SERVICE=<service>).
var Binaries = []Binary{
	service("watcher"),
	service("ipam"),
	service("endpoints"),
	service("eipd"),
	service("signer"),
}

func service(name string) Binary {
	return Binary{
		Name:       "ipledger-" + name,
		Package:    "./services/" + name + "/cmd/ipledger-" + name,
		Repository: Registry + "/" + name,
	}
}

// Ref is the image reference of b at tag, e.g. "ghcr.io/ipledger/ipam:dev".
func (b Binary) Ref(tag string) string { return b.Repository + ":" + tag }

// GoBuild builds bins for linux/arch with GoBuildArgs(p) and GoBuildEnv
// into outDir (one `go build`, so packages compile in parallel and a binary
// that is up to date is not linked again), run in the Go workspace at root.
func GoBuild(ctx context.Context, root, outDir, arch string, p Provenance, bins []Binary) error {
	args := append([]string{"build"}, GoBuildArgs(p)...)
	args = append(args, "-o", outDir+string(filepath.Separator))
	for _, b := range bins {
		args = append(args, b.Package)
	}
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = root
	cmd.Env = append(append(os.Environ(), GoBuildEnv...), "GOOS=linux", "GOARCH="+arch)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go %s: %w\n%s", strings.Join(args, " "), err, out)
	}
	return nil
}
