// Command ipledger-endpoints keeps EndpointSlices for Services that select
// ExternalWorkloads, acting only while it holds the ipledger-endpoints Lease.
package main

import (
	"context"
	"flag"
	"os"

	"github.com/ipledger/ipledger/pkg/cmdmain"
	"github.com/ipledger/ipledger/services/endpoints/internal/app"
)

func main() {
	var cfg app.Config
	fs := flag.NewFlagSet("ipledger-endpoints", flag.ContinueOnError)
	fs.SetOutput(os.Stderr)
	cfg.Flags(fs)
	cmdmain.Main("ipledger-endpoints", fs, func(ctx context.Context) error { return app.Run(ctx, cfg) })
}
