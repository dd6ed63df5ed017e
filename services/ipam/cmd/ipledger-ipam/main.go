// Command ipledger-ipam allocates LoadBalancer IPs from IPPools, keeps every
// allocation in a ConfigMap ledger, and answers grpcurl. See
// services/ipam/internal/controller. `ipledger-ipam preflight` lists, before
// an upgrade, the Services this version would treat differently
// (services/ipam/internal/preflight).
package main

import (
	"context"
	"flag"
	"os"

	"github.com/ipledger/ipledger/pkg/cmdmain"
	"github.com/ipledger/ipledger/services/ipam/internal/app"
	"github.com/ipledger/ipledger/services/ipam/internal/preflight"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "preflight" {
		// A one-shot command with exit codes of its own (3: an address
		// would move), which cmdmain.Main's 0/1/2 cannot carry.
		os.Exit(preflight.Main(os.Args[2:], os.Stdout, os.Stderr))
	}
	fs := flag.NewFlagSet("ipledger-ipam", flag.ContinueOnError)
	var cfg app.Config
	cfg.Flags(fs)
	cmdmain.Main("ipledger-ipam", fs, func(ctx context.Context) error { return app.Run(ctx, cfg) })
}
