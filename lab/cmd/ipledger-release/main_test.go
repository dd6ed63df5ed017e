package main

import (
	"archive/tar"
	"bufio"
	"bytes"
	"cmp"
	"compress/gzip"
	"context"
	"debug/buildinfo"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"sigs.k8s.io/yaml"

	"github.com/ipledger/ipledger/lab/containerimage"
	"github.com/ipledger/ipledger/lab/controlplane"
	"github.com/ipledger/ipledger/lab/objdiff"
	"github.com/ipledger/ipledger/lab/release"
)

// kubectl is the pinned kubectl (hack/build-tools.sh) that renders the
// installs, found once by TestMain; needing the tools (and minutes of go
// build) keeps this package out of `make test-unit`'s fast layer.
var kubectl string

func TestMain(m *testing.M) {
	tools, err := controlplane.ToolsBin()
	if err != nil {
		fmt.Fprintln(os.Stderr, "the pinned tools:", err)
		os.Exit(1)
	}
	kubectl = filepath.Join(tools, "kubectl")
	os.Exit(m.Run())
}

// TestReleaseDirectoryIsWhatAUserInstalls builds a release directory (linux
// and amd64 only: macOS's plugin is the same build for another GOOS, and
// its cold build of client-go takes minutes) into a temporary folder, with a local git repository standing in
// for the project's (its deploy/kustomize tagged v<VERSION>), and checks it
// as a user consumes it, reading nothing but that directory and the tag:
// every install names only images by the digests its archives hold; the
// kustomization of the remote base at the tag renders the same base install;
// the krew manifest's sha256s are its archives', and each archive holds the
// plugin and a completion script that completes; each image's SBOM lists
// the modules of the binary inside that image; the Helm chart's package,
// rendered by Helm with each flavour's values, is the objects of that
// flavour's install, and its OCI layout holds it; SHA256SUMS covers every
// file.
func TestReleaseDirectoryIsWhatAUserInstalls(t *testing.T) {
	root, err := controlplane.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	t.Chdir(root)
	prov, err := containerimage.ReadProvenance(context.Background(), ".")
	if err != nil {
		t.Fatal(err)
	}
	repo := tagDeploy(t, root, "v"+prov.Version)
	o := options{out: t.TempDir(), kubectl: kubectl, ca: containerimage.HostCACertificates, repo: "file://" + repo, archs: []string{"amd64"}, oses: []string{"linux"}, allowDirty: true}
	if err := run(t.Context(), o, prov); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(o.out, "v"+prov.Version)

	digests := map[string]string{} // repository → index digest in its archive
	for _, b := range containerimage.Binaries {
		d, ok, err := containerimage.ArchivedDigest(filepath.Join(dir, "images", b.Name+".tar"), b.Ref("v"+prov.Version))
		if err != nil || !ok {
			t.Fatalf("images/%s.tar names no %s (%v)", b.Name, b.Ref("v"+prov.Version), err)
		}
		digests[b.Repository] = d.String()
	}

	t.Run("installs reference only the archives' digests", func(t *testing.T) {
		files, err := filepath.Glob(filepath.Join(dir, "install", "*.yaml"))
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, f := range files {
			if filepath.Base(f) == "kustomization.yaml" {
				continue
			}
			names = append(names, strings.TrimSuffix(filepath.Base(f), ".yaml"))
			refs := imageRefs(t, f)
			if len(refs) == 0 {
				t.Errorf("%s runs no image", f)
			}
			for _, ref := range refs {
				repo, digest, ok := strings.Cut(ref, "@")
				if !ok || digests[repo] != digest {
					t.Errorf("%s runs %s: want <repository>@<digest> of an archive in images/ (%v)", filepath.Base(f), ref, digests)
				}
			}
		}
		for _, want := range []string{"base", "production", "cloud"} {
			if !slices.Contains(names, want) {
				t.Errorf("install/%s.yaml missing; have %v", want, names)
			}
		}
	})

	t.Run("the remote base at the tag renders the base install", func(t *testing.T) {
		out, err := exec.Command(kubectl, "kustomize", filepath.Join(dir, "install")).Output()
		if err != nil {
			t.Fatalf("kubectl kustomize install/ (the remote base at v%s): %v", prov.Version, stderr(err))
		}
		base, err := os.ReadFile(filepath.Join(dir, "install", "base.yaml"))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(out, base) {
			t.Errorf("install/kustomization.yaml renders other objects than install/base.yaml")
		}
	})

	t.Run("krew manifest and plugin archives", func(t *testing.T) {
		raw, err := os.ReadFile(filepath.Join(dir, "plugin.yaml"))
		if err != nil {
			t.Fatal(err)
		}
		var manifest struct {
			Spec struct {
				Version   string `json:"version"`
				Platforms []struct {
					Selector struct {
						MatchLabels map[string]string `json:"matchLabels"`
					} `json:"selector"`
					URI    string `json:"uri"`
					SHA256 string `json:"sha256"`
					Bin    string `json:"bin"`
				} `json:"platforms"`
			} `json:"spec"`
		}
		if err := yaml.Unmarshal(raw, &manifest); err != nil {
			t.Fatal(err)
		}
		if manifest.Spec.Version != "v"+prov.Version || len(manifest.Spec.Platforms) != len(o.oses) {
			t.Fatalf("plugin.yaml: version %s with %d platforms, want v%s with %d", manifest.Spec.Version, len(manifest.Spec.Platforms), prov.Version, len(o.oses))
		}
		for _, p := range manifest.Spec.Platforms {
			archive, err := os.ReadFile(filepath.Join(dir, filepath.Base(p.URI)))
			if err != nil {
				t.Fatalf("plugin.yaml names %s: %v", p.URI, err)
			}
			if got := release.SHA256(archive); got != p.SHA256 {
				t.Errorf("%s: sha256 %s, plugin.yaml says %s", filepath.Base(p.URI), got, p.SHA256)
			}
			files := untarGz(t, archive, t.TempDir())
			for _, f := range []string{p.Bin, release.CompletionScript, release.License} {
				if files[f]&0o111 == 0 && f != release.License {
					t.Errorf("%s: %s missing or not executable", filepath.Base(p.URI), f)
				}
			}
		}
	})

	t.Run("the completion script completes kubectl ipledger", func(t *testing.T) {
		if runtime.GOOS != "linux" || runtime.GOARCH != "amd64" {
			t.Fatalf("this test runs the linux/amd64 plugin; the host is %s/%s", runtime.GOOS, runtime.GOARCH)
		}
		archive, err := os.ReadFile(filepath.Join(dir, release.Platform{OS: "linux", Arch: "amd64"}.ArchiveName()))
		if err != nil {
			t.Fatal(err)
		}
		bin := t.TempDir()
		untarGz(t, archive, bin)
		cmd := exec.Command(filepath.Join(bin, release.CompletionScript), "")
		cmd.Env = append(os.Environ(), "PATH="+bin+string(os.PathListSeparator)+os.Getenv("PATH"))
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("%s: %v", release.CompletionScript, stderr(err))
		}
		for _, want := range []string{"why", "pools"} {
			if !regexp.MustCompile(`(?m)^` + want + `\t`).Match(out) {
				t.Errorf("completion of kubectl ipledger offers no %q:\n%s", want, out)
			}
		}
	})

	t.Run("an SBOM per image lists its binary's modules", func(t *testing.T) {
		for _, b := range containerimage.Binaries {
			binary := imageBinary(t, filepath.Join(dir, "images", b.Name+".tar"), "amd64")
			info, err := buildinfo.Read(bytes.NewReader(binary))
			if err != nil {
				t.Fatalf("%s: %v", b.Name, err)
			}
			want := []string{info.Main.Path + "@v" + prov.Version, "std@" + info.GoVersion}
			for _, d := range info.Deps {
				want = append(want, d.Path+"@"+d.Version)
			}
			got := sbomModules(t, filepath.Join(dir, "sbom", b.Name+"_linux_amd64.cdx.json"))
			slices.Sort(want)
			if !slices.Equal(got, want) {
				t.Errorf("sbom/%s_linux_amd64.cdx.json lists\n%v\nthe binary in its image links\n%v", b.Name, got, want)
			}
		}
	})

	t.Run("the chart renders the installs", func(t *testing.T) {
		helm, err := controlplane.HelmBin()
		if err != nil {
			t.Fatal(err)
		}
		pkg := filepath.Join(dir, "chart", release.ChartPackageName(prov.Version))
		files, err := filepath.Glob(filepath.Join(dir, "install", "*.yaml"))
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range files {
			name := strings.TrimSuffix(filepath.Base(f), ".yaml")
			if name == "kustomization" {
				continue
			}
			args := []string{"template", "ipledger", pkg, "--namespace", "ipledger-system"}
			if name != "base" {
				args = append(args, "--values", filepath.Join(dir, "chart", release.ChartValuesFile(name)))
			}
			cmd := exec.Command(helm, args...)
			cmd.Env = append(os.Environ(), "HELM_CACHE_HOME="+t.TempDir(), "HELM_CONFIG_HOME="+t.TempDir(), "HELM_DATA_HOME="+t.TempDir())
			start := time.Now()
			got, err := cmd.Output()
			if err != nil {
				t.Fatalf("helm %s: %v", strings.Join(args, " "), stderr(err))
			}
			took := time.Since(start)
			want, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			diffs, err := objdiff.Diff("the chart", got, "install/"+name+".yaml", want, 10)
			if err != nil {
				t.Fatal(err)
			}
			for _, d := range diffs {
				t.Errorf("%s", d)
			}
			t.Logf("chart/%s with %s: the objects of install/%s.yaml (%d differences), rendered in %v", filepath.Base(pkg), cmp.Or(strings.Join(args[5:], " "), "its defaults"), name, len(diffs), took.Round(time.Millisecond))
		}
	})

	t.Run("the chart's OCI layout holds its package", func(t *testing.T) {
		pkg, err := os.ReadFile(filepath.Join(dir, "chart", release.ChartPackageName(prov.Version)))
		if err != nil {
			t.Fatal(err)
		}
		// Read as an OCI layout reader does (go-containerregistry's, which
		// crane uses); lab/release's tests check each blob's digest.
		idx, err := layout.ImageIndexFromPath(filepath.Join(dir, "chart", "oci"))
		if err != nil {
			t.Fatal(err)
		}
		im, err := idx.IndexManifest()
		if err != nil {
			t.Fatal(err)
		}
		if len(im.Manifests) != 1 || im.Manifests[0].Annotations["org.opencontainers.image.ref.name"] != prov.Version {
			t.Fatalf("chart/oci/index.json: %+v; want one manifest tagged %s", im.Manifests, prov.Version)
		}
		img, err := idx.Image(im.Manifests[0].Digest)
		if err != nil {
			t.Fatal(err)
		}
		m, err := img.Manifest()
		if err != nil {
			t.Fatal(err)
		}
		if string(m.Config.MediaType) != release.HelmConfigMediaType || len(m.Layers) != 1 || string(m.Layers[0].MediaType) != release.HelmContentMediaType {
			t.Fatalf("chart/oci's manifest: config %s, layers %+v; want Helm's config and one chart layer", m.Config.MediaType, m.Layers)
		}
		layers, err := img.Layers()
		if err != nil {
			t.Fatal(err)
		}
		rc, err := layers[0].Compressed()
		if err != nil {
			t.Fatal(err)
		}
		defer rc.Close()
		blob, err := io.ReadAll(rc)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(blob, pkg) {
			t.Errorf("chart/oci's layer (%d bytes) is not chart/%s (%d bytes)", len(blob), release.ChartPackageName(prov.Version), len(pkg))
		}
	})

	t.Run("SHA256SUMS covers every file", func(t *testing.T) {
		f, err := os.Open(filepath.Join(dir, "SHA256SUMS"))
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		listed := map[string]string{}
		for s := bufio.NewScanner(f); s.Scan(); {
			sum, name, _ := strings.Cut(s.Text(), "  ")
			listed[name] = sum
		}
		err = filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
			if err != nil || d.IsDir() || d.Name() == "SHA256SUMS" {
				return err
			}
			rel, _ := filepath.Rel(dir, path)
			data, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			if listed[rel] != release.SHA256(data) {
				t.Errorf("SHA256SUMS: %s is %q, want %s", rel, listed[rel], release.SHA256(data))
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	})
}

