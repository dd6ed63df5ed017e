#!/usr/bin/env bash
# Lints the protos and regenerates the Go code into a scratch copy, failing
# when the committed code differs (someone edited a .proto without `make proto`).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
. "$root/hack/lib/go.sh"
bin=$("$root/hack/build-tools.sh")
export PATH=$bin:$PATH
cd "$root"
buf lint
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
cp -r buf.yaml buf.gen.yaml proto "$scratch/"
find "$scratch/proto" -name '*.pb.go' -delete
(cd "$scratch" && buf generate)
if ! diff -r -x go.mod -x go.sum proto "$scratch/proto" >/dev/null; then
  echo "proto-check: generated code is out of date; run 'make proto' and commit:" >&2
  diff -r -q -x go.mod -x go.sum proto "$scratch/proto" >&2 || true
  exit 1
fi
echo "proto-check: buf lint clean, generated code up to date"
