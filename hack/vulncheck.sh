#!/usr/bin/env bash
# govulncheck over the binaries ipledger ships, offline (`make vulncheck`,
# part of `make test`; docs/security.md, "Supply chain"):
#
#  1. builds govulncheck and the harness of hack/tools/vuln (a module of its
#     own, kept out of go.work and out of hack/build-tools.sh's cache key),
#     cached in ~/.cache/ipledger-vuln/tools-<hash of that module>;
#  2. builds a govulncheck database (index/db.json, index/modules.json,
#     index/vulns.json, ID/<id>.json) from the OSV reports that the
#     golang.org/x/vulndb module carries, fetched from the Go module proxy
#     and cached in ~/.cache/ipledger-vuln/db-<vulndb version>-<hash>;
#  3. builds the four services and kubectl-ipledger as the images do
#     (lab/containerimage.GoBuildArgs) into .dev/vulncheck/bin and runs
#     govulncheck in binary mode over each, with -db file://<that database>.
#
# It fails when a binary links a vulnerable symbol of a module; one of the
# standard library is reported with the Go release that fixes it. Measured on
# 2 busy cores with empty caches: the tools 70 s, the database 5 s (the
# vulndb module is a 25 MB zip of 4,789 reports), the binaries 4.5 min (which
# `make images` then reuses); warm, the whole check takes about 2 s.
#
# To take newer reports: IPLEDGER_VULNDB_VERSION=$(GOFLAGS=-mod=mod go list -m
# -f '{{.Version}}' golang.org/x/vulndb@latest) hack/vulncheck.sh, then pin
# that version below.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
. "$root/hack/lib/go.sh"
module=$root/hack/tools/vuln
vulndb=${IPLEDGER_VULNDB_VERSION:-v0.0.0-20261105234957-e22db6528018}
cache=${IPLEDGER_VULN_CACHE:-$HOME/.cache/ipledger-vuln}
# Bump recipe when the build steps below change in a way that changes the outputs.
recipe=1

. "$root/hack/lib/cached.sh"

key=$( (echo "$recipe"; cat "$module/go.mod" "$module/go.sum" "$module"/vulncheck/*.go) | sha256sum | cut -c1-16)
tools=$cache/tools-$key
build_tools() {
  local start=$SECONDS
  echo "vulncheck: building govulncheck and the harness (cache $tools)" >&2
  # The harness's tests (the index govulncheck trusts, what fails the
  # check) run here, once per change of hack/tools/vuln.
  (cd "$module" && export GOWORK=off GOFLAGS=-mod=mod CGO_ENABLED=0 &&
    go build -trimpath -ldflags "-s -w" -o "$tools/bin/govulncheck" golang.org/x/vuln/cmd/govulncheck &&
    go test -count=1 ./vulncheck >&2 &&
    go build -trimpath -o "$tools/bin/vulncheck" ./vulncheck)
  echo "vulncheck: tools built in $((SECONDS - start))s" >&2
}
cached "$tools" build_tools

dbkey=$( (echo "$recipe"; cat "$module/vulncheck/db.go") | sha256sum | cut -c1-8)
db=$cache/db-$vulndb-$dbkey
build_db() {
  local start=$SECONDS src at
  echo "vulncheck: building the database of golang.org/x/vulndb@$vulndb (cache $db)" >&2
  # Outside any module: the version is all that is asked of the proxy, and
  # the checksum database vouches for the zip.
  src=$(cd "$db" && GOWORK=off GOFLAGS=-mod=mod go mod download -json "golang.org/x/vulndb@$vulndb" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",*$/\1/p')
  at=$(cd "$db" && GOWORK=off GOFLAGS=-mod=mod go list -m -f '{{.Time.UTC.Format "2006-01-02T15:04:05Z07:00"}}' "golang.org/x/vulndb@$vulndb")
  rm -rf "$db/ID" "$db/index"
  "$tools/bin/vulncheck" db -osv "$src/data/osv" -out "$db" -time "$at"
  echo "vulncheck: database built in $((SECONDS - start))s" >&2
}
cached "$db" build_db

out=$root/.dev/vulncheck/bin
mkdir -p "$out"
# One build and scan at a time in a working tree: a second would read a
# binary while the first writes it.
exec 8>"$root/.dev/vulncheck/.lock"
flock 8
pkgs=(./services/watcher/cmd/ipledger-watcher ./services/ipam/cmd/ipledger-ipam
  ./services/endpoints/cmd/ipledger-endpoints ./services/eipd/cmd/ipledger-eipd ./services/signer/cmd/ipledger-signer
  ./plugin/cmd/kubectl-ipledger)
start=$SECONDS
# The arguments of lab/containerimage.GoBuildArgs and GoBuildEnv: the
# binaries of the images, whose build tags decide what is linked in, stamped
# as ReadProvenance stamps them (so `make images` links nothing again).
version=$(tr -d '[:space:]' <"$root/VERSION")
revision=${IPLEDGER_REVISION:-$(git -C "$root" rev-parse HEAD 2>/dev/null || echo unknown)}
if [ -z "${IPLEDGER_REVISION:-}" ] && [ "$revision" != unknown ] && [ -n "$(git -C "$root" status --porcelain --untracked-files=no)" ]; then
  revision=$revision-dirty
fi
(cd "$root" && CGO_ENABLED=0 go build -trimpath -tags grpcnotrace -ldflags "-s -w -X github.com/ipledger/ipledger/pkg/version.version=$version -X github.com/ipledger/ipledger/pkg/version.revision=$revision" -o "$out/" "${pkgs[@]}")
built=$((SECONDS - start))
start=$SECONDS
status=0
"$tools/bin/vulncheck" scan -govulncheck "$tools/bin/govulncheck" -db "$db" "${pkgs[@]/#*\//$out/}" || status=$?
echo "vulncheck: golang.org/x/vulndb@$vulndb; binaries built in ${built}s, scanned in $((SECONDS - start))s" >&2
exit $status
