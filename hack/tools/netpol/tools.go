//go:build tools

// Package netpol pins kube-router, whose network policy controller (iptables
// and ipset) test/cluster runs on the node of `make test-cluster` to prove
// that the NetworkPolicies of deploy/kustomize/base are enforced
// (docs/security.md, "NetworkPolicies"). Only its firewall runs, as a host
// process inside that one test: it is a test-only enforcer, never shipped.
// v2.1.0 is the only release the module proxy serves here, and security
// flaws are reported against it; acceptable for a test on a closed machine,
// not for anything installed. A module of its own, apart from hack/tools and
// never in go.work: kube-router's client-go and gRPC pins must not move
// kube-apiserver's, etcd's or ipledger's.
package netpol

import _ "github.com/cloudnativelabs/kube-router/v2/cmd/kube-router"
