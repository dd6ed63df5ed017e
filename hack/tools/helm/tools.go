//go:build tools

// Package tools pins Helm (v4, from its Go module) for the chart of
// deploy/helm/ipledger: hack/build-helm.sh builds its CLI, which the tests
// that render the chart (test/e2e's TestHelmChartRendersWhatKustomizeBuilds,
// lab/cmd/ipledger-release's TestReleaseDirectoryIsWhatAUserInstalls) run
// as a user would. A module of its own, kept out of go.work (as
// hack/tools/sbom): Helm's dependencies never enter the module graph of the
// binaries ipledger ships, and bumping Helm leaves hack/build-tools.sh's
// cache valid.
package tools

import _ "helm.sh/helm/v4/cmd/helm"
