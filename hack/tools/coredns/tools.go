//go:build tools

// Package tools pins CoreDNS, the cluster DNS of the test node (lab/cluster),
// in a module of its own so that its dependencies do not move
// kube-apiserver's and etcd's in hack/tools.
package tools

import (
	_ "github.com/coredns/coredns"
)
