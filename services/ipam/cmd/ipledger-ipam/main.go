// Command ipledger-ipam allocates LoadBalancer IPs from IPPools, keeps every
// allocation in a ConfigMap ledger, and answers grpcurl. See
// services/ipam/internal/controller.
package main

import (
	"flag"

	"github.com/ipledger/ipledger/pkg/cmdmain"
	"github.com/ipledger/ipledger/services/ipam/internal/app"
)

func main() {
	fs := flag.NewFlagSet("ipledger-ipam", flag.ContinueOnError)
	var cfg app.Config
	cfg.Flags(fs)
	cmdmain.Main("ipledger-ipam", fs, cfg.Run)
}
