// Command coredns is CoreDNS with only the plugins the test node's Corefile
// uses (pkg/cluster: errors, health, ready, kubernetes, cache): the full
// build links every plugin (cloud DNS providers, etcd, dnstap, …) and took
// five of hack/build-node.sh's twelve cold minutes. This is CoreDNS's own
// way to compile a subset ("Compile Time Enabling or Disabling Plugins"):
// the plugins' packages register themselves, and Directives gives their
// order, which is CoreDNS's (core/dnsserver/zdirectives.go).
package main

import (
	"github.com/coredns/coredns/core/dnsserver"
	"github.com/coredns/coredns/coremain"

	_ "github.com/coredns/coredns/plugin/cache"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/health"
	_ "github.com/coredns/coredns/plugin/kubernetes"
	_ "github.com/coredns/coredns/plugin/ready"
)

func init() {
	dnsserver.Directives = []string{"ready", "health", "errors", "cache", "kubernetes"}
}

func main() { coremain.Run() }
