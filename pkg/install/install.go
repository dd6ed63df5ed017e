// Package install names what every ipledger install shares and every
// binary and kubectl-ipledger must agree on: the namespace ipledger runs
// in unless told otherwise. It imports nothing, so that any package may
// use it (pkg/leader, pkg/cmdmain, pkg/stream, the plugin).
package install

// DefaultNamespace is the namespace an install runs in, and keeps its
// Leases and its ledger in, unless a flag names another (the base install,
// deploy/kustomize/base).
const DefaultNamespace = "ipledger-system"
