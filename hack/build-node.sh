#!/usr/bin/env bash
# Builds the binaries of the test node (pkg/cluster) that hack/build-tools.sh
# does not: kubelet, kube-controller-manager, kube-scheduler and kube-proxy
# from the k8s.io/kubernetes that hack/tools pins, CoreDNS from
# hack/tools/coredns, and the pause program of hack/tools/pause. They go into a
# cache folder keyed by the hash of those pins, so they are rebuilt only when a
# pin changes. Prints the bin folder on stdout; progress goes to stderr.
# kube-apiserver, etcd and kubectl come from hack/build-tools.sh.
#
# The Kubernetes binaries are built against a copy of hack/tools/go.mod and
# go.sum (-modfile): they need go.sum lines that kube-apiserver does not, and
# hack/tools/go.sum is the key of the tools cache, which must not move.
#
# Each binary is also cached on its own, keyed by what it is built from
# (parts/<name>-<hash>), so that a change to one pin rebuilds only what it
# builds: CoreDNS (its own module, only the plugins the node uses:
# hack/tools/coredns/cmd/coredns) does not rebuild the kubelet, nor the
# reverse.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
tools=$root/hack/tools
cache=${IPLEDGER_NODE_CACHE:-$HOME/.cache/ipledger-node}
hash() { sha256sum | cut -c1-16; }
# Bump a recipe when its build step below changes in a way that changes the binary.
key_pause=$( (echo 1; cat "$tools/pause/main.go") | hash)
key_coredns=$( (echo 2; cat "$tools/coredns/go.mod" "$tools/coredns/go.sum" "$tools/coredns/cmd/coredns/main.go") | hash)
key_kube=$( (echo 1; cat "$tools/go.mod" "$tools/go.sum") | hash)
key=$(echo "$key_pause $key_coredns $key_kube" | hash)
dir=$cache/$key
bin=$dir/bin
. "$root/hack/lib/cached.sh"
build_node() {
mkdir -p "$bin" "$cache/parts"
export GOWORK=off CGO_ENABLED=0
kver=$(cd "$tools" && go list -m -f '{{.Version}}' k8s.io/kubernetes)
ldflags="-s -w -X k8s.io/component-base/version.gitVersion=$kver -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$(echo "$kver" | cut -d. -f2) -X k8s.io/component-base/version.gitTreeState=clean"
mkdir -p "$cache/parts/mod-$key_kube"
cp "$tools/go.mod" "$tools/go.sum" "$cache/parts/mod-$key_kube/"
build() { # name key module package [go build flags...]
  local name=$1 part=$cache/parts/$1-$2 module=$3 pkg=$4; shift 4
  if [ ! -f "$part" ]; then
    local start=$SECONDS
    echo "build-node: building $name (cache $part)" >&2
    (cd "$module" && go build -trimpath "$@" -o "$part.tmp.$$" "$pkg")
    mv "$part.tmp.$$" "$part"
    echo "build-node: $name built in $((SECONDS - start))s" >&2
  fi
  ln -f "$part" "$bin/$name"
}
build pause "$key_pause" "$tools" ./pause -ldflags "-s -w"
build coredns "$key_coredns" "$tools/coredns" ./cmd/coredns -ldflags "-s -w"
for name in kubelet kube-proxy kube-scheduler kube-controller-manager; do
  build "$name" "$key_kube" "$tools" "k8s.io/kubernetes/cmd/$name" -mod=mod -modfile="$cache/parts/mod-$key_kube/go.mod" -ldflags "$ldflags"
done
}
cached "$dir" build_node
echo "$bin"
