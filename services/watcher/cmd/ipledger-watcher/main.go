// Command ipledger-watcher runs the only informers of ipledger and streams the
// state of the world to every other component.
package main

import (
	"context"
	"flag"

	"github.com/ipledger/ipledger/pkg/cmdmain"
	"github.com/ipledger/ipledger/services/watcher/internal/app"
)

func main() {
	var cfg app.Config
	fs := flag.NewFlagSet("ipledger-watcher", flag.ContinueOnError)
	cfg.Flags(fs)
	cmdmain.Main("ipledger-watcher", fs, func(ctx context.Context) error { return app.Run(ctx, cfg) })
}
