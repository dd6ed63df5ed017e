#!/usr/bin/env bash
# Builds MetalLB's speaker at the release pinned in hack/tools/metallb, for
# test/cluster's TestAnnounce (docs/reachability.md: ipam allocates, the
# speaker announces in layer-2 mode), and copies the release's CRDs beside it.
#
# hack/tools/metallb imports only the controller (hack/bench.sh's anchors
# suite), and its go.mod and go.sum are the key of hack/build-metallb.sh's
# cache, which must not move. So the speaker is built against a copy of that
# go.mod and go.sum (-modfile), which `go build -mod=mod` completes with the
# go.sum lines the speaker needs (memberlist, ARP/NDP and netlink libraries)
# in the copy only. The result lands in a cache folder keyed by the same pins
# plus this script's recipe. Prints the folder on stdout (metallb-speaker,
# crd/ and version inside); progress goes to stderr.
#
# The first build takes about 3 minutes of CPU (114 s wall on a busy 2-core
# machine, module downloads included); warm, it returns in milliseconds.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
. "$root/hack/lib/go.sh"
module=$root/hack/tools/metallb
# Bump recipe when the build steps below change in a way that changes the output.
recipe=1
key=$( (echo "speaker $recipe"; cat "$module/go.mod" "$module/go.sum") | sha256sum | cut -c1-16)
dir=${IPLEDGER_TOOLS_CACHE:-$HOME/.cache/ipledger-tools}/metallb-speaker-$key
. "$root/hack/lib/cached.sh"
build_speaker() {
export GOWORK=off CGO_ENABLED=0
mkdir -p "$dir/mod"
cp "$module/go.mod" "$module/go.sum" "$dir/mod/"
chmod u+w "$dir/mod/go.mod" "$dir/mod/go.sum"
cd "$module"
version=$(go list -m -f '{{.Version}}' go.universe.tf/metallb)
start=$SECONDS
echo "build-speaker: building MetalLB $version's speaker (cache $dir)" >&2
go build -trimpath -mod=mod -modfile="$dir/mod/go.mod" -ldflags "-s -w" -o "$dir/metallb-speaker.tmp.$$" go.universe.tf/metallb/speaker
mv "$dir/metallb-speaker.tmp.$$" "$dir/metallb-speaker"
rm -rf "$dir/crd"
cp -r "$(go list -m -f '{{.Dir}}' go.universe.tf/metallb)/config/crd/bases" "$dir/crd"
chmod -R u+w "$dir/crd"
echo "$version" >"$dir/version"
echo "build-speaker: built in $((SECONDS - start))s" >&2
}
cached "$dir" build_speaker
echo "$dir"