// tagDeploy makes a git repository holding the work tree's deploy/kustomize
// (uncommitted changes too), tagged tag: what a remote base at the
// release's tag reads.
func tagDeploy(t *testing.T, root, tag string) string {
	t.Helper()
	repo := t.TempDir()
	git := func(args ...string) {
		t.Helper()
		cmd := exec.Command("git", append([]string{"-c", "user.name=test", "-c", "user.email=test@example.com"}, args...)...)
		cmd.Dir = repo
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
	}
	if out, err := exec.Command("cp", "-r", "--parents", "deploy/kustomize", repo).CombinedOutput(); err != nil {
		t.Fatalf("copying deploy/kustomize: %v\n%s", err, out)
	}
	git("init", "-q")
	git("add", ".")
	git("commit", "-q", "-m", "release")
	git("tag", tag)
	return repo
}

// imageRefs are the images the containers of a rendered install run.
func imageRefs(t *testing.T, file string) []string {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, m := range regexp.MustCompile(`(?m)^\s+image: (\S+)$`).FindAllSubmatch(data, -1) {
		out = append(out, string(m[1]))
	}
	return out
}

// untarGz extracts archive into dir and returns each file's mode.
func untarGz(t *testing.T, archive []byte, dir string) map[string]os.FileMode {
	t.Helper()
	zr, err := gzip.NewReader(bytes.NewReader(archive))
	if err != nil {
		t.Fatal(err)
	}
	modes := map[string]os.FileMode{}
	eachFile(t, zr, func(name string, mode os.FileMode, data []byte) {
		modes[name] = mode
		if err := os.WriteFile(filepath.Join(dir, filepath.Base(name)), data, mode); err != nil {
			t.Fatal(err)
		}
	})
	return modes
}

