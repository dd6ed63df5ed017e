#!/usr/bin/env bash
# Builds the pinned tools of hack/tools (kube-apiserver, kubectl, etcd, buf,
# protoc-gen-go, protoc-gen-go-grpc, grpcurl) and of hack/tools/promtool
# (Prometheus's promtool, a module of its own so that Prometheus's newer
# dependencies do not move kube-apiserver's and etcd's) into a cache folder
# keyed by the hash of their go.mod and go.sum, so they are rebuilt only when a
# pin changes. Prints the bin folder on stdout; progress goes to stderr.
#
# The first build takes about 17 minutes on 2 cores (kube-apiserver alone ~6,
# promtool ~6).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
. "$root/hack/lib/go.sh"
tools=$root/hack/tools
# Bump recipe when the build steps below change in a way that changes the binaries.
recipe=1
key=$( (echo "$recipe"; cat "$tools/go.mod" "$tools/go.sum" "$tools/etcd/main.go" "$tools/promtool/go.mod" "$tools/promtool/go.sum") | sha256sum | cut -c1-16)
dir=${IPLEDGER_TOOLS_CACHE:-$HOME/.cache/ipledger-tools}/$key
bin=$dir/bin
. "$root/hack/lib/cached.sh"
build_tools() {
mkdir -p "$bin"
export GOWORK=off GOFLAGS=-mod=mod CGO_ENABLED=0
kver=$(cd "$tools" && go list -m -f '{{.Version}}' k8s.io/kubernetes)
ldflags="-s -w -X k8s.io/component-base/version.gitVersion=$kver -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$(echo "$kver" | cut -d. -f2) -X k8s.io/component-base/version.gitTreeState=clean"
build() { # name package... (from the module in $module, default hack/tools)
  local name=$1; shift
  local start=$SECONDS
  echo "build-tools: building $name (cache $dir)" >&2
  (cd "${module:-$tools}" && go build -trimpath -ldflags "$ldflags" -o "$bin/$name" "$@")
  echo "build-tools: $name built in $((SECONDS - start))s" >&2
}
build etcd ./etcd
build buf github.com/bufbuild/buf/cmd/buf
build protoc-gen-go google.golang.org/protobuf/cmd/protoc-gen-go
build protoc-gen-go-grpc google.golang.org/grpc/cmd/protoc-gen-go-grpc
build grpcurl github.com/fullstorydev/grpcurl/cmd/grpcurl
build kubectl k8s.io/kubernetes/cmd/kubectl
build kube-apiserver k8s.io/kubernetes/cmd/kube-apiserver
module=$tools/promtool build promtool github.com/prometheus/prometheus/cmd/promtool
}
cached "$dir" build_tools
echo "$bin"
