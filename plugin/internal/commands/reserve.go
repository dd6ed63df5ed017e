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

func newReserveCommand(o *Options) *cobra.Command {
	var format, note, forService string
	cmd := &cobra.Command{
		Use:   "reserve IP --note TEXT",
		Short: "Hold an address outside any Service (needs ipledger:operator)",
		Long: `reserve records a reservation in ipam's ledger (ReserveAddress): no Service is given the IP until it
is released, or, with --for-service, only that Service (which must request the IP). The plugin sends it to
ipam's leader, the holder of ipam's Lease.`,
		Example: `  kubectl ipledger reserve 203.0.113.10 --note "edge router VIP, ticket NET-42"
  kubectl ipledger reserve 203.0.113.11 --note "for the new ingress" --for-service ingress/public`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			f, err := output.Parse(format, output.Table, output.JSON, output.YAML)
			if err != nil {
				return err
			}
			req := &ipamv1.ReserveAddressRequest{Ip: args[0], OwnerNote: note}
			if forService != "" {
				ns, name, ok := strings.Cut(forService, "/")
				if !ok || ns == "" || name == "" || strings.Contains(name, "/") {
					return fmt.Errorf("--for-service %q: want NAMESPACE/NAME", forService)
				}
				req.ForService = &ipamv1.ServiceRef{Namespace: ns, Name: name}
			}
			return o.Call(cmd.Context(), connect.Leader, "ReserveAddress", func(ctx context.Context, c *connect.Conn) error {
				resp, err := c.IPAM.ReserveAddress(ctx, req)
				if err != nil {
					return err
				}
				if f != output.Table {
					return output.Message(o.Streams.Out, f, resp)
				}
				_, err = fmt.Fprintf(o.Streams.Out, "reserved %s (%s)\n", resp.GetReservation().GetIp(), resp.GetReservation().GetOwnerNote())
				return err
			})
		},
	}
	cmd.Flags().StringVarP(&format, "output", "o", "", "Output format: json or yaml.")
	cmd.Flags().StringVar(&note, "note", "", "Who holds the IP and why (required).")
	cmd.Flags().StringVar(&forService, "for-service", "", "NAMESPACE/NAME of the only Service that may be granted the IP.")
	_ = cmd.MarkFlagRequired("note")
	return cmd
}
