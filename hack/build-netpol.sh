#!/usr/bin/env bash
# Builds kube-router at the release pinned in hack/tools/netpol (a module of
# its own: see its tools.go). test/cluster's TestNetworkPoliciesAreEnforced
# runs its network policy controller alone (--run-firewall, no router, no
# service proxy) as a host process on the node of `make test-cluster`, to
# prove deploy/kustomize/base/networkpolicies.yaml is enforced; it programs
# the kernel with the host's iptables and ipset commands. Test-only, never
# shipped: v2.1.0 is the only release the module proxy serves here and
# security flaws are reported against it (docs/security.md,
# "NetworkPolicies"). The result lands in a cache folder keyed by the hash of
# that module's go.mod and go.sum — apart from hack/build-tools.sh's key, so
# pinning or bumping kube-router leaves the other tools' cache valid. Prints
# the folder on stdout (kube-router inside); progress goes to stderr.
#
# The first build takes about 3 minutes of CPU (197 s wall with an empty Go
# build cache on a busy 2-core machine, 95-127 s with a warm one); cached, the
# script returns at once.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
. "$root/hack/lib/go.sh"
module=$root/hack/tools/netpol
# Bump recipe when the build steps below change in a way that changes the output.
recipe=1
key=$( (echo "$recipe"; cat "$module/go.mod" "$module/go.sum") | sha256sum | cut -c1-16)
dir=${IPLEDGER_TOOLS_CACHE:-$HOME/.cache/ipledger-tools}/netpol-$key
. "$root/hack/lib/cached.sh"
build_netpol() {
export GOWORK=off GOFLAGS=-mod=mod CGO_ENABLED=0
cd "$module"
version=$(go list -m -f '{{.Version}}' github.com/cloudnativelabs/kube-router/v2)
start=$SECONDS
echo "build-netpol: building kube-router $version (cache $dir)" >&2
go build -trimpath -ldflags "-s -w" -o "$dir/kube-router" github.com/cloudnativelabs/kube-router/v2/cmd/kube-router
echo "$version" >"$dir/version"
echo "build-netpol: built in $((SECONDS - start))s" >&2
}
cached "$dir" build_netpol
echo "$dir"