// eachFile calls file for every regular file of the tar stream r.
func eachFile(t *testing.T, r io.Reader, file func(name string, mode os.FileMode, data []byte)) {
	t.Helper()
	tr := tar.NewReader(r)
	for hdr, err := tr.Next(); !errors.Is(err, io.EOF); hdr, err = tr.Next() {
		if err != nil {
			t.Fatal(err)
		}
		if hdr.Typeflag != tar.TypeReg {
			continue
		}
		data, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		file(hdr.Name, os.FileMode(hdr.Mode)&os.ModePerm, data)
	}
}

// imageBinary is the entrypoint binary of the linux/arch image in the index
// archive at path.
func imageBinary(t *testing.T, path, arch string) []byte {
	t.Helper()
	dir := t.TempDir()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	eachFile(t, f, func(name string, _ os.FileMode, data []byte) {
		target := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(target), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(target, data, 0o644); err != nil {
			t.Fatal(err)
		}
	})
	top, err := layout.ImageIndexFromPath(dir)
	if err != nil {
		t.Fatal(err)
	}
	var binary []byte
	eachFile(t, mutate.Extract(platformImage(t, top, arch)), func(name string, _ os.FileMode, data []byte) {
		if "/"+name == containerimage.Entrypoint {
			binary = data
		}
	})
	if binary == nil {
		t.Fatalf("%s: no %s in the linux/%s image", path, containerimage.Entrypoint, arch)
	}
	return binary
}

