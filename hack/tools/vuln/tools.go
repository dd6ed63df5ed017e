//go:build tools

// Package vuln pins govulncheck, which `make vulncheck` runs over the built
// binaries against a database made from golang.org/x/vulndb's reports
// (./vulndb). It is a module of its own, apart from hack/tools, so that
// bumping it rebuilds only govulncheck, not kube-apiserver and etcd.
package vuln

import _ "golang.org/x/vuln/cmd/govulncheck"
