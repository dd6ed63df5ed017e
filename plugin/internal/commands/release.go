package commands

import (
	"context"
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/ipledger/ipledger/plugin/internal/connect"
	"github.com/ipledger/ipledger/plugin/internal/output"
	ipamv1 "github.com/ipledger/ipledger/proto/ipledger/ipam/v1"
)

func newReleaseCommand(o *Options) *cobra.Command {
	var format string
	cmd := &cobra.Command{
		Use:   "release IP",
		Short: "Give a reserved or kept address back (needs ipledger:operator)",
		Long: `release deletes a reservation from ipam's ledger (ReleaseReservation), so pools may hand the IP out
again. Only reservations are released: a Service's address goes when the Service does.

It also ends a kept address early: one kept for a Service that released it ("Kept until T" in
"kubectl ipledger allocations"). The address is free at once, reused last (pools hand out the addresses
freed longest ago first), and the Service created again no longer gets it back.

The plugin sends it to ipam's leader, the holder of ipam's Lease.`,
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
				_, err = fmt.Fprintf(o.Streams.Out, "released %s (%s)\n", resp.GetReservation().GetIp(), releasedWhat(resp.GetReservation()))
				return err
			})
		},
	}
	cmd.Flags().StringVarP(&format, "output", "o", "", "Output format: json or yaml.")
	return cmd
}

// keptNotePrefix starts the owner note of the reservation ipam records for
// an address it keeps for a Service that released it (its ledger's
// KeptNote; ReserveAddress refuses the form to anyone else).
const keptNotePrefix = "ipledger.io/kept"

// releasedWhat says what was released: the reservation's note, or, for a
// kept address, the Service it was kept for.
func releasedWhat(r *ipamv1.Reservation) string {
	if fs := r.GetForService(); fs != nil && strings.HasPrefix(r.GetOwnerNote(), keptNotePrefix) {
		return fmt.Sprintf("kept for %s/%s; it is free now", fs.GetNamespace(), fs.GetName())
	}
	return r.GetOwnerNote()
}
