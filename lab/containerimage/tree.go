package containerimage

import (
	"archive/tar"
	"bytes"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// Tree is an image made of a whole directory: the root filesystem of a
// third-party image the test node needs (agnhost, which Kubernetes' e2e
// specs run with a shell and its tools), where Contents is one static
// binary of ours.
type Tree struct {
	// Root is the directory that becomes the image's /: its files,
	// directories and symbolic links, with their permission bits, owned by
	// root. A symbolic link to a directory outside Root is followed for
	// Root itself only.
	Root string
	// Entrypoint and Cmd are the image's; User is empty for root.
	Entrypoint, Cmd []string
	User            string
	// Env is the image's environment (PATH, typically).
	Env []string
	// Files are regular files (mode 0644) added to Root's, by their path in
	// the image relative to / (etc/wgetrc) and their content: settings of
	// the image, kept apart from a Root shared with other users. Each must
	// be new to Root and in one of its directories.
	Files map[string]string
	// Architecture is the GOARCH its binaries are built for.
	Architecture string
	// Title becomes the org.opencontainers.image.title label.
	Title string
}

// BuildTree assembles the image of t the way Build does Contents: one
// uncompressed layer, OCI media types, every file stamped with the Unix
// epoch, so that the same tree always gives the same digest.
func BuildTree(t Tree) (v1.Image, error) {
	layerTar, err := treeLayer(t.Root, t.Files)
	if err != nil {
		return nil, fmt.Errorf("image %s from %s: %w", t.Title, t.Root, err)
	}
	return assemble(layerTar, t.Architecture, v1.Config{
		Entrypoint: t.Entrypoint,
		Cmd:        t.Cmd,
		User:       t.User,
		Env:        t.Env,
		WorkingDir: "/",
		Labels:     map[string]string{"org.opencontainers.image.title": t.Title},
	})
}

// treeLayer is root as an uncompressed tar, in lexical order, then files
// in the order of their names.
func treeLayer(root string, files map[string]string) ([]byte, error) {
	root, err := filepath.EvalSymlinks(root)
	if err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil || path == root {
			return err
		}
		rel, err := filepath.Rel(root, path)
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		hdr := &tar.Header{Name: filepath.ToSlash(rel), Mode: int64(info.Mode().Perm()), ModTime: epoch, Format: tar.FormatPAX}
		if info.Mode()&fs.ModeSticky != 0 {
			hdr.Mode |= 0o1000 // /tmp
		}
		switch {
		case d.IsDir():
			hdr.Typeflag, hdr.Name = tar.TypeDir, hdr.Name+"/"
			return tw.WriteHeader(hdr)
		case info.Mode()&fs.ModeSymlink != 0:
			if hdr.Linkname, err = os.Readlink(path); err != nil {
				return err
			}
			hdr.Typeflag, hdr.Mode = tar.TypeSymlink, 0o777
			return tw.WriteHeader(hdr)
		case info.Mode().IsRegular():
			data, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			hdr.Typeflag, hdr.Size = tar.TypeReg, int64(len(data))
			if err := tw.WriteHeader(hdr); err != nil {
				return err
			}
			_, err = tw.Write(data)
			return err
		default:
			return fmt.Errorf("%s: only files, directories and symbolic links go into an image", path)
		}
	})
	if err != nil {
		return nil, err
	}
	for _, name := range slices.Sorted(maps.Keys(files)) {
		if err := addedFile(root, name); err != nil {
			return nil, err
		}
		data := []byte(files[name])
		hdr := &tar.Header{Name: name, Typeflag: tar.TypeReg, Mode: 0o644, Size: int64(len(data)), ModTime: epoch, Format: tar.FormatPAX}
		if err := tw.WriteHeader(hdr); err != nil {
			return nil, err
		}
		if _, err := tw.Write(data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// addedFile checks that name, a file Tree.Files adds, is a clean path
// relative to the image's /, new to root, and in a directory of root.
func addedFile(root, name string) error {
	if !fs.ValidPath(name) || name == "." {
		return fmt.Errorf("added file %q: want a clean path relative to the image's / (etc/wgetrc)", name)
	}
	if _, err := os.Lstat(filepath.Join(root, name)); err == nil {
		return fmt.Errorf("added file %q: %s has it already; add a file the tree does not have", name, root)
	}
	if fi, err := os.Stat(filepath.Join(root, filepath.Dir(name))); err != nil || !fi.IsDir() {
		return fmt.Errorf("added file %q: %s has no directory %s to hold it", name, root, filepath.Dir(name))
	}
	return nil
}
