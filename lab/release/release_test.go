package release

import (
	"bytes"
	"slices"
	"strings"
	"testing"
)

func TestInstalls(t *testing.T) {
	for _, tc := range []struct {
		name     string
		overlays []string
		want     []string
	}{
		{"base alone", nil, []string{"base"}},
		{"dev and e2e are not installs", []string{"production", "e2e", "dev", "cloud"}, []string{"base", "cloud", "production"}},
		{"an overlay added later ships", []string{"cloud", "bare-metal-eip", "production"}, []string{"base", "bare-metal-eip", "cloud", "production"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got []string
			for _, in := range Installs(tc.overlays) {
				got = append(got, in.Name)
				if want := "overlays/" + in.Name; in.Name != "base" && in.Dir != want {
					t.Errorf("%s renders %s, want %s", in.Name, in.Dir, want)
				}
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("Installs(%v) = %v, want %v", tc.overlays, got, tc.want)
			}
		})
	}
}

func TestPinned(t *testing.T) {
	digest := "sha256:" + strings.Repeat("ab", 32)
	got, err := Pinned("line one\nline two", RemoteBase("https://github.com/ipledger/ipledger", "base", "0.3.0"),
		[]Image{{Repository: "ghcr.io/ipledger/ipam", Digest: digest}})
	if err != nil {
		t.Fatal(err)
	}
	want := `# line one
# line two
apiVersion: kustomize.config.k8s.io/v1beta1
images:
- digest: ` + digest + `
  name: ghcr.io/ipledger/ipam
kind: Kustomization
resources:
- https://github.com/ipledger/ipledger//deploy/kustomize/base?ref=v0.3.0
`
	if string(got) != want {
		t.Errorf("Pinned:\n%s\nwant\n%s", got, want)
	}
	if _, err := Pinned("", "../base", []Image{{Repository: "ghcr.io/ipledger/ipam", Digest: "v0.3.0"}}); err == nil {
		t.Error("Pinned took a tag for a digest")
	}
}

func TestPluginArchiveIsReproducible(t *testing.T) {
	a, err := PluginArchive([]byte("binary"), []byte("license"))
	if err != nil {
		t.Fatal(err)
	}
	b, err := PluginArchive([]byte("binary"), []byte("license"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(a, b) {
		t.Error("the same binary gave two archives (their sha256 in plugin.yaml would not hold)")
	}
}

func TestKrewManifest(t *testing.T) {
	if _, err := KrewManifest("h", "d", "0.3.0", nil); err == nil {
		t.Error("a manifest with no platform was accepted")
	}
	if _, err := KrewManifest("h", "d", "0.3.0", []PluginArtifact{{Platform: Platform{"linux", "amd64"}}}); err == nil {
		t.Error("a platform without sha256 was accepted")
	}
	sum := SHA256([]byte("x"))
	got, err := KrewManifest("https://github.com/ipledger/ipledger", "https://github.com/ipledger/ipledger/releases/download/v0.3.0", "0.3.0",
		[]PluginArtifact{{Platform: Platform{"darwin", "arm64"}, SHA256: sum}})
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"uri: https://github.com/ipledger/ipledger/releases/download/v0.3.0/kubectl-ipledger_darwin_arm64.tar.gz",
		"sha256: " + sum,
		"version: v0.3.0",
		"os: darwin",
		"arch: arm64",
		"bin: kubectl-ipledger",
		"from: kubectl_complete-ipledger",
	} {
		if !strings.Contains(string(got), want) {
			t.Errorf("krew manifest has no %q:\n%s", want, got)
		}
	}
}
