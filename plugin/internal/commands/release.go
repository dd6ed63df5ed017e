package commands

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/ipledger/ipledger/plugin/internal/connect"
	"github.com/ipledger/ipledger/plugin/internal/output"
	ipamv1 "github.com/ipledger/ipledger/proto/ipledger/ipam/v1"
)

func newReleaseCommand(o *Options) *cobra.Command {
	var format string
	cmd := &cobra.Command{
		Use:   "release IP",
		Short: "Give a reserved address back (needs ipledger:operator)",
		Long: `release deletes a reservation from ipam's ledger (ReleaseReservation), so pools may hand the IP out
again. Only reservations are released: a Service's address goes when the Service does. The plugin sends it
to ipam's leader, the holder of ipam's Lease.`,
		Example: `  kubectl ipledger release 203.0.113.10`,
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			f, err := output.Parse(format, output.Table, output.JSON, output.YAML)
			if err != nil {
				return err
			}
			return o.Call(cmd.Context(), connect.Leader, "ReleaseReservation", func(ctx context.Context, c *connect.Conn) error {
				resp, err := c.IPAM.ReleaseReservation(ctx, &ipamv1.ReleaseReservationRequest{Ip: args[0]})
				if err != nil {
					return err
				}
				if f != output.Table {
					return output.Message(o.Streams.Out, f, resp)
				}
				_, err = fmt.Fprintf(o.Streams.Out, "released %s (%s)\n", resp.GetReservation().GetIp(), resp.GetReservation().GetOwnerNote())
				return err
			})
		},
	}
	cmd.Flags().StringVarP(&format, "output", "o", "", "Output format: json or yaml.")
	return cmd
}
