// Command ipledger-release makes what one release ships (`make release`),
// offline, into .dev/release/v<VERSION>/: the four images for amd64 and
// arm64 (one OCI image index per service, in an archive) with an SBOM of
// each, every install flavour rendered with those images pinned by digest,
// the Helm chart's package (deploy/helm/ipledger, its images pinned the
// same way) and an OCI layout of it, kubectl-ipledger for Linux and macOS
// on both architectures in archives with their krew manifest, and
// SHA256SUMS over all of it (lab/release
// decides the forms). Pushing and publishing are a maintainer's
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

	"github.com/ipledger/ipledger/lab/containerimage"
	"github.com/ipledger/ipledger/lab/release"
)

const usage = `ipledger-release makes the artifacts of one release, offline (make release runs it).

Usage (from the repository root):
  ipledger-release [flags]

Into <out>/v<VERSION>/ it writes (docs/install.md, "From a release"):
  install/<flavour>.yaml        kubectl kustomize of base and every overlay but dev and e2e, images pinned by digest
  install/kustomization.yaml    the remote base at the tag v<VERSION> (--repo), images pinned by digest
  images/ipledger-<svc>.tar     OCI archive of ghcr.io/ipledger/<svc>:v<VERSION>, an image index of linux/<arch>...
  sbom/ipledger-<svc>_linux_<arch>.cdx.json  CycloneDX SBOM of each image's binary (hack/tools/sbom)
  chart/ipledger-<VERSION>.tgz  the Helm chart deploy/helm/ipledger, images pinned by digest (helm install)
  chart/oci/                    an OCI layout of that package, tagged <VERSION> (oras cp --from-oci-layout)
  chart/values-<flavour>.yaml   the chart's values of each install flavour but base (helm install -f)
  kubectl-ipledger_<os>_<arch>.tar.gz  the plugin, its completion script and LICENSE, for linux and darwin
  plugin.yaml                   the plugin's krew manifest: each archive's download and sha256
  SHA256SUMS                    sha256sum -c reads it
Every binary is stamped with the release and the commit (--version, ipledger_build_info). A work
tree with uncommitted changes is refused unless --allow-dirty: a release names one commit.

Push an image with every architecture, e.g.:
  skopeo copy --all oci-archive:.dev/release/v0.3.0/images/ipledger-ipam.tar docker://ghcr.io/ipledger/ipam:v0.3.0

Flags:
`

type options struct {
	out, kubectl, ca, repo string
	archs, oses            []string
	allowDirty             bool
}

