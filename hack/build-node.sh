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
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
tools=$root/hack/tools
# Bump recipe when the build steps below change in a way that changes the binaries.
recipe=1
key=$( (echo "$recipe"; cat "$tools/go.mod" "$tools/go.sum" "$tools/coredns/go.mod" "$tools/coredns/go.sum" "$tools/pause/main.go") | sha256sum | cut -c1-16)
dir=${IPLEDGER_NODE_CACHE:-$HOME/.cache/ipledger-node}/$key
bin=$dir/bin
if [ -f "$dir/.complete" ]; then
  echo "$bin"
  exit 0
fi
mkdir -p "$bin" "$dir/mod"
# One build at a time: tests and `make cluster-up` may ask at once.
exec 9>"$dir/.lock"
flock 9
if [ -f "$dir/.complete" ]; then
  echo "$bin"
  exit 0
fi
export GOWORK=off CGO_ENABLED=0
cp "$tools/go.mod" "$tools/go.sum" "$dir/mod/"
kver=$(cd "$tools" && go list -m -f '{{.Version}}' k8s.io/kubernetes)
ldflags="-s -w -X k8s.io/component-base/version.gitVersion=$kver -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$(echo "$kver" | cut -d. -f2) -X k8s.io/component-base/version.gitTreeState=clean"
build() { # name module package [go build flags...]
  local name=$1 module=$2 pkg=$3; shift 3
  local start=$SECONDS
  echo "build-node: building $name (cache $dir)" >&2
  (cd "$module" && go build -trimpath "$@" -o "$bin/$name" "$pkg")
  echo "build-node: $name built in $((SECONDS - start))s" >&2
}
build pause "$tools" ./pause -ldflags "-s -w"
build coredns "$tools/coredns" github.com/coredns/coredns -ldflags "-s -w"
for name in kubelet kube-proxy kube-scheduler kube-controller-manager; do
  build "$name" "$tools" "k8s.io/kubernetes/cmd/$name" -mod=mod -modfile="$dir/mod/go.mod" -ldflags "$ldflags"
done
touch "$dir/.complete"
echo "$bin"
