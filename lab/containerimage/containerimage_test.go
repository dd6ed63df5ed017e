package containerimage

import (
	"archive/tar"
	"errors"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/validate"
)

// contents writes a stand-in binary and CA bundle (Build copies bytes; it
// never runs them).
func contents(t *testing.T, binary string) Contents {
	t.Helper()
	dir := t.TempDir()
	c := Contents{Binary: filepath.Join(dir, "bin"), CACertificates: filepath.Join(dir, "ca.crt"), Architecture: "amd64", Title: "ipledger-test"}
	if err := os.WriteFile(c.Binary, []byte(binary), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(c.CACertificates, []byte("-----BEGIN CERTIFICATE-----\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return c
}

func TestBuildRunsTheBinaryAsNonRootFromAnEmptyBase(t *testing.T) {
	img, err := Build(contents(t, "binary"))
	if err != nil {
		t.Fatal(err)
	}
	// Fast: validate reads every layer as gzip, and ours is uncompressed
	// (its files are checked below).
	if err := validate.Image(img, validate.Fast); err != nil {
		t.Fatalf("invalid image: %v", err)
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Config.User != "65532:65532" || len(cfg.Config.Entrypoint) != 1 || cfg.Config.Entrypoint[0] != "/ipledger" {
		t.Errorf("user %q entrypoint %q, want 65532:65532 and [/ipledger]", cfg.Config.User, cfg.Config.Entrypoint)
	}
	if cfg.OS != "linux" || cfg.Architecture != "amd64" {
		t.Errorf("platform %s/%s, want linux/amd64", cfg.OS, cfg.Architecture)
	}
	layers, err := img.Layers()
	if err != nil || len(layers) != 1 {
		t.Fatalf("want one layer (an empty base), got %d (%v)", len(layers), err)
	}
	rc, err := layers[0].Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	type entry struct {
		mode     int64
		uid, gid int
		content  string
	}
	got := map[string]entry{}
	tr := tar.NewReader(rc)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(tr)
		got[hdr.Name] = entry{hdr.Mode, hdr.Uid, hdr.Gid, string(b)}
	}
	want := map[string]entry{
		"ipledger":                          {0o755, 0, 0, "binary"},
		"etc/":                              {0o755, 0, 0, ""},
		"etc/ssl/":                          {0o755, 0, 0, ""},
		"etc/ssl/certs/":                    {0o755, 0, 0, ""},
		"etc/ssl/certs/ca-certificates.crt": {0o644, 0, 0, "-----BEGIN CERTIFICATE-----\n"},
	}
	if len(got) != len(want) {
		t.Errorf("layer has %v, want %v", got, want)
	}
	for name, w := range want {
		if got[name] != w {
			t.Errorf("%s: got %+v, want %+v (root-owned: the user cannot change the image's files)", name, got[name], w)
		}
	}
}

func TestBuildIsReproducible(t *testing.T) {
	c := contents(t, "binary")
	a, err := Build(c)
	if err != nil {
		t.Fatal(err)
	}
	b, err := Build(c)
	if err != nil {
		t.Fatal(err)
	}
	da, _ := a.Digest()
	db, _ := b.Digest()
	if da != db {
		t.Errorf("two builds of one binary differ: %s, %s", da, db)
	}
	if err := os.WriteFile(c.Binary, []byte("changed"), 0o700); err != nil {
		t.Fatal(err)
	}
	changed, err := Build(c)
	if err != nil {
		t.Fatal(err)
	}
	if dc, _ := changed.Digest(); dc == da {
		t.Errorf("a changed binary kept digest %s", da)
	}
}

func TestWriteArchiveIsAnOCILayoutNamingTheImage(t *testing.T) {
	img, err := Build(contents(t, "binary"))
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "ipledger-test.tar")
	if err := WriteArchive(path, "ipledger/test:dev", img); err != nil {
		t.Fatal(err)
	}
	dir := untar(t, path)
	index, err := layout.ImageIndexFromPath(dir)
	if err != nil {
		t.Fatalf("not an OCI layout: %v", err)
	}
	m, err := index.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Manifests) != 1 {
		t.Fatalf("want one image, got %d", len(m.Manifests))
	}
	if got := m.Manifests[0].Annotations; got[annotationImageName] != "docker.io/ipledger/test:dev" || got[annotationRefName] != "dev" {
		t.Errorf("annotations %v: containerd would not name the image docker.io/ipledger/test:dev", got)
	}
	back, err := index.Image(m.Manifests[0].Digest)
	if err != nil {
		t.Fatal(err)
	}
	if err := validate.Image(back, validate.Fast); err != nil {
		t.Errorf("archived image is invalid: %v", err)
	}
	layers, err := back.Layers()
	if err != nil || len(layers) != 1 {
		t.Fatalf("archived image has %d layers (%v), want 1", len(layers), err)
	}
	rc, err := layers[0].Compressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	sum, _, err := v1.SHA256(rc)
	if d, _ := layers[0].Digest(); err != nil || sum != d {
		t.Errorf("archived layer hashes to %s (%v), its manifest says %s", sum, err, d)
	}

	want, _ := img.Digest()
	if got, ok, err := ArchivedDigest(path, "ipledger/test:dev"); err != nil || !ok || got != want {
		t.Errorf("ArchivedDigest = %s, %v, %v; want %s", got, ok, err, want)
	}
	if _, ok, err := ArchivedDigest(path, "ipledger/test:other"); err != nil || ok {
		t.Errorf("ArchivedDigest of another tag = %v, %v; want not found", ok, err)
	}
	if _, ok, err := ArchivedDigest(filepath.Join(t.TempDir(), "missing.tar"), "ipledger/test:dev"); err != nil || ok {
		t.Errorf("ArchivedDigest of a missing archive = %v, %v; want not found", ok, err)
	}
}

func untar(t *testing.T, path string) string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	dir := t.TempDir()
	tr := tar.NewReader(f)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return dir
		}
		if err != nil {
			t.Fatal(err)
		}
		dst := filepath.Join(dir, filepath.FromSlash(hdr.Name))
		if hdr.Typeflag == tar.TypeDir {
			if err := os.MkdirAll(dst, 0o755); err != nil {
				t.Fatal(err)
			}
			continue
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(dst, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func TestFullNameIsWhatTheKubeletResolves(t *testing.T) {
	for _, tc := range []struct{ ref, want string }{
		{"ipledger/ipam:dev", "docker.io/ipledger/ipam:dev"},
		{"ipledger/ipam", "docker.io/ipledger/ipam:latest"},
		{"pause:3", "docker.io/library/pause:3"},
		{"ghcr.io/acme/ipam:v1", "ghcr.io/acme/ipam:v1"},
		{"localhost:5000/ipam:v1", "localhost:5000/ipam:v1"},
	} {
		if got, err := FullName(tc.ref); err != nil || got != tc.want {
			t.Errorf("FullName(%q) = %q, %v; want %q", tc.ref, got, err, tc.want)
		}
	}
	if _, err := FullName("Not A Name"); err == nil {
		t.Error("FullName accepted an invalid reference")
	}
}

// TestImagesCarryTheirProvenance: the release and the commit an image was
// built from are OCI labels of its configuration.
func TestImagesCarryTheirProvenance(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "bin")
	if err := os.WriteFile(bin, []byte("binary"), 0o755); err != nil {
		t.Fatal(err)
	}
	img, err := Build(Contents{Binary: bin, Architecture: "amd64", Title: "ipledger-test", Provenance: Provenance{Version: "0.2.0", Revision: "abc123"}})
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"org.opencontainers.image.title": "ipledger-test", "org.opencontainers.image.source": Source,
		"org.opencontainers.image.version": "0.2.0", "org.opencontainers.image.revision": "abc123",
	}
	if !maps.Equal(cfg.Config.Labels, want) {
		t.Errorf("labels %v, want %v", cfg.Config.Labels, want)
	}
}

