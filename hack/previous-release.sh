#!/usr/bin/env bash
# Builds the previous release's images (hack/previous-release) from its own
# source: a git worktree of its commit, where its own ipledger-images (pkg/cmd/
# before issue 50 moved the lab to lab/, lab/cmd/ after)
# runs with --tag v<version>, so that its images (ghcr.io/ipledger/<service>:v<version>)
# sit on the test node beside today's :dev ones. Everything is cached by
# commit under ${IPLEDGER_RELEASES_CACHE:-~/.cache/ipledger-releases}/<commit>:
#   src/      the worktree (its deploy/kustomize is what the test installs)
#   images/   the OCI archives
#   overlay/  overlays/e2e of the release with its images re-tagged v<version>
# GOCACHE is the usual one. The release builds with its own Go (go1.26.8 for
# 0.2.0, below), whose compiled packages today's tree (go1.27.3) does not
# share: on a machine that never built with go1.26.8 its first build compiles
# everything once (then it is cached by commit).
# Prints the cache folder on stdout; progress goes to stderr.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
. "$root/hack/lib/go.sh"
file=$root/hack/previous-release
version=$(awk '$1 == "version" {print $2}' "$file")
commit=$(awk '$1 == "commit" {print $2}' "$file")
if [ -z "$version" ] || [ ${#commit} -ne 40 ]; then
  echo "previous-release.sh: $file names no version and full commit" >&2
  exit 1
fi
dir=${IPLEDGER_RELEASES_CACHE:-$HOME/.cache/ipledger-releases}/$commit
. "$root/hack/lib/cached.sh"
build_release() {
start=$(date +%s)
git -C "$root" worktree prune
if ! git -C "$root" cat-file -e "$commit^{commit}" 2>/dev/null; then
  echo "previous-release.sh: commit $commit ($version) is not in this clone (shallow?): git fetch origin $commit, or --unshallow" >&2
  exit 1
fi
if [ ! -e "$dir/src/.git" ]; then
  rm -rf "$dir/src"
  git -C "$root" worktree add --detach "$dir/src" "$commit" >&2
fi
if [ "$(git -C "$dir/src" rev-parse HEAD)" != "$commit" ]; then
  echo "previous-release.sh: $dir/src is not at $commit" >&2
  exit 1
fi
echo "previous-release.sh: building the images of $version ($commit) in $dir/src" >&2
# With the Go the release was built with, its own go.work's (go1.26.8 for
# 0.2.0), not this tree's GOTOOLCHAIN: the images are then those it shipped.
# Where that is the machine's own Go, as here, nothing is downloaded.
release_go=go$(awk '$1 == "go" {print $2}' "$dir/src/go.work")
echo "previous-release.sh: with $release_go" >&2
images_cmd=./lab/cmd/ipledger-images
[ -d "$dir/src/lab/cmd/ipledger-images" ] || images_cmd=./pkg/cmd/ipledger-images
(cd "$dir/src" && GOTOOLCHAIN=$release_go GOFLAGS=-buildvcs=false go run "$images_cmd" --tag "v$version" --out "$dir/images") >&2
mkdir -p "$dir/overlay"
{
  echo "# Written by hack/previous-release.sh: overlays/e2e of $version, running its own images."
  echo "apiVersion: kustomize.config.k8s.io/v1beta1"
  echo "kind: Kustomization"
  echo "resources: [../src/deploy/kustomize/overlays/e2e]"
  echo "images:"
  for svc in watcher ipam endpoints eipd; do
    echo "  - {name: ghcr.io/ipledger/$svc, newTag: v$version}"
  done
} >"$dir/overlay/kustomization.yaml"
echo "$version" >"$dir/version"
echo "previous-release.sh: $version built in $(($(date +%s) - start))s" >&2
}
cached "$dir" build_release
echo "$dir"
