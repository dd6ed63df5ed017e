// Package containerimage builds ipledger's container images without Docker
// or a registry: a static binary on an empty base, run as a non-root user,
// written as an OCI image archive that `ctr images import`, `podman load`
// and `docker load` read.
//
// The settings below are the ones the repository's Dockerfile spells for
// users with Docker; TestDockerfileMatchesSettings fails when the two drift.
package containerimage

import (
	"archive/tar"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/static"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/ipledger/ipledger/pkg/version"
)

// The settings every ipledger image is built with.
const (
	// Entrypoint is where the binary lives in the image, and what runs.
	Entrypoint = "/ipledger"
	// UID and GID are the user the binary runs as (distroless's "nonroot";
	// the Deployments' runAsUser and runAsGroup say the same).
	UID, GID = 65532, 65532
	// CACertificates is where the image carries the CA bundle (the path Go's
	// crypto/x509 reads on Linux): eipd talks HTTPS to EC2.
	CACertificates = "/etc/ssl/certs/ca-certificates.crt"
	// HostCACertificates is the bundle a build copies: Debian's
	// ca-certificates package, on the build machine as in the golang image.
	HostCACertificates = "/etc/ssl/certs/ca-certificates.crt"
	// Tag is the tag `make images` gives every image: not "latest", which
	// Kubernetes pulls on every start (deploy/kustomize/overlays/e2e uses it).
	Tag = "dev"
)

// GoBuildArgs are the `go build` arguments every binary is built with, and
// GoBuildEnv its environment: a static, reproducible, stripped binary that
// knows its release (pkg/version: --version, the startup log line,
// ipledger_build_info).
//
// The grpcnotrace tag keeps grpc-go from importing golang.org/x/net/trace,
// which nothing here uses. That package brings in text/template, whose
// reflective method calls make the linker keep every exported method of
// every type in the binary (client-go's typed clients for all API groups
// among them): without the tag ipam's binary is 52 MB instead of 34, eipd's
// 85 instead of 36, and a running ipam has 11–14 MB more of it resident
// (BENCHMARKS.md, ipam's session 7).
func GoBuildArgs(p Provenance) []string {
	return []string{"-trimpath", "-tags", "grpcnotrace", "-ldflags", "-s -w " + version.Stamp(p.Version, p.Revision)}
}

// GoBuildEnv is the environment of GoBuildArgs' build.
var GoBuildEnv = []string{"CGO_ENABLED=0"}

// epoch stamps every file and the image itself, so that the same binary
// always gives the same image digest.
var epoch = time.Unix(0, 0).UTC()

// Contents is what goes into one image.
type Contents struct {
	// Binary is the path of the static binary that becomes Entrypoint.
	Binary string
	// CACertificates is the path of a CA bundle copied to CACertificates;
	// empty for an image that makes no TLS connection of its own.
	CACertificates string
	// Architecture is the binary's GOARCH.
	Architecture string
	// Title becomes the org.opencontainers.image.title label.
	Title string
	// Provenance says what the image was built from (OCI labels).
	Provenance Provenance
}

// Source is the repository every image is built from.
const Source = "https://github.com/ipledger/ipledger"

// Provenance is what an image and its binary were built from, written as
// the OCI labels org.opencontainers.image.version, .revision and .source
// (`crane config`, `ctr images inspect`, `docker inspect` show them) and
// stamped into the binary (GoBuildArgs): the release (the repository's
// VERSION file) and the git commit. Empty label fields are left out.
type Provenance struct {
	Version  string
	Revision string
}

