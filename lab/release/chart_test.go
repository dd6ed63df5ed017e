package release

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"io"
	"strings"
	"testing"
	"testing/fstest"
)

const testDigest = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

func testChart(chartVersion string) fstest.MapFS {
	return fstest.MapFS{
		"Chart.yaml":             {Data: []byte("apiVersion: v2\nname: ipledger\nversion: " + chartVersion + "\nappVersion: v" + chartVersion + "\ndescription: IPAM\n")},
		"values.yaml":            {Data: []byte("images:\n  ipam: ghcr.io/ipledger/ipam:v0.3.0\n  # ghcr.io/ipledger/ipam:v0.3.0 in a comment stays\ntls: none\n")},
		"templates/ipam.yaml":    {Data: []byte("image: {{ .Values.images.ipam }}\n")},
		"files/base.yaml":        {Data: []byte("kind: Namespace\n")},
		"values.schema.json":     {Data: []byte("{}\n")},
		"templates/_helpers.tpl": {Data: []byte("")},
	}
}

func untar(t *testing.T, pkg []byte) map[string]string {
	t.Helper()
	gz, err := gzip.NewReader(bytes.NewReader(pkg))
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(gz)
	files := map[string]string{}
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return files
		}
		if err != nil {
			t.Fatal(err)
		}
		if h.ModTime.Unix() != 0 || h.Mode != 0o644 {
			t.Errorf("%s: time %v, mode %o; want the epoch and 0644 (a reproducible package)", h.Name, h.ModTime, h.Mode)
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		files[h.Name] = string(b)
	}
}

func TestChartPackagePinsTheImagesByDigest(t *testing.T) {
	pinned := []Image{{Repository: "ghcr.io/ipledger/ipam", Digest: testDigest}}
	pkg, err := ChartPackage(testChart("0.3.0"), "0.3.0", pinned)
	if err != nil {
		t.Fatal(err)
	}
	files := untar(t, pkg)
	if len(files) != 6 || files["ipledger/templates/ipam.yaml"] != "image: {{ .Values.images.ipam }}\n" {
		t.Errorf("package holds %v, want the chart's 6 files under ipledger/", files)
	}
	want := "images:\n  ipam: ghcr.io/ipledger/ipam@" + testDigest + "\n  # ghcr.io/ipledger/ipam:v0.3.0 in a comment stays\ntls: none\n"
	if got := files["ipledger/values.yaml"]; got != want {
		t.Errorf("values.yaml:\n%s\nwant\n%s", got, want)
	}
	again, err := ChartPackage(testChart("0.3.0"), "0.3.0", pinned)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(pkg, again) {
		t.Error("two packages of the same chart differ: SHA256SUMS would not be reproducible")
	}
}

func TestChartPackageRefuses(t *testing.T) {
	for _, tc := range []struct {
		name          string
		chartVersion  string
		pinned        []Image
		wantInMessage string
	}{
		{"Chart.yaml of another release", "0.2.0", nil, "set them to 0.3.0 and v0.3.0"},
		{"an image values.yaml does not name", "0.3.0", []Image{{Repository: "ghcr.io/ipledger/eipd", Digest: testDigest}}, "ghcr.io/ipledger/eipd:v0.3.0 0 times"},
		{"a digest that is not sha256", "0.3.0", []Image{{Repository: "ghcr.io/ipledger/ipam", Digest: "v0.3.0"}}, "not sha256"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ChartPackage(testChart(tc.chartVersion), "0.3.0", tc.pinned)
			if err == nil || !strings.Contains(err.Error(), tc.wantInMessage) {
				t.Errorf("ChartPackage: %v, want an error saying %q", err, tc.wantInMessage)
			}
		})
	}
}

// TestChartLayoutIsWhatHelmPushes: the layout's index tags the version and
// names a manifest whose config and one layer have Helm's media types, the
// layer being the package itself; every blob is named by its digest.
func TestChartLayoutIsWhatHelmPushes(t *testing.T) {
	pkg, err := ChartPackage(testChart("0.3.0"), "0.3.0", nil)
	if err != nil {
		t.Fatal(err)
	}
	files, digest, err := ChartLayout(pkg, "0.3.0")
	if err != nil {
		t.Fatal(err)
	}
	for p, data := range files {
		if hex, ok := strings.CutPrefix(p, "blobs/sha256/"); ok && SHA256(data) != hex {
			t.Errorf("%s holds a blob of sha256 %s", p, SHA256(data))
		}
	}
	var index struct {
		Manifests []struct {
			Digest      string            `json:"digest"`
			Annotations map[string]string `json:"annotations"`
		} `json:"manifests"`
	}
	if err := json.Unmarshal(files["index.json"], &index); err != nil {
		t.Fatal(err)
	}
	if len(index.Manifests) != 1 || index.Manifests[0].Digest != digest || index.Manifests[0].Annotations["org.opencontainers.image.ref.name"] != "0.3.0" {
		t.Fatalf("index.json: %s; want one manifest %s tagged 0.3.0", files["index.json"], digest)
	}
	var manifest struct {
		Config struct{ MediaType, Digest string }
		Layers []struct{ MediaType, Digest string }
	}
	if err := json.Unmarshal(files["blobs/sha256/"+strings.TrimPrefix(digest, "sha256:")], &manifest); err != nil {
		t.Fatal(err)
	}
	if manifest.Config.MediaType != HelmConfigMediaType || len(manifest.Layers) != 1 ||
		manifest.Layers[0].MediaType != HelmContentMediaType || manifest.Layers[0].Digest != "sha256:"+SHA256(pkg) {
		t.Errorf("manifest %+v: want config %s and the package (sha256:%s) as its one %s layer", manifest, HelmConfigMediaType, SHA256(pkg), HelmContentMediaType)
	}
	var config map[string]string
	if err := json.Unmarshal(files["blobs/sha256/"+strings.TrimPrefix(manifest.Config.Digest, "sha256:")], &config); err != nil {
		t.Fatal(err)
	}
	if config["name"] != "ipledger" || config["version"] != "0.3.0" {
		t.Errorf("config %v: want the chart's name and version", config)
	}
}
