// Command ipledger-eipd gives AWS Elastic IPs to Nodes an operator labelled
// node-restriction.kubernetes.io/ipledger-externalip-auto-assign=true, on
// instances of the cluster only, acting only while it holds the
// ipledger-eipd Lease. EC2 endpoint, region and credentials come from the
// AWS SDK's standard chain (AWS_ENDPOINT_URL_EC2, AWS_REGION, ...).
package main

import (
	"context"
	"flag"
	"os"

	"github.com/ipledger/ipledger/pkg/cmdmain"
	"github.com/ipledger/ipledger/services/eipd/internal/app"
)

func main() {
	var cfg app.Config
	fs := flag.NewFlagSet("ipledger-eipd", flag.ContinueOnError)
	fs.SetOutput(os.Stderr)
	cfg.Flags(fs)
	cmdmain.Main("ipledger-eipd", fs, func(ctx context.Context) error { return app.Run(ctx, cfg) })
}
