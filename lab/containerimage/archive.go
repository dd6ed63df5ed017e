package containerimage

import (
	"archive/tar"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// Annotations of an archive's index.json that name its image: containerd
// (`ctr images import`, Docker 25 and newer) reads the full name, OCI tools
// the tag.
const (
	annotationImageName = "io.containerd.image.name"
	annotationRefName   = "org.opencontainers.image.ref.name"
)

// FullName is ref as containerd and the kubelet store it: "ipledger/ipam:dev"
// becomes "docker.io/ipledger/ipam:dev", the name a Pod's image
// "ipledger/ipam:dev" resolves to. Without a tag, ref means ":latest".
func FullName(ref string) (string, error) {
	full, _, err := parseRef(ref)
	return full, err
}

func parseRef(ref string) (full, tag string, err error) {
	t, err := name.NewTag(ref)
	if err != nil {
		return "", "", fmt.Errorf("image name %q: %w", ref, err)
	}
	registry := t.RegistryStr()
	if registry == name.DefaultRegistry {
		registry = "docker.io" // what containerd calls Docker Hub (go-containerregistry says index.docker.io)
	}
	return registry + "/" + t.RepositoryStr() + ":" + t.TagStr(), t.TagStr(), nil
}

// WriteArchive writes img to path as an OCI image layout archive that names
// it ref (e.g. "ipledger/watcher:dev"), through a temporary file renamed into
// place so that an interrupted build never leaves half an archive.
func WriteArchive(path, ref string, img v1.Image) error {
	desc, err := descriptor(img)
	if err != nil {
		return err
	}
	return writeLayout(path, ref, desc, func(tw *tar.Writer) error { return writeBlobs(tw, img, map[v1.Hash]bool{}) })
}

// Index is the OCI image index of one image per architecture (linux/<arch>),
// in the order of archs: what a registry serves for a multi-architecture
// image, and what `make release` archives.
func Index(archs []string, images map[string]v1.Image) (v1.ImageIndex, error) {
	idx := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	for _, arch := range archs {
		img, ok := images[arch]
		if !ok {
			return nil, fmt.Errorf("no image for %s", arch)
		}
		idx = mutate.AppendManifests(idx, mutate.IndexAddendum{
			Add:        img,
			Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: "linux", Architecture: arch}},
		})
	}
	return idx, nil
}

// WriteIndexArchive writes idx and its images to path as an OCI image
// layout archive naming it ref, as WriteArchive does for one image. ctr
// imports the platform of the machine from it (--all-platforms, all);
// `crane push` or `skopeo copy oci-archive:` push every architecture.
func WriteIndexArchive(path, ref string, idx v1.ImageIndex) error {
	digest, err := idx.Digest()
	if err != nil {
		return err
	}
	size, err := idx.Size()
	if err != nil {
		return err
	}
	manifest, err := idx.IndexManifest()
	if err != nil {
		return err
	}
	desc := v1.Descriptor{MediaType: types.OCIImageIndex, Size: size, Digest: digest}
	return writeLayout(path, ref, desc, func(tw *tar.Writer) error {
		raw, err := idx.RawManifest()
		if err != nil {
			return err
		}
		if err := writeEntry(tw, blobPath(digest), raw); err != nil {
			return err
		}
		seen := map[v1.Hash]bool{}
		for _, m := range manifest.Manifests {
			img, err := idx.Image(m.Digest)
			if err != nil {
				return err
			}
			if err := writeBlobs(tw, img, seen); err != nil {
				return err
			}
		}
		return nil
	})
}

