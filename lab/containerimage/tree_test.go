package containerimage

import (
	"archive/tar"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

func TestBuildTreeKeepsFilesLinksAndModes(t *testing.T) {
	root := t.TempDir()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.MkdirAll(filepath.Join(root, "bin"), 0o755))
	must(os.Mkdir(filepath.Join(root, "tmp"), 0o755))
	must(os.Chmod(filepath.Join(root, "tmp"), 0o777|os.ModeSticky))
	must(os.WriteFile(filepath.Join(root, "bin", "busybox"), []byte("busybox"), 0o755))
	must(os.Symlink("/bin/busybox", filepath.Join(root, "bin", "sh")))
	// The tree is named through a link, as hack/build-node.sh's rootfs/ is.
	link := filepath.Join(t.TempDir(), "agnhost")
	must(os.Symlink(root, link))

	img, err := BuildTree(Tree{Root: link, Entrypoint: []string{"/agnhost"}, Cmd: []string{"pause"}, Architecture: "amd64", Title: "agnhost"})
	must(err)
	cfg, err := img.ConfigFile()
	must(err)
	if cfg.Config.User != "" || cfg.Config.Entrypoint[0] != "/agnhost" || cfg.Config.Cmd[0] != "pause" {
		t.Errorf("config %+v: want root, entrypoint /agnhost, cmd pause", cfg.Config)
	}
	layers, err := img.Layers()
	must(err)
	rc, err := layers[0].Uncompressed()
	must(err)
	defer rc.Close()
	got := map[string]*tar.Header{}
	for tr := tar.NewReader(rc); ; {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		must(err)
		got[hdr.Name] = hdr
	}
	want := map[string]struct {
		typ  byte
		mode int64
		link string
	}{
		"bin/":        {tar.TypeDir, 0o755, ""},
		"bin/busybox": {tar.TypeReg, 0o755, ""},
		"bin/sh":      {tar.TypeSymlink, 0o777, "/bin/busybox"},
		"tmp/":        {tar.TypeDir, 0o1777, ""},
	}
	if len(got) != len(want) {
		t.Errorf("layer has %d entries, want %d: %v", len(got), len(want), got)
	}
	for name, w := range want {
		h := got[name]
		if h == nil || h.Typeflag != w.typ || h.Mode != w.mode || h.Linkname != w.link || h.Uid != 0 || !h.ModTime.Equal(epoch) {
			t.Errorf("%s: got %+v, want type %c mode %o link %q owned by root at the epoch", name, h, w.typ, w.mode, w.link)
		}
	}
}

func TestBuildTreeAddsFiles(t *testing.T) {
	root := t.TempDir()
	if err := os.Mkdir(filepath.Join(root, "etc"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "etc", "passwd"), []byte("root:x:0:0::/:/bin/sh\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	img, err := BuildTree(Tree{Root: root, Files: map[string]string{"etc/wgetrc": "tries = 1\n"}, Architecture: "amd64", Title: "agnhost"})
	if err != nil {
		t.Fatal(err)
	}
	layers, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	rc, err := layers[0].Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	var names []string
	var wgetrc string
	for tr := tar.NewReader(rc); ; {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, hdr.Name)
		if hdr.Name == "etc/wgetrc" {
			data, _ := io.ReadAll(tr)
			wgetrc = string(data)
			if hdr.Typeflag != tar.TypeReg || hdr.Mode != 0o644 || hdr.Uid != 0 || !hdr.ModTime.Equal(epoch) {
				t.Errorf("etc/wgetrc: got %+v, want a file of mode 644 owned by root at the epoch", hdr)
			}
		}
	}
	if want := []string{"etc/", "etc/passwd", "etc/wgetrc"}; !slices.Equal(names, want) {
		t.Errorf("layer entries %v, want %v", names, want)
	}
	if wgetrc != "tries = 1\n" {
		t.Errorf("etc/wgetrc holds %q, want %q", wgetrc, "tries = 1\n")
	}

	for name, why := range map[string]string{"etc/passwd": "Root has it", "usr/etc/x": "no directory usr/etc in Root", "/etc/x": "not relative"} {
		if _, err := BuildTree(Tree{Root: root, Files: map[string]string{name: "x"}, Architecture: "amd64", Title: "agnhost"}); err == nil {
			t.Errorf("BuildTree with Files[%q] succeeded, want an error (%s)", name, why)
		}
	}
}
