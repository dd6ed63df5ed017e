// Command ipledger-release makes what one release ships (`make release`),
// offline, into .dev/release/v<VERSION>/: the rendered install manifests,
// the four images for amd64 and arm64 (one OCI image index per service, in
// an archive), kubectl-ipledger for Linux and macOS on both architectures,
// and SHA256SUMS over all of it. Pushing and publishing are a maintainer's
// separate step (`crane push`, `skopeo copy oci-archive:…`, a GitHub
// release): nothing here talks to a registry.
package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/ipledger/ipledger/pkg/containerimage"
)

const usage = `ipledger-release makes the artifacts of one release, offline (make release runs it).

Usage (from the repository root):
  ipledger-release [flags]

Into <out>/v<VERSION>/ it writes:
  install/<name>.yaml           kubectl kustomize of each shipped install (base, overlays/production, overlays/cloud)
  images/ipledger-<svc>.tar     OCI archive of ghcr.io/ipledger/<svc>:v<VERSION>, an image index of linux/<arch>...
  kubectl-ipledger-<os>-<arch>  the plugin for linux and darwin on every --arch
  SHA256SUMS                    sha256sum -c reads it
Every binary is stamped with the release and the commit (--version, ipledger_build_info). A work
tree with uncommitted changes is refused unless --allow-dirty: a release names one commit.

Push an image with every architecture, e.g.:
  skopeo copy --all oci-archive:.dev/release/v0.3.0/images/ipledger-ipam.tar docker://ghcr.io/ipledger/ipam:v0.3.0

Flags:
`

// installs are the kustomizations a release renders (docs/install.md's table).
var installs = []string{"base", "overlays/production", "overlays/cloud"}

// pluginOSes are the systems kubectl-ipledger is built for.
var pluginOSes = []string{"linux", "darwin"}

type options struct {
	out, kubectl, ca string
	archs            []string
	allowDirty       bool
}

func main() {
	o := options{}
	flag.StringVar(&o.out, "out", ".dev/release", "directory the release's directory v<VERSION> is made in")
	flag.StringVar(&o.kubectl, "kubectl", defaultKubectl(), "kubectl that renders the installs (default $IPLEDGER_TOOLS_BIN/kubectl, the pinned one)")
	flag.StringVar(&o.ca, "ca-certificates", containerimage.HostCACertificates, "CA bundle copied into every image")
	archs := flag.String("arch", "amd64,arm64", "comma-separated GOARCHes of the images and the plugin")
	flag.BoolVar(&o.allowDirty, "allow-dirty", false, "release a work tree with uncommitted changes (its revision says -dirty)")
	flag.Usage = func() {
		fmt.Fprint(flag.CommandLine.Output(), usage)
		flag.PrintDefaults()
	}
	flag.Parse()
	o.archs = strings.Split(*archs, ",")
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	prov, err := containerimage.ReadProvenance(ctx, ".")
	if err == nil {
		err = run(ctx, o, prov)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "ipledger-release:", err)
		os.Exit(1)
	}
}

func defaultKubectl() string {
	if bin := os.Getenv("IPLEDGER_TOOLS_BIN"); bin != "" {
		return filepath.Join(bin, "kubectl")
	}
	return "kubectl"
}

