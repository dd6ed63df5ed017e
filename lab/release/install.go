// Package release decides what one ipledger release ships and in which
// form an operator consumes it: the install flavours and their manifests
// pinned by image digest, the kustomization that pins a remote base at the
// release's tag, the kubectl-ipledger archives with their krew manifest and
// completion script. lab/cmd/ipledger-release (`make release`) gathers the
// inputs (images, binaries) and writes what these functions return.
package release

import (
	"fmt"
	"slices"
	"strings"

	"sigs.k8s.io/yaml"
)

// Install is one install flavour: a kustomization of deploy/kustomize that a
// release renders to install/<Name>.yaml.
type Install struct {
	// Name is the flavour, and its file's name without .yaml.
	Name string
	// Dir is the kustomization, relative to deploy/kustomize.
	Dir string
}

// notShipped are the overlays that are not an install a user applies:
// development's debug logging and the real node's test images.
var notShipped = []string{"dev", "e2e"}

// Installs are the flavours a release ships: base, and every overlay under
// deploy/kustomize/overlays (its directory names) except dev and e2e, so that
// an overlay added later is released without changing this list.
func Installs(overlays []string) []Install {
	out := []Install{{Name: "base", Dir: "base"}}
	sorted := slices.Clone(overlays)
	slices.Sort(sorted)
	for _, o := range sorted {
		if !slices.Contains(notShipped, o) {
			out = append(out, Install{Name: o, Dir: "overlays/" + o})
		}
	}
	return out
}

// Image is one image of a release: its repository (as deploy/kustomize
// names it) and the digest of the image index the release built.
type Image struct {
	Repository string
	Digest     string
}

// Ref is the image pinned by digest, e.g. ghcr.io/ipledger/ipam@sha256:….
func (i Image) Ref() string { return i.Repository + "@" + i.Digest }

// kustomization is the part of kustomize's Kustomization that Pinned writes.
type kustomization struct {
	APIVersion string           `json:"apiVersion"`
	Kind       string           `json:"kind"`
	Resources  []string         `json:"resources"`
	Images     []kustomizeImage `json:"images"`
}

type kustomizeImage struct {
	Name   string `json:"name"`
	Digest string `json:"digest"`
}

// Pinned is a kustomization of resource (a directory, or a remote base such
// as github.com/ipledger/ipledger//deploy/kustomize/base?ref=v0.3.0) that
// runs images by digest instead of by tag: what the release renders each
// install through, and the kustomization it ships for a remote base.
func Pinned(header, resource string, images []Image) ([]byte, error) {
	k := kustomization{APIVersion: "kustomize.config.k8s.io/v1beta1", Kind: "Kustomization", Resources: []string{resource}}
	for _, img := range images {
		if !strings.HasPrefix(img.Digest, "sha256:") {
			return nil, fmt.Errorf("image %s: digest %q is not sha256:<hex>", img.Repository, img.Digest)
		}
		k.Images = append(k.Images, kustomizeImage{Name: img.Repository, Digest: img.Digest})
	}
	out, err := yaml.Marshal(k)
	if err != nil {
		return nil, err
	}
	var b strings.Builder
	for _, line := range strings.Split(strings.TrimRight(header, "\n"), "\n") {
		if header != "" {
			b.WriteString("# " + line + "\n")
		}
	}
	b.Write(out)
	return []byte(b.String()), nil
}

// RemoteBase is the remote kustomize URL of a kustomization of
// deploy/kustomize in repo (a git URL, e.g. https://github.com/ipledger/ipledger)
// at the release's tag v<version>.
func RemoteBase(repo, dir, version string) string {
	return repo + "//deploy/kustomize/" + dir + "?ref=v" + version
}
