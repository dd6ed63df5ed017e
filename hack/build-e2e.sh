#!/usr/bin/env bash
# Builds the Kubernetes e2e test binary that test/cluster's
# TestUpstreamLoadBalancerSpecs runs against ipledger: hack/tools/e2e, a
# `go test -c` main of k8s.io/kubernetes/test/e2e's network specs only, at the
# k8s.io/kubernetes that hack/tools pins. It lands in a cache folder keyed by
# those pins and the main, so it is rebuilt only when one changes. Prints the
# binary's path on stdout; progress goes to stderr.
#
# Like hack/build-node.sh it builds against a copy of hack/tools/go.mod and
# go.sum (-modfile, -mod=mod): the e2e framework needs requirements and go.sum
# lines (ginkgo, gomega, ...) that the tools do not, and hack/tools/go.sum is
# the key of the tools cache, which must not move.
#
# After hack/build-node.sh (which compiles many of the same packages) it takes
# about 1.5 minutes on 2 cores; warm, it only prints the path.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
. "$root/hack/lib/go.sh"
tools=$root/hack/tools
cache=${IPLEDGER_E2E_CACHE:-$HOME/.cache/ipledger-e2e}
# Bump the recipe when the build step below changes in a way that changes the binary.
key=$( (echo 1; cat "$tools/go.mod" "$tools/go.sum" "$tools/e2e/"*.go) | sha256sum | cut -c1-16)
dir=$cache/$key
. "$root/hack/lib/cached.sh"
build_e2e() {
  export GOWORK=off CGO_ENABLED=0
  mkdir -p "$dir/mod"
  cp "$tools/go.mod" "$tools/go.sum" "$dir/mod/"
  chmod u+w "$dir/mod/go.mod" "$dir/mod/go.sum"
  kver=$(cd "$tools" && go list -m -f '{{.Version}}' k8s.io/kubernetes)
  ldflags="-s -w -X k8s.io/component-base/version.gitVersion=$kver -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$(echo "$kver" | cut -d. -f2) -X k8s.io/component-base/version.gitTreeState=clean"
  local start=$SECONDS
  echo "build-e2e: building the e2e binary of k8s.io/kubernetes $kver (cache $dir)" >&2
  (cd "$tools" && go test -c -trimpath -mod=mod -modfile="$dir/mod/go.mod" -ldflags "$ldflags" -o "$dir/e2e.test.tmp.$$" ./e2e)
  mv "$dir/e2e.test.tmp.$$" "$dir/e2e.test"
  echo "build-e2e: e2e.test built in $((SECONDS - start))s" >&2
}
cached "$dir" build_e2e
echo "$dir/e2e.test"
