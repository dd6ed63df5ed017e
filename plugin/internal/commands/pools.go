package commands

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/ipledger/ipledger/plugin/internal/connect"
	"github.com/ipledger/ipledger/plugin/internal/output"
	ipamv1 "github.com/ipledger/ipledger/proto/ipledger/ipam/v1"
)

func newPoolsCommand(o *Options) *cobra.Command {
	var format string
	cmd := &cobra.Command{
		Use:     "pools",
		Aliases: []string{"pool"},
		Short:   "List the IPPools with their usage, as the ledger counts it",
		Long: `pools lists every IPPool (ListPools): addresses used and total per family, Services that hold an
address outside it (HELD OUTSIDE: the pool shrank or changed its selectors), its addresses kept for
Services that released them (KEPT, counted in used; "kubectl ipledger allocations" lists them), whether
it assigns addresses automatically, and its conditions as the leader last wrote them. -o wide adds,
per family, HELD (addresses live Services hold: not the kept ones) and AVAILABLE (total - used: what a
new Service gets without taking a kept address), then priority and addresses.`,
		Example: `  kubectl ipledger pools
  kubectl ipledger pools -o wide
  kubectl ipledger pools -o yaml`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			f, err := output.Parse(format, output.Table, output.Wide, output.JSON, output.YAML)
			if err != nil {
				return err
			}
			return o.Call(cmd.Context(), connect.AnyReplica, "ListPools", func(ctx context.Context, c *connect.Conn) error {
				resp, err := c.IPAM.ListPools(ctx, &ipamv1.ListPoolsRequest{})
				if err != nil {
					return err
				}
				switch f {
				case output.JSON, output.YAML:
					return output.Message(o.Streams.Out, f, resp)
				}
				if len(resp.GetPools()) == 0 {
					_, err := fmt.Fprintln(o.Streams.ErrOut, "No IPPools found.")
					return err
				}
				return output.PrintTable(o.Streams.Out, output.Pools(resp.GetPools()), f == output.Wide)
			})
		},
	}
	cmd.Flags().StringVarP(&format, "output", "o", "", "Output format: wide, json or yaml.")
	return cmd
}

// noneFound says so on stderr, as kubectl get does.
func noneFound(o *Options, allNamespaces bool, ns string) error {
	var err error
	if allNamespaces {
		_, err = fmt.Fprintln(o.Streams.ErrOut, "No allocations found.")
	} else {
		_, err = fmt.Fprintf(o.Streams.ErrOut, "No allocations found in %s namespace.\n", ns)
	}
	return err
}