func run(ctx context.Context, o options, prov containerimage.Provenance) error {
	if strings.HasSuffix(prov.Revision, "-dirty") && !o.allowDirty {
		return errors.New("the work tree has uncommitted changes: commit them, or pass --allow-dirty for a trial release")
	}
	dir := filepath.Join(o.out, "v"+prov.Version)
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	for _, d := range []string{"install", "images", "bin"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			return err
		}
	}
	start := time.Now()
	step := func(format string, args ...any) {
		fmt.Printf("[%6s] %s\n", time.Since(start).Round(time.Second), fmt.Sprintf(format, args...))
	}
	step("release %s (revision %s) into %s", prov.Version, prov.Revision, dir)
	for _, name := range installs {
		out, err := exec.CommandContext(ctx, o.kubectl, "kustomize", filepath.Join("deploy", "kustomize", name)).Output()
		if err != nil {
			return fmt.Errorf("kubectl kustomize %s: %w", name, stderr(err))
		}
		file := filepath.Join(dir, "install", strings.ReplaceAll(name, "/", "-")+".yaml")
		if err := os.WriteFile(file, out, 0o644); err != nil {
			return err
		}
		step("rendered %s", file)
	}
	if err := images(ctx, o, prov, dir, step); err != nil {
		return err
	}
	for _, goos := range pluginOSes {
		for _, arch := range o.archs {
			file := filepath.Join(dir, "kubectl-ipledger-"+goos+"-"+arch)
			cmd := exec.CommandContext(ctx, "go", append(append([]string{"build"}, containerimage.GoBuildArgs(prov)...), "-o", file, "./plugin/cmd/kubectl-ipledger")...)
			cmd.Env = append(append(os.Environ(), containerimage.GoBuildEnv...), "GOOS="+goos, "GOARCH="+arch)
			if out, err := cmd.CombinedOutput(); err != nil {
				return fmt.Errorf("kubectl-ipledger for %s/%s: %w\n%s", goos, arch, err, out)
			}
			step("built %s", file)
		}
	}
	if err := os.RemoveAll(filepath.Join(dir, "bin")); err != nil {
		return err
	}
	if err := checksums(dir); err != nil {
		return err
	}
	step("wrote %s", filepath.Join(dir, "SHA256SUMS"))
	return nil
}

// images builds the services for every architecture and writes one index
// archive per service.
func images(ctx context.Context, o options, prov containerimage.Provenance, dir string, step func(string, ...any)) error {
	built := map[string]map[string]v1.Image{} // binary → arch → image
	for _, arch := range o.archs {
		bin := filepath.Join(dir, "bin", arch)
		if err := containerimage.GoBuild(ctx, ".", bin, arch, prov, containerimage.Binaries); err != nil {
			return err
		}
		for _, b := range containerimage.Binaries {
			img, err := containerimage.Build(containerimage.Contents{
				Binary: filepath.Join(bin, b.Name), CACertificates: o.ca, Architecture: arch, Title: b.Name, Provenance: prov,
			})
			if err != nil {
				return fmt.Errorf("%s for %s: %w", b.Name, arch, err)
			}
			if built[b.Name] == nil {
				built[b.Name] = map[string]v1.Image{}
			}
			built[b.Name][arch] = img
		}
		step("built the services for linux/%s", arch)
	}
	for _, b := range containerimage.Binaries {
		idx, err := containerimage.Index(o.archs, built[b.Name])
		if err != nil {
			return err
		}
		file := filepath.Join(dir, "images", b.Name+".tar")
		ref := b.Ref("v" + prov.Version)
		if err := containerimage.WriteIndexArchive(file, ref, idx); err != nil {
			return fmt.Errorf("%s: %w", file, err)
		}
		digest, err := idx.Digest()
		if err != nil {
			return err
		}
		step("wrote %s: %s %s", file, ref, digest)
	}
	return nil
}

// checksums writes SHA256SUMS over every file under dir, in the format of
// sha256sum.
func checksums(dir string) error {
	var lines []string
	err := filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		f, err := os.Open(path)
		if err != nil {
			return err
		}
		defer f.Close()
		h := sha256.New()
		if _, err := io.Copy(h, f); err != nil {
			return err
		}
		rel, err := filepath.Rel(dir, path)
		if err != nil {
			return err
		}
		lines = append(lines, hex.EncodeToString(h.Sum(nil))+"  "+filepath.ToSlash(rel))
		return nil
	})
	if err != nil {
		return err
	}
	slices.SortFunc(lines, func(a, b string) int { return strings.Compare(a[66:], b[66:]) })
	return os.WriteFile(filepath.Join(dir, "SHA256SUMS"), []byte(strings.Join(lines, "\n")+"\n"), 0o644)
}

func stderr(err error) error {
	var ee *exec.ExitError
	if errors.As(err, &ee) && len(ee.Stderr) > 0 {
		return fmt.Errorf("%w: %s", err, strings.TrimSpace(string(ee.Stderr)))
	}
	return err
}