func main() {
	o := options{}
	flag.StringVar(&o.out, "out", ".dev/release", "directory the release's directory v<VERSION> is made in")
	flag.StringVar(&o.kubectl, "kubectl", defaultKubectl(), "kubectl that renders the installs (default $IPLEDGER_TOOLS_BIN/kubectl, the pinned one)")
	flag.StringVar(&o.ca, "ca-certificates", containerimage.HostCACertificates, "CA bundle copied into every image")
	archs := flag.String("arch", "amd64,arm64", "comma-separated GOARCHes of the images and the plugin")
	oses := flag.String("os", "linux,darwin", "comma-separated GOOSes of the plugin")
	flag.StringVar(&o.repo, "repo", containerimage.Source, "git repository the release is tagged in: the remote base of install/kustomization.yaml and the krew manifest's downloads (<repo>/releases/download/v<VERSION>/)")
	flag.BoolVar(&o.allowDirty, "allow-dirty", false, "release a work tree with uncommitted changes (its revision says -dirty)")
	flag.Usage = func() {
		fmt.Fprint(flag.CommandLine.Output(), usage)
		flag.PrintDefaults()
	}
	flag.Parse()
	o.archs, o.oses = strings.Split(*archs, ","), strings.Split(*oses, ",")
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
	for _, d := range []string{"install", "images", "sbom", "bin"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			return err
		}
	}
	start := time.Now()
	step := func(format string, args ...any) {
		fmt.Printf("[%6s] %s\n", time.Since(start).Round(time.Second), fmt.Sprintf(format, args...))
	}
	step("release %s (revision %s) into %s", prov.Version, prov.Revision, dir)
	pinned, err := images(ctx, o, prov, dir, step)
	if err != nil {
		return err
	}
	if err := sboms(ctx, o, prov, dir); err != nil {
		return err
	}
	step("wrote the SBOMs into %s", filepath.Join(dir, "sbom"))
	if err := installs(ctx, o, prov, dir, pinned, step); err != nil {
		return err
	}
	if err := chart(prov, dir, pinned, step); err != nil {
		return err
	}
	if err := plugin(ctx, o, prov, dir, step); err != nil {
		return err
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

// installs renders every install flavour with its images pinned by the
// digests the release built, and writes the kustomization that pins the
// remote base at the release's tag the same way.
func installs(ctx context.Context, o options, prov containerimage.Provenance, dir string, pinned []release.Image, step func(string, ...any)) error {
	overlays, err := overlays()
	if err != nil {
		return err
	}
	// kustomize refuses an absolute path as a resource: the kustomization
	// that pins the digests names the install relative to itself.
	render := filepath.Join(dir, "bin", "render")
	if err := os.MkdirAll(render, 0o755); err != nil {
		return err
	}
	absRender, err := filepath.Abs(render)
	if err != nil {
		return err
	}
	for _, in := range release.Installs(overlays) {
		abs, err := filepath.Abs(filepath.Join("deploy", "kustomize", in.Dir))
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(absRender, abs)
		if err != nil {
			return err
		}
		k, err := release.Pinned("", filepath.ToSlash(rel), pinned)
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(render, "kustomization.yaml"), k, 0o644); err != nil {
			return err
		}
		out, err := exec.CommandContext(ctx, o.kubectl, "kustomize", render).Output()
		if err != nil {
			return fmt.Errorf("kubectl kustomize deploy/kustomize/%s: %w", in.Dir, stderr(err))
		}
		file := filepath.Join(dir, "install", in.Name+".yaml")
		if err := os.WriteFile(file, out, 0o644); err != nil {
			return err
		}
		step("rendered %s (deploy/kustomize/%s)", file, in.Dir)
	}
	header := "ipledger " + prov.Version + " from its tag, images pinned by digest: kubectl apply --server-side -k <this folder>.\n" +
		"Another install: replace base with overlays/<name> (production, cloud, ...) in the resource."
	k, err := release.Pinned(header, release.RemoteBase(o.repo, "base", prov.Version), pinned)
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "install", "kustomization.yaml"), k, 0o644)
}

// chart writes the Helm chart's package, its images pinned by the digests
// the release built, and an OCI layout of it.
// Beside them, the values of each install flavour but the base
// (deploy/helm/values-<overlay>.yaml).
func chart(prov containerimage.Provenance, dir string, pinned []release.Image, step func(string, ...any)) error {
	overlays, err := overlays()
	if err != nil {
		return err
	}
	pkg, err := release.ChartPackage(os.DirFS(release.ChartDir), prov.Version, pinned)
	if err != nil {
		return err
	}
	file := filepath.Join(dir, "chart", release.ChartPackageName(prov.Version))
	if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(file, pkg, 0o644); err != nil {
		return err
	}
	layout, digest, err := release.ChartLayout(pkg, prov.Version)
	if err != nil {
		return err
	}
	for p, data := range layout {
		f := filepath.Join(dir, "chart", "oci", filepath.FromSlash(p))
		if err := os.MkdirAll(filepath.Dir(f), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(f, data, 0o644); err != nil {
			return err
		}
	}
	for _, in := range release.Installs(overlays) {
		if in.Name == "base" {
			continue
		}
		name := release.ChartValuesFile(in.Name)
		values, err := os.ReadFile(filepath.Join(filepath.Dir(release.ChartDir), name))
		if err != nil {
			return fmt.Errorf("install/%s.yaml ships and the chart's values for it do not: %w", in.Name, err)
		}
		if err := os.WriteFile(filepath.Join(dir, "chart", name), values, 0o644); err != nil {
			return err
		}
	}
	step("wrote %s and its OCI layout %s (%s)", file, filepath.Join(dir, "chart", "oci"), digest)
	return nil
}

// overlays are the directories of deploy/kustomize/overlays.
func overlays() ([]string, error) {
	entries, err := os.ReadDir(filepath.Join("deploy", "kustomize", "overlays"))
	if err != nil {
		return nil, err
	}
	var out []string
	for _, e := range entries {
		if e.IsDir() {
			out = append(out, e.Name())
		}
	}
	return out, nil
}

// plugin builds kubectl-ipledger for every platform into its archive, and
// writes the krew manifest naming each archive's sha256.
func plugin(ctx context.Context, o options, prov containerimage.Provenance, dir string, step func(string, ...any)) error {
	license, err := os.ReadFile(release.License)
	if err != nil {
		return err
	}
	var artifacts []release.PluginArtifact
	for _, goos := range o.oses {
		for _, arch := range o.archs {
			p := release.Platform{OS: goos, Arch: arch}
			bin := filepath.Join(dir, "bin", goos+"-"+arch, release.PluginBinary)
			cmd := exec.CommandContext(ctx, "go", append(append([]string{"build"}, containerimage.GoBuildArgs(prov)...), "-o", bin, "./plugin/cmd/kubectl-ipledger")...)
			cmd.Env = append(append(os.Environ(), containerimage.GoBuildEnv...), "GOOS="+goos, "GOARCH="+arch)
			if out, err := cmd.CombinedOutput(); err != nil {
				return fmt.Errorf("kubectl-ipledger for %s/%s: %w\n%s", goos, arch, err, out)
			}
			binary, err := os.ReadFile(bin)
			if err != nil {
				return err
			}
			archive, err := release.PluginArchive(binary, license)
			if err != nil {
				return err
			}
			file := filepath.Join(dir, p.ArchiveName())
			if err := os.WriteFile(file, archive, 0o644); err != nil {
				return err
			}
			artifacts = append(artifacts, release.PluginArtifact{Platform: p, SHA256: release.SHA256(archive)})
			step("built %s", file)
		}
	}
	manifest, err := release.KrewManifest(containerimage.Source, o.repo+"/releases/download/v"+prov.Version, prov.Version, artifacts)
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "plugin.yaml"), manifest, 0o644)
}