// platformImage finds the linux/arch image under an archive's top index
// (which names the release's image index).
func platformImage(t *testing.T, idx v1.ImageIndex, arch string) v1.Image {
	t.Helper()
	m, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range m.Manifests {
		if d.Platform != nil && d.Platform.Architecture == arch {
			img, err := idx.Image(d.Digest)
			if err != nil {
				t.Fatal(err)
			}
			return img
		}
		if d.MediaType.IsIndex() {
			child, err := idx.ImageIndex(d.Digest)
			if err != nil {
				t.Fatal(err)
			}
			return platformImage(t, child, arch)
		}
	}
	t.Fatalf("no linux/%s image", arch)
	return nil
}

// sbomModules are the CycloneDX SBOM's main component and components as
// path@version, sorted.
func sbomModules(t *testing.T, file string) []string {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	type component struct{ Name, Version string }
	var bom struct {
		BOMFormat  string
		Metadata   struct{ Component component }
		Components []component
	}
	if err := json.Unmarshal(data, &bom); err != nil {
		t.Fatal(err)
	}
	if bom.BOMFormat != "CycloneDX" {
		t.Fatalf("%s: bomFormat %q", file, bom.BOMFormat)
	}
	out := []string{bom.Metadata.Component.Name + "@" + bom.Metadata.Component.Version}
	for _, c := range bom.Components {
		out = append(out, c.Name+"@"+c.Version)
	}
	slices.Sort(out)
	return out
}
