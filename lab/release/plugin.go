package release

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"time"

	"sigs.k8s.io/yaml"
)

// The files of a kubectl-ipledger archive.
const (
	// PluginBinary is the plugin, the name kubectl looks for on PATH.
	PluginBinary = "kubectl-ipledger"
	// CompletionScript is what kubectl (1.26 or newer) runs, when found on
	// PATH, to complete `kubectl ipledger …`: it asks the plugin's own cobra
	// completion (__complete).
	CompletionScript = "kubectl_complete-ipledger"
	// License is the repository's LICENSE, which krew requires in every
	// archive.
	License = "LICENSE"
)

// completion is CompletionScript's text.
const completion = `#!/usr/bin/env sh
# kubectl (1.26 or newer) runs this, found on PATH, to complete "kubectl ipledger ...".
exec kubectl-ipledger __complete "$@"
`

// Platform is one system and architecture the plugin is built for.
type Platform struct{ OS, Arch string }

// ArchiveName is the file name of the plugin's archive for p.
func (p Platform) ArchiveName() string { return "kubectl-ipledger_" + p.OS + "_" + p.Arch + ".tar.gz" }

// epoch stamps every entry of an archive, so that the same binary always
// gives the same archive and sha256.
var epoch = time.Unix(0, 0).UTC()

// PluginArchive is the .tar.gz of one platform's plugin: the binary, the
// completion script and the license, at the archive's root.
func PluginArchive(binary, license []byte) ([]byte, error) {
	var buf bytes.Buffer
	zw, err := gzip.NewWriterLevel(&buf, gzip.BestCompression)
	if err != nil {
		return nil, err
	}
	tw := tar.NewWriter(zw)
	for _, f := range []struct {
		name string
		mode int64
		data []byte
	}{
		{PluginBinary, 0o755, binary},
		{CompletionScript, 0o755, []byte(completion)},
		{License, 0o644, license},
	} {
		hdr := &tar.Header{Typeflag: tar.TypeReg, Name: f.name, Mode: f.mode, Size: int64(len(f.data)), ModTime: epoch, Format: tar.FormatPAX}
		if err := tw.WriteHeader(hdr); err != nil {
			return nil, err
		}
		if _, err := tw.Write(f.data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// PluginArtifact is one platform's archive as the krew manifest names it.
type PluginArtifact struct {
	Platform Platform
	// SHA256 is the archive's sha256, in hex.
	SHA256 string
}

// SHA256 is the hex sha256 of data, as krew and sha256sum write it.
func SHA256(data []byte) string {
	h := sha256.Sum256(data)
	return hex.EncodeToString(h[:])
}

// The krew manifest (krew.sigs.k8s.io, index/v1alpha2), the fields ipledger
// sets.
type krewPlugin struct {
	APIVersion string   `json:"apiVersion"`
	Kind       string   `json:"kind"`
	Metadata   krewMeta `json:"metadata"`
	Spec       krewSpec `json:"spec"`
}

type krewMeta struct {
	Name string `json:"name"`
}

type krewSpec struct {
	Version          string         `json:"version"`
	Homepage         string         `json:"homepage"`
	ShortDescription string         `json:"shortDescription"`
	Description      string         `json:"description"`
	Platforms        []krewPlatform `json:"platforms"`
}

type krewPlatform struct {
	Selector krewSelector `json:"selector"`
	URI      string       `json:"uri"`
	SHA256   string       `json:"sha256"`
	Files    []krewFile   `json:"files"`
	Bin      string       `json:"bin"`
}

type krewSelector struct {
	MatchLabels map[string]string `json:"matchLabels"`
}

type krewFile struct {
	From string `json:"from"`
	To   string `json:"to"`
}

// KrewManifest is the krew plugin manifest (plugin.yaml) of release
// v<version>: one platform per artifact, its archive downloaded from
// downloadBase/<ArchiveName> (a GitHub release's assets) and checked
// against its sha256.
func KrewManifest(homepage, downloadBase, version string, artifacts []PluginArtifact) ([]byte, error) {
	if len(artifacts) == 0 {
		return nil, fmt.Errorf("krew manifest of v%s: no platform", version)
	}
	p := krewPlugin{
		APIVersion: "krew.googlecontainertools.github.com/v1alpha2",
		Kind:       "Plugin",
		Metadata:   krewMeta{Name: "ipledger"},
		Spec: krewSpec{
			Version:          "v" + version,
			Homepage:         homepage,
			ShortDescription: "Inspect and operate ipledger's LoadBalancer address pools",
			Description: "kubectl ipledger shows which address a Service has and why (why, pools, allocations),\n" +
				"reserves and releases addresses, previews an allocation, backs up and restores the ledger,\n" +
				"migrates pools from MetalLB, Cilium and kube-vip, and bootstraps ipledger's TLS.\n" +
				"Shell completion (kubectl 1.26 or newer): put\n" +
				CompletionScript + " (in the archive) on PATH beside kubectl.\n",
		},
	}
	for _, a := range artifacts {
		if len(a.SHA256) != 64 {
			return nil, fmt.Errorf("krew manifest: %s has no sha256", a.Platform.ArchiveName())
		}
		p.Spec.Platforms = append(p.Spec.Platforms, krewPlatform{
			Selector: krewSelector{MatchLabels: map[string]string{"os": a.Platform.OS, "arch": a.Platform.Arch}},
			URI:      downloadBase + "/" + a.Platform.ArchiveName(),
			SHA256:   a.SHA256,
			Files:    []krewFile{{From: PluginBinary, To: "."}, {From: CompletionScript, To: "."}, {From: License, To: "."}},
			Bin:      PluginBinary,
		})
	}
	return yaml.Marshal(p)
}
