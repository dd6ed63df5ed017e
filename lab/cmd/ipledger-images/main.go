// Command ipledger-images builds ipledger's container images without Docker
// or a registry (`make images`): each binary, static, on an empty base, as an
// OCI archive in .dev/images/<binary>.tar, ready for
// `ctr -n k8s.io images import`. The Dockerfile builds the same images for
// users with Docker (lab/containerimage keeps the two in step).
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/ipledger/ipledger/lab/containerimage"
)

const usage = `ipledger-images builds ipledger's container images offline: no Docker, no registry.

Usage (from the repository root; make images runs it):
  ipledger-images [flags] [binary...]

Each binary (default: all of %s)
is built static (CGO_ENABLED=0, -trimpath, -ldflags "-s -w") for linux/<arch>,
put at /ipledger on an empty base with the CA bundle, to run as %d:%d, and
written as an OCI archive <out>/<binary>.tar naming the image
ghcr.io/ipledger/<service>:<tag>, e.g. ghcr.io/ipledger/watcher:%s, labelled with
the release (VERSION) and the git commit. An archive that
already holds the same image is left alone, so a second run with nothing
changed only checks (a few seconds).

Load one with:
  ctr -n k8s.io images import .dev/images/ipledger-watcher.tar   (containerd)
  docker load -i .dev/images/ipledger-watcher.tar                 (Docker 25 or newer)
  podman load -i .dev/images/ipledger-watcher.tar

Flags:
`

func main() {
	out := flag.String("out", ".dev/images", "directory of the archives (the binaries go to <out>/bin)")
	tag := flag.String("tag", containerimage.Tag, `tag of every image (deploy/kustomize/overlays/e2e expects the default; "latest" would make the kubelet pull)`)
	arch := flag.String("arch", orDefault(os.Getenv("GOARCH"), runtime.GOARCH), "GOARCH of the binaries and images")
	ca := flag.String("ca-certificates", containerimage.HostCACertificates, "CA bundle copied into every image (Debian's ca-certificates package)")
	flag.Usage = func() {
		names := make([]string, len(containerimage.Binaries))
		for i, b := range containerimage.Binaries {
			names[i] = b.Name
		}
		fmt.Fprintf(flag.CommandLine.Output(), usage, strings.Join(names, ", "), containerimage.UID, containerimage.GID, containerimage.Tag)
		flag.PrintDefaults()
	}
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, *out, *tag, *arch, *ca, flag.Args()); err != nil {
		fmt.Fprintln(os.Stderr, "ipledger-images:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, out, tag, arch, ca string, names []string) error {
	bins, err := selectBinaries(names)
	if err != nil {
		return err
	}
	if _, err := os.Stat(ca); err != nil {
		return fmt.Errorf("CA bundle: %w (install Debian's ca-certificates package, or pass --ca-certificates)", err)
	}
	binDir := filepath.Join(out, "bin")
	if err := os.MkdirAll(binDir, 0o755); err != nil {
		return err
	}
	prov, err := containerimage.ReadProvenance(ctx, ".")
	if err != nil {
		return err
	}
	start := time.Now()
	if err := containerimage.GoBuild(ctx, ".", binDir, arch, prov, bins); err != nil {
		return err
	}
	for _, b := range bins {
		img, err := containerimage.Build(containerimage.Contents{
			Binary: filepath.Join(binDir, b.Name), CACertificates: ca, Architecture: arch, Title: b.Name, Provenance: prov,
		})
		if err != nil {
			return fmt.Errorf("%s: %w", b.Name, err)
		}
		digest, err := img.Digest()
		if err != nil {
			return fmt.Errorf("%s: %w", b.Name, err)
		}
		path := filepath.Join(out, b.Name+".tar")
		ref := b.Ref(tag)
		had, ok, err := containerimage.ArchivedDigest(path, ref)
		if err != nil {
			return err
		}
		state := "unchanged"
		if !ok || had != digest {
			if err := containerimage.WriteArchive(path, ref, img); err != nil {
				return fmt.Errorf("%s: %w", path, err)
			}
			state = "written"
		}
		fmt.Printf("%-36s %-24s %s %s\n", path, ref, digest, state)
	}
	fmt.Printf("%d images in %s\n", len(bins), time.Since(start).Round(100*time.Millisecond))
	return nil
}

// selectBinaries is the binaries named, all when none is.
func selectBinaries(names []string) ([]containerimage.Binary, error) {
	if len(names) == 0 {
		return containerimage.Binaries, nil
	}
	var bins []containerimage.Binary
	for _, n := range names {
		i := slices.IndexFunc(containerimage.Binaries, func(b containerimage.Binary) bool { return b.Name == n })
		if i < 0 {
			return nil, fmt.Errorf("unknown binary %q (run with --help for the list)", n)
		}
		bins = append(bins, containerimage.Binaries[i])
	}
	return bins, nil
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}