// writeLayout writes the archive at path: the layout marker, index.json
// naming desc as ref, and the blobs blobs writes.
func writeLayout(path, ref string, desc v1.Descriptor, blobs func(*tar.Writer) error) (err error) {
	full, tag, err := parseRef(ref)
	if err != nil {
		return err
	}
	desc.Annotations = map[string]string{annotationImageName: full, annotationRefName: tag}
	index, err := json.Marshal(v1.IndexManifest{SchemaVersion: 2, MediaType: types.OCIImageIndex, Manifests: []v1.Descriptor{desc}})
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	tw := tar.NewWriter(tmp)
	for _, dir := range []string{"blobs/", "blobs/sha256/"} {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: dir, Mode: 0o755, ModTime: epoch}); err != nil {
			return err
		}
	}
	if err := writeEntry(tw, "oci-layout", []byte(`{"imageLayoutVersion":"1.0.0"}`)); err != nil {
		return err
	}
	if err := writeEntry(tw, "index.json", index); err != nil {
		return err
	}
	if err := blobs(tw); err != nil {
		return err
	}
	if err := tw.Close(); err != nil {
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Chmod(tmp.Name(), 0o644); err != nil { // CreateTemp's 0600 would keep it from other users' ctr
		return err
	}
	return os.Rename(tmp.Name(), path)
}

func descriptor(img v1.Image) (v1.Descriptor, error) {
	digest, err := img.Digest()
	if err != nil {
		return v1.Descriptor{}, err
	}
	size, err := img.Size()
	if err != nil {
		return v1.Descriptor{}, err
	}
	mt, err := img.MediaType()
	if err != nil {
		return v1.Descriptor{}, err
	}
	return v1.Descriptor{MediaType: mt, Size: size, Digest: digest}, nil
}

// writeBlobs writes the manifest, the configuration and every layer under
// blobs/sha256/, each blob only once (seen holds those already written).
func writeBlobs(tw *tar.Writer, img v1.Image, seen map[v1.Hash]bool) error {
	entry := func(h v1.Hash, data []byte) error {
		if seen[h] {
			return nil
		}
		seen[h] = true
		return writeEntry(tw, blobPath(h), data)
	}
	manifest, err := img.RawManifest()
	if err != nil {
		return err
	}
	digest, err := img.Digest()
	if err != nil {
		return err
	}
	if err := entry(digest, manifest); err != nil {
		return err
	}
	config, err := img.RawConfigFile()
	if err != nil {
		return err
	}
	configName, err := img.ConfigName()
	if err != nil {
		return err
	}
	if err := entry(configName, config); err != nil {
		return err
	}
	layers, err := img.Layers()
	if err != nil {
		return err
	}
	for _, l := range layers {
		digest, err := l.Digest()
		if err != nil {
			return err
		}
		if seen[digest] {
			continue
		}
		seen[digest] = true
		size, err := l.Size()
		if err != nil {
			return err
		}
		rc, err := l.Compressed()
		if err != nil {
			return err
		}
		err = tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: blobPath(digest), Mode: 0o644, Size: size, ModTime: epoch})
		if err == nil {
			_, err = io.Copy(tw, rc)
		}
		rc.Close()
		if err != nil {
			return fmt.Errorf("layer %s: %w", digest, err)
		}
	}
	return nil
}

func blobPath(h v1.Hash) string { return "blobs/" + h.Algorithm + "/" + h.Hex }

func writeEntry(tw *tar.Writer, name string, data []byte) error {
	if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: 0o644, Size: int64(len(data)), ModTime: epoch}); err != nil {
		return err
	}
	_, err := tw.Write(data)
	return err
}

// ArchivedDigest is the manifest digest of the image the archive at path
// names ref; ok is false when there is no such file or it names no ref (a
// caller then writes it anew).
func ArchivedDigest(path, ref string) (digest v1.Hash, ok bool, err error) {
	full, err := FullName(ref)
	if err != nil {
		return v1.Hash{}, false, err
	}
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return v1.Hash{}, false, nil
	}
	if err != nil {
		return v1.Hash{}, false, err
	}
	defer f.Close()
	tr := tar.NewReader(f)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return v1.Hash{}, false, nil
		}
		if err != nil {
			return v1.Hash{}, false, fmt.Errorf("%s: %w", path, err)
		}
		if hdr.Name != "index.json" {
			continue
		}
		var index v1.IndexManifest
		if err := json.NewDecoder(tr).Decode(&index); err != nil {
			return v1.Hash{}, false, fmt.Errorf("%s: index.json: %w", path, err)
		}
		for _, m := range index.Manifests {
			if m.Annotations[annotationImageName] == full {
				return m.Digest, true, nil
			}
		}
		return v1.Hash{}, false, nil
	}
}