// TestWriteIndexArchiveHoldsEveryArchitecture: a release archive names one
// image index whose manifests are the images of amd64 and arm64, each valid
// and marked with its platform, as a registry would serve them.
func TestWriteIndexArchiveHoldsEveryArchitecture(t *testing.T) {
	images := map[string]v1.Image{}
	for _, arch := range []string{"amd64", "arm64"} {
		c := contents(t, "binary for "+arch)
		c.Architecture = arch
		img, err := Build(c)
		if err != nil {
			t.Fatal(err)
		}
		images[arch] = img
	}
	idx, err := Index([]string{"amd64", "arm64"}, images)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "ipledger-test.tar")
	if err := WriteIndexArchive(path, "ghcr.io/ipledger/test:v0.3.0", idx); err != nil {
		t.Fatal(err)
	}
	top, err := layout.ImageIndexFromPath(untar(t, path))
	if err != nil {
		t.Fatalf("not an OCI layout: %v", err)
	}
	m, err := top.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Manifests) != 1 || m.Manifests[0].Annotations[annotationImageName] != "ghcr.io/ipledger/test:v0.3.0" {
		t.Fatalf("index.json names %+v, want one index named ghcr.io/ipledger/test:v0.3.0", m.Manifests)
	}
	inner, err := top.ImageIndex(m.Manifests[0].Digest)
	if err != nil {
		t.Fatal(err)
	}
	if err := validate.Index(inner, validate.Fast); err != nil {
		t.Errorf("archived index is invalid: %v", err)
	}
	im, err := inner.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, d := range im.Manifests {
		got = append(got, d.Platform.OS+"/"+d.Platform.Architecture)
		img, err := inner.Image(d.Digest)
		if err != nil {
			t.Fatal(err)
		}
		cfg, err := img.ConfigFile()
		if err != nil || cfg.Architecture != d.Platform.Architecture {
			t.Errorf("image for %s has architecture %q (%v)", d.Platform.Architecture, cfg.Architecture, err)
		}
	}
	if want := []string{"linux/amd64", "linux/arm64"}; !slices.Equal(got, want) {
		t.Errorf("index platforms %v, want %v", got, want)
	}
	if _, err := Index([]string{"amd64", "riscv64"}, images); err == nil {
		t.Error("Index with an architecture it has no image for did not fail")
	}
}