// ReadProvenance is the Provenance of the work tree at root: its VERSION
// file, and $IPLEDGER_REVISION or else the git commit (with "-dirty" when
// tracked files have changes; "unknown" outside a git work tree).
func ReadProvenance(ctx context.Context, root string) (Provenance, error) {
	v, err := os.ReadFile(filepath.Join(root, "VERSION"))
	if err != nil {
		return Provenance{}, fmt.Errorf("the release version: %w (run from the repository root)", err)
	}
	p := Provenance{Version: strings.TrimSpace(string(v)), Revision: os.Getenv("IPLEDGER_REVISION")}
	if p.Revision != "" {
		return p, nil
	}
	p.Revision = "unknown"
	git := func(args ...string) ([]byte, error) {
		cmd := exec.CommandContext(ctx, "git", args...)
		cmd.Dir = root
		return cmd.Output()
	}
	if out, err := git("rev-parse", "HEAD"); err == nil {
		p.Revision = strings.TrimSpace(string(out))
		if st, err := git("status", "--porcelain", "--untracked-files=no"); err == nil && len(st) > 0 {
			p.Revision += "-dirty"
		}
	}
	return p, nil
}

// labels are the image's OCI labels.
func (c Contents) labels() map[string]string {
	out := map[string]string{"org.opencontainers.image.title": c.Title, "org.opencontainers.image.source": Source}
	if v := c.Provenance.Version; v != "" {
		out["org.opencontainers.image.version"] = v
	}
	if r := c.Provenance.Revision; r != "" {
		out["org.opencontainers.image.revision"] = r
	}
	return out
}

// Build assembles the image of c: one uncompressed layer, the
// configuration (user, entrypoint) and OCI media types, stamped with the
// Unix epoch.
func Build(c Contents) (v1.Image, error) {
	layerTar, err := layer(c)
	if err != nil {
		return nil, err
	}
	return assemble(layerTar, c.Architecture, v1.Config{
		Entrypoint: []string{Entrypoint},
		User:       strconv.Itoa(UID) + ":" + strconv.Itoa(GID),
		WorkingDir: "/",
		Labels:     c.labels(),
	})
}

// assemble is the image of one layer and config for linux/arch, with OCI
// media types, stamped with the Unix epoch.
func assemble(layerTar []byte, arch string, config v1.Config) (v1.Image, error) {
	// Uncompressed: the archive is imported on this machine, never pushed,
	// so gzip would cost seconds per build (and per check that nothing
	// changed) to save disk in .dev/ only.
	l := static.NewLayer(layerTar, types.OCIUncompressedLayer)
	img, err := mutate.AppendLayers(mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON), l)
	if err != nil {
		return nil, err
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cfg = cfg.DeepCopy()
	cfg.OS, cfg.Architecture = "linux", arch
	cfg.Created = v1.Time{Time: epoch}
	cfg.Config = config
	return mutate.ConfigFile(img, cfg)
}

// layer is the image's only layer, as an uncompressed tar: the directories
// leading to each file, owned by root (the user cannot change them).
func layer(c Contents) ([]byte, error) {
	type file struct {
		src, dst string
		mode     int64
	}
	files := []file{{src: c.Binary, dst: Entrypoint, mode: 0o755}}
	if c.CACertificates != "" {
		files = append(files, file{src: c.CACertificates, dst: CACertificates, mode: 0o644})
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	dirs := map[string]bool{}
	for _, f := range files {
		data, err := os.ReadFile(f.src)
		if err != nil {
			return nil, fmt.Errorf("image file %s: %w", f.dst, err)
		}
		if err := writeDirs(tw, dirs, path.Dir(f.dst)); err != nil {
			return nil, err
		}
		hdr := &tar.Header{Typeflag: tar.TypeReg, Name: f.dst[1:], Mode: f.mode, Size: int64(len(data)), ModTime: epoch, Format: tar.FormatPAX}
		if err := tw.WriteHeader(hdr); err != nil {
			return nil, err
		}
		if _, err := tw.Write(data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// writeDirs writes the entries of dir and its parents not written yet.
func writeDirs(tw *tar.Writer, done map[string]bool, dir string) error {
	if dir == "/" || done[dir] {
		return nil
	}
	if err := writeDirs(tw, done, path.Dir(dir)); err != nil {
		return err
	}
	done[dir] = true
	return tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: dir[1:] + "/", Mode: 0o755, ModTime: epoch, Format: tar.FormatPAX})
}
