package cluster

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"

	"github.com/ipledger/ipledger/lab/containerimage"
)

// agnhostWgetrc is the agnhost image's /etc/wgetrc: GNU wget, which the
// image has in place of busybox's (hack/build-node.sh), tries once, as
// busybox's wget of upstream's image does. Its default is 20 tries with
// up to 10 s between them, so a probe the specs expect to fail — `wget -T
// 5` to a LoadBalancer address kube-proxy drops for a source outside
// loadBalancerSourceRanges — took about 4 minutes instead of 5 s.
const agnhostWgetrc = "tries = 1\n"

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
		Files:        map[string]string{"etc/wgetrc": agnhostWgetrc},
		Architecture: runtime.GOARCH, Title: "agnhost",
	})
	if err != nil {
		return err
	}
	if err := containerimage.WriteArchive(filepath.Join(dir, "agnhost.tar"), AgnhostImage, agnhost); err != nil {
		return fmt.Errorf("image %s: %w", AgnhostImage, err)
	}
	// Only the first node's containerd: Up imports them into the others'
	// as it starts each.
	return c.importInto(ctx, c.nodes[0], dir)
}

// ImportImages imports every OCI or Docker archive (*.tar) in dir into
// every node's containerd, where the kubelets find them (namespace
// k8s.io), the nodes at once.
func (c *Cluster) ImportImages(ctx context.Context, dir string) error {
	return c.eachNode(func(n node) error { return c.importInto(ctx, n, dir) })
}

// importInto imports dir's archives into node n's containerd.
func (c *Cluster) importInto(ctx context.Context, n node, dir string) error {
	tars, err := filepath.Glob(filepath.Join(dir, "*.tar"))
	if err != nil {
		return err
	}
	if len(tars) == 0 {
		return fmt.Errorf("no image archives (*.tar) in %s: build them with `make images`", dir)
	}
	for _, tar := range tars {
		if _, err := ctr(ctx, n, "-n", "k8s.io", "images", "import", tar); err != nil {
			return fmt.Errorf("import %s into %s: %w", tar, n.Name, err)
		}
	}
	return nil
}

// TagImage gives the image src of every node's containerd the name dst too
// (replacing an image of that name), so that a manifest naming dst runs src
// without a pull: the release's names over the images `make images` built.
func (c *Cluster) TagImage(ctx context.Context, src, dst string) error {
	return c.eachNode(func(n node) error {
		_, err := ctr(ctx, n, "-n", "k8s.io", "images", "tag", "--force", src, dst)
		return err
	})
}

// eachNode runs f for every node at once and joins their errors.
func (c *Cluster) eachNode(f func(node) error) error {
	errs := make([]error, len(c.nodes))
	var wg sync.WaitGroup
	for i, n := range c.nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = f(n)
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// Ctr runs ctr with args against every node's containerd (each its own
// socket), as an operator runs `ctr -n k8s.io …` on each node:
// test/cluster's TestReleaseDirectory imports a release's archives with
// docs/install.md's command word for word. The output is every node's.
func (c *Cluster) Ctr(ctx context.Context, args ...string) ([]byte, error) {
	var mu sync.Mutex
	var all []byte
	err := c.eachNode(func(n node) error {
		out, err := ctr(ctx, n, args...)
		mu.Lock()
		all = append(all, out...)
		mu.Unlock()
		return err
	})
	return all, err
}

// ctr runs ctr against node n's containerd.
func ctr(ctx context.Context, n node, args ...string) ([]byte, error) {
	out, err := exec.CommandContext(ctx, "ctr", append([]string{"--address", n.l.containerdSocket()}, args...)...).CombinedOutput()
	if err != nil {
		return out, fmt.Errorf("ctr of %s %s: %w: %s", n.Name, strings.Join(args, " "), err, out)
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
