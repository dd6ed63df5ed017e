#!/usr/bin/env bash
# Builds MetalLB's controller at the release pinned in hack/tools/metallb
# (a module of its own: see its tools.go) for hack/bench.sh's anchors suite,
# and copies the release's CRDs (config/crd/bases of the same module) beside
# it. The result lands in a cache folder keyed by the hash of that module's
# go.mod and go.sum — apart from hack/build-tools.sh's key, so pinning or
# bumping MetalLB leaves the other tools' cache valid. Prints the folder on
# stdout (metallb-controller and crd/ inside); progress goes to stderr.
#
# The first build takes about 3 minutes of CPU (17 wall on a busy 2-core machine).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
. "$root/hack/lib/go.sh"
module=$root/hack/tools/metallb
# Bump recipe when the build steps below change in a way that changes the output.
recipe=1
key=$( (echo "$recipe"; cat "$module/go.mod" "$module/go.sum") | sha256sum | cut -c1-16)
dir=${IPLEDGER_TOOLS_CACHE:-$HOME/.cache/ipledger-tools}/metallb-$key
. "$root/hack/lib/cached.sh"
build_metallb() {
export GOWORK=off GOFLAGS=-mod=mod CGO_ENABLED=0
cd "$module"
version=$(go list -m -f '{{.Version}}' go.universe.tf/metallb)
start=$SECONDS
echo "build-metallb: building MetalLB $version's controller (cache $dir)" >&2
go build -trimpath -ldflags "-s -w" -o "$dir/metallb-controller" go.universe.tf/metallb/controller
rm -rf "$dir/crd"
cp -r "$(go list -m -f '{{.Dir}}' go.universe.tf/metallb)/config/crd/bases" "$dir/crd"
chmod -R u+w "$dir/crd"
echo "$version" >"$dir/version"
echo "build-metallb: built in $((SECONDS - start))s" >&2
}
cached "$dir" build_metallb
echo "$dir"
