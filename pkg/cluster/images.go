package cluster

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"

	"github.com/ipledger/ipledger/pkg/containerimage"
)

// importNodeImages builds the images of the pause program and CoreDNS from
// hack/build-node.sh's binaries, the way `make images` builds ipledger's,
// and AgnhostImage from its root filesystem, and imports them.
func (c *Cluster) importNodeImages(ctx context.Context) error {
	dir := c.l.path("images")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for ref, bin := range map[string]string{PauseImage: "pause", CoreDNSImage: "coredns"} {
		img, err := containerimage.Build(containerimage.Contents{
			Binary: filepath.Join(c.NodeBin, bin), Architecture: runtime.GOARCH, Title: bin,
		})
		if err != nil {
			return fmt.Errorf("image %s: %w", ref, err)
		}
		if err := containerimage.WriteArchive(filepath.Join(dir, bin+".tar"), ref, img); err != nil {
			return fmt.Errorf("image %s: %w", ref, err)
		}
	}
	agnhost, err := containerimage.BuildTree(containerimage.Tree{
		Root:       filepath.Join(filepath.Dir(c.NodeBin), "rootfs", "agnhost"),
		Entrypoint: []string{"/agnhost"}, Cmd: []string{"pause"},
		Env:          []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"},
		Architecture: runtime.GOARCH, Title: "agnhost",
	})
	if err != nil {
		return err
	}
	if err := containerimage.WriteArchive(filepath.Join(dir, "agnhost.tar"), AgnhostImage, agnhost); err != nil {
		return fmt.Errorf("image %s: %w", AgnhostImage, err)
	}
	return c.ImportImages(ctx, dir)
}

// ImportImages imports every OCI or Docker archive (*.tar) in dir into the
// node's containerd, where the kubelet finds them (namespace k8s.io).
func (c *Cluster) ImportImages(ctx context.Context, dir string) error {
	tars, err := filepath.Glob(filepath.Join(dir, "*.tar"))
	if err != nil {
		return err
	}
	if len(tars) == 0 {
		return fmt.Errorf("no image archives (*.tar) in %s: build them with `make images`", dir)
	}
	for _, tar := range tars {
		if _, err := c.ctr(ctx, "-n", "k8s.io", "images", "import", tar); err != nil {
			return fmt.Errorf("import %s: %w", tar, err)
		}
	}
	return nil
}

// TagImage gives the image src of the node's containerd the name dst too
// (replacing an image of that name), so that a manifest naming dst runs src
// without a pull: the release's names over the images `make images` built.
func (c *Cluster) TagImage(ctx context.Context, src, dst string) error {
	_, err := c.ctr(ctx, "-n", "k8s.io", "images", "tag", "--force", src, dst)
	return err
}

// Ctr runs ctr against the node's containerd (its own socket) with args, as
// an operator runs `ctr -n k8s.io …` on a node: test/cluster's
// TestReleaseDirectory imports a release's archives with docs/install.md's
// command word for word.
func (c *Cluster) Ctr(ctx context.Context, args ...string) ([]byte, error) {
	return c.ctr(ctx, args...)
}

func (c *Cluster) ctr(ctx context.Context, args ...string) ([]byte, error) {
	out, err := exec.CommandContext(ctx, "ctr", append([]string{"--address", c.l.containerdSocket()}, args...)...).CombinedOutput()
	if err != nil {
		return out, fmt.Errorf("ctr %s: %w: %s", strings.Join(args, " "), err, out)
	}
	return out, nil
}

// mustFullName is ref as containerd names it (docker.io/...); the refs are
// constants of this package.
func mustFullName(ref string) string {
	full, err := containerimage.FullName(ref)
	if err != nil {
		panic(err)
	}
	return full
}
