#!/usr/bin/env bash
# Builds Helm's CLI (v4, at the release pinned in hack/tools/helm, a module of
# its own: see its tools.go) for the tests that render and package the chart
# of deploy/helm/ipledger as a user would. The result lands in a cache folder
# keyed by the hash of that module's go.mod and go.sum — apart from
# hack/build-tools.sh's key, so pinning or bumping Helm leaves the other
# tools' cache valid. Prints the folder on stdout (helm inside); progress goes
# to stderr. $IPLEDGER_HELM_DIR, when set, is that folder already built.
#
# The first build takes about 2 minutes of CPU (9 wall on a busy 2-core machine).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
. "$root/hack/lib/go.sh"
module=$root/hack/tools/helm
# Bump recipe when the build steps below change in a way that changes the output.
recipe=1
key=$( (echo "$recipe"; cat "$module/go.mod" "$module/go.sum") | sha256sum | cut -c1-16)
dir=${IPLEDGER_TOOLS_CACHE:-$HOME/.cache/ipledger-tools}/helm-$key
. "$root/hack/lib/cached.sh"
build_helm() {
export GOWORK=off GOFLAGS=-mod=mod CGO_ENABLED=0
cd "$module"
version=$(go list -m -f '{{.Version}}' helm.sh/helm/v4)
start=$SECONDS
echo "build-helm: building Helm $version (cache $dir)" >&2
go build -trimpath -ldflags "-s -w -X helm.sh/helm/v4/internal/version.version=$version" -o "$dir/helm" helm.sh/helm/v4/cmd/helm
echo "$version" >"$dir/version"
echo "build-helm: built in $((SECONDS - start))s" >&2
}
cached "$dir" build_helm
echo "$dir"