// sboms writes a CycloneDX SBOM of every image's binary, per architecture,
// with hack/tools/sbom (a module of its own: its dependencies stay out of
// the shipped binaries' module graph).
func sboms(ctx context.Context, o options, prov containerimage.Provenance, dir string) error {
	tool, err := filepath.Abs(filepath.Join(dir, "bin", "sbom"))
	if err != nil {
		return err
	}
	build := exec.CommandContext(ctx, "go", "build", "-o", tool, ".")
	build.Dir = filepath.Join("hack", "tools", "sbom")
	build.Env = append(os.Environ(), "GOWORK=off")
	if out, err := build.CombinedOutput(); err != nil {
		return fmt.Errorf("building hack/tools/sbom: %w\n%s", err, out)
	}
	for _, arch := range o.archs {
		args := []string{"-version", "v" + prov.Version, "-suffix", "_linux_" + arch, "-out", filepath.Join(dir, "sbom")}
		for _, b := range containerimage.Binaries {
			args = append(args, filepath.Join(dir, "bin", arch, b.Name))
		}
		if out, err := exec.CommandContext(ctx, tool, args...).CombinedOutput(); err != nil {
			return fmt.Errorf("sbom for linux/%s: %w\n%s", arch, err, out)
		}
	}
	return nil
}

// images builds the services for every architecture, writes one index
// archive per service, and returns each image's repository and index digest.
func images(ctx context.Context, o options, prov containerimage.Provenance, dir string, step func(string, ...any)) ([]release.Image, error) {
	built := map[string]map[string]v1.Image{} // binary → arch → image
	for _, arch := range o.archs {
		bin := filepath.Join(dir, "bin", arch)
		if err := containerimage.GoBuild(ctx, ".", bin, arch, prov, containerimage.Binaries); err != nil {
			return nil, err
		}
		for _, b := range containerimage.Binaries {
			img, err := containerimage.Build(containerimage.Contents{
				Binary: filepath.Join(bin, b.Name), CACertificates: o.ca, Architecture: arch, Title: b.Name, Provenance: prov,
			})
			if err != nil {
				return nil, fmt.Errorf("%s for %s: %w", b.Name, arch, err)
			}
			if built[b.Name] == nil {
				built[b.Name] = map[string]v1.Image{}
			}
			built[b.Name][arch] = img
		}
		step("built the services for linux/%s", arch)
	}
	var pinned []release.Image
	for _, b := range containerimage.Binaries {
		idx, err := containerimage.Index(o.archs, built[b.Name])
		if err != nil {
			return nil, err
		}
		file := filepath.Join(dir, "images", b.Name+".tar")
		ref := b.Ref("v" + prov.Version)
		if err := containerimage.WriteIndexArchive(file, ref, idx); err != nil {
			return nil, fmt.Errorf("%s: %w", file, err)
		}
		digest, err := idx.Digest()
		if err != nil {
			return nil, err
		}
		pinned = append(pinned, release.Image{Repository: b.Repository, Digest: digest.String()})
		step("wrote %s: %s %s", file, ref, digest)
	}
	return pinned, nil
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
