//go:build tools

// Package metallb pins MetalLB's controller, which hack/bench.sh's anchors
// suite runs beside ipam on the same API server and the same Services
// (BENCHMARKS.md). It is a module of its own, apart from hack/tools and never
// in go.work: MetalLB's controller-runtime and Kubernetes pins must not move
// kube-apiserver's, etcd's or ipledger's.
package metallb

import _ "go.universe.tf/metallb/controller"
