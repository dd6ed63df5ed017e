#!/usr/bin/env bash
# Prints the packages of the fast test layer (`make test-unit`): those of the
# given package patterns that have tests and no TestMain. A TestMain is how an
# integration package starts its fixtures (etcd + kube-apiserver through
# lab/testenv, moto through lab/ec2test) once per test binary, so a package
# without one runs its tests in about a second. Integration tests live in
# packages of their own (…/integration) so that the pure tests beside the code
# stay in this layer.
#
#   hack/unit-packages.sh ./pkg/... ./services/ipam/...
set -euo pipefail
cd "$(dirname "$0")/.."
. hack/lib/go.sh
go list -f '{{if or .TestGoFiles .XTestGoFiles}}{{.Dir}} {{.ImportPath}}{{end}}' "$@" |
  while read -r dir pkg; do
    grep -qs '^func TestMain(' "$dir"/*_test.go || echo "$pkg"
  done
