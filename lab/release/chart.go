package release

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io/fs"
	"path"
	"regexp"
	"strings"
	"time"

	"sigs.k8s.io/yaml"
)

// ChartDir is the Helm chart of the repository (deploy/helm/ipledger), whose
// package a release ships.
const ChartDir = "deploy/helm/ipledger"

// ChartPackageName is the file name of the chart's package for a release:
// ipledger-<version>.tgz, as `helm package` names it.
func ChartPackageName(version string) string { return "ipledger-" + version + ".tgz" }

// ChartValuesFile is the file of deploy/helm (and of a release's chart/)
// that holds the chart's values for the install flavour name (an overlay:
// values-production.yaml); the base needs none.
func ChartValuesFile(name string) string { return "values-" + name + ".yaml" }

// chartMetadata is the part of Chart.yaml a release reads.
type chartMetadata struct {
	Name        string `json:"name"`
	Version     string `json:"version"`
	AppVersion  string `json:"appVersion"`
	Description string `json:"description"`
}

// ChartPackage is the chart's package for release version (the VERSION
// file): the files of chart (a Helm chart folder) in a gzipped tar under
// <name>/, as `helm package` writes it, with values.yaml naming every image
// of pinned by digest instead of the tag v<version> (the line
// "  <service>: <repository>:v<version>" becomes "<repository>@<digest>"),
// so that the chart runs exactly the images the release's install/*.yaml
// run. Every file's time is the epoch and the files are sorted: the same
// inputs give the same bytes (SHA256SUMS stays reproducible). Chart.yaml
// must already say version <version> and appVersion v<version>.
func ChartPackage(chart fs.FS, version string, pinned []Image) ([]byte, error) {
	raw, err := fs.ReadFile(chart, "Chart.yaml")
	if err != nil {
		return nil, err
	}
	var meta chartMetadata
	if err := yaml.Unmarshal(raw, &meta); err != nil {
		return nil, fmt.Errorf("Chart.yaml: %w", err)
	}
	if meta.Version != version || meta.AppVersion != "v"+version {
		return nil, fmt.Errorf("%s/Chart.yaml says version %q and appVersion %q; the release is %s: set them to %s and v%s",
			ChartDir, meta.Version, meta.AppVersion, version, version, version)
	}
	values, err := fs.ReadFile(chart, "values.yaml")
	if err != nil {
		return nil, err
	}
	values, err = pinValues(values, version, pinned)
	if err != nil {
		return nil, err
	}
	var files []string
	err = fs.WalkDir(chart, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		files = append(files, p)
		return nil
	})
	if err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	gz, err := gzip.NewWriterLevel(&buf, gzip.BestCompression)
	if err != nil {
		return nil, err
	}
	tw := tar.NewWriter(gz)
	for _, f := range files { // WalkDir walks in lexical order
		data := values
		if f != "values.yaml" {
			if data, err = fs.ReadFile(chart, f); err != nil {
				return nil, err
			}
		}
		h := &tar.Header{Name: path.Join(meta.Name, f), Mode: 0o644, Size: int64(len(data)), ModTime: time.Unix(0, 0), Typeflag: tar.TypeReg, Format: tar.FormatPAX}
		if err := tw.WriteHeader(h); err != nil {
			return nil, err
		}
		if _, err := tw.Write(data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	if err := gz.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// pinValues replaces each image's "<repository>:v<version>" in values.yaml
// by "<repository>@<digest>"; each must appear exactly once.
func pinValues(values []byte, version string, pinned []Image) ([]byte, error) {
	out := string(values)
	for _, img := range pinned {
		if !strings.HasPrefix(img.Digest, "sha256:") {
			return nil, fmt.Errorf("image %s: digest %q is not sha256:<hex>", img.Repository, img.Digest)
		}
		re := regexp.MustCompile(`(?m)^(\s+[a-z]+: )` + regexp.QuoteMeta(img.Repository+":v"+version) + `$`)
		if n := len(re.FindAllStringIndex(out, -1)); n != 1 {
			return nil, fmt.Errorf("%s/values.yaml names %s:v%s %d times, want once (images.<service>: <repository>:v<version>)", ChartDir, img.Repository, version, n)
		}
		out = re.ReplaceAllString(out, "${1}"+img.Ref())
	}
	return []byte(out), nil
}

// OCI media types of a Helm chart in a registry, as `helm push` writes them.
const (
	HelmConfigMediaType  = "application/vnd.cncf.helm.config.v1+json"
	HelmContentMediaType = "application/vnd.cncf.helm.chart.content.v1.tar+gzip"
	ociManifestMediaType = "application/vnd.oci.image.manifest.v1+json"
	ociIndexMediaType    = "application/vnd.oci.image.index.v1+json"
)

// ChartLayout is an OCI image layout (https://github.com/opencontainers/image-spec/blob/main/image-layout.md)
// holding the chart package as `helm push` would push it — its Chart.yaml
// as the config (application/vnd.cncf.helm.config.v1+json), the package as
// the one layer — tagged <version> in index.json: path → contents, to be
// written under one folder or archived. `oras cp --from-oci-layout <folder>:<version>
// <registry>/ipledger:<version>` or `crane push` puts it in a registry with its
// digest unchanged; `helm install oci://…` then installs it. Also returns the
// manifest's digest.
func ChartLayout(pkg []byte, version string) (map[string][]byte, string, error) {
	var meta chartMetadata
	if err := chartYAMLOf(pkg, &meta); err != nil {
		return nil, "", err
	}
	config, err := json.Marshal(map[string]string{"name": meta.Name, "version": meta.Version, "appVersion": meta.AppVersion, "description": meta.Description, "apiVersion": "v2"})
	if err != nil {
		return nil, "", err
	}
	files := map[string][]byte{}
	blob := func(mediaType string, data []byte) map[string]any {
		sum := sha256.Sum256(data)
		d := "sha256:" + hex.EncodeToString(sum[:])
		files["blobs/sha256/"+hex.EncodeToString(sum[:])] = data
		return map[string]any{"mediaType": mediaType, "digest": d, "size": len(data)}
	}
	layer := blob(HelmContentMediaType, pkg)
	layer["annotations"] = map[string]string{"org.opencontainers.image.title": ChartPackageName(version)}
	manifest, err := json.Marshal(map[string]any{
		"schemaVersion": 2,
		"mediaType":     ociManifestMediaType,
		"config":        blob(HelmConfigMediaType, config),
		"layers":        []any{layer},
		"annotations": map[string]string{
			"org.opencontainers.image.title":       meta.Name,
			"org.opencontainers.image.version":     meta.Version,
			"org.opencontainers.image.description": meta.Description,
		},
	})
	if err != nil {
		return nil, "", err
	}
	m := blob(ociManifestMediaType, manifest)
	m["annotations"] = map[string]string{"org.opencontainers.image.ref.name": version}
	index, err := json.Marshal(map[string]any{"schemaVersion": 2, "mediaType": ociIndexMediaType, "manifests": []any{m}})
	if err != nil {
		return nil, "", err
	}
	files["index.json"] = index
	files["oci-layout"] = []byte(`{"imageLayoutVersion":"1.0.0"}`)
	return files, m["digest"].(string), nil
}

// chartYAMLOf reads <name>/Chart.yaml out of a chart package.
func chartYAMLOf(pkg []byte, meta *chartMetadata) error {
	gz, err := gzip.NewReader(bytes.NewReader(pkg))
	if err != nil {
		return err
	}
	tr := tar.NewReader(gz)
	for {
		h, err := tr.Next()
		if err != nil {
			return fmt.Errorf("the chart package has no Chart.yaml: %w", err)
		}
		if path.Base(h.Name) == "Chart.yaml" && strings.Count(h.Name, "/") == 1 {
			var b bytes.Buffer
			if _, err := b.ReadFrom(tr); err != nil {
				return err
			}
			return yaml.Unmarshal(b.Bytes(), meta)
		}
	}
}
