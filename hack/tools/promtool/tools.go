//go:build tools

// Package promtool pins Prometheus's promtool, which checks and unit-tests
// the alerting rules of deploy/kustomize/components/monitoring. It is a
// module of its own, apart from hack/tools: Prometheus needs newer gRPC,
// OpenTelemetry and client_golang versions than kube-apiserver and etcd are
// pinned with, and one module would move those pins too.
package promtool

import _ "github.com/prometheus/prometheus/cmd/promtool"
