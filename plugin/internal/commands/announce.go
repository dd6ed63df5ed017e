package commands

import (
	"context"

	"github.com/spf13/cobra"

	"github.com/ipledger/ipledger/plugin/internal/connect"
	"github.com/ipledger/ipledger/plugin/internal/metallb"
	ipamv1 "github.com/ipledger/ipledger/proto/ipledger/ipam/v1"
)

func newAnnounceCommand(o *Options) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "announce",
		Short: "Print an announcer's objects covering exactly ipledger's IPPools, for kubectl apply",
		Long: `announce prints, for one announcer, the objects that make it announce exactly the addresses of
ipledger's IPPools and hand out none of its own, so an operator keeps one definition of each pool
(docs/reachability.md). Its subcommand names the announcer: metallb.`,
		Example: `  kubectl ipledger announce metallb | kubectl apply --server-side -f -`,
		Args:    cobra.NoArgs,
	}
	var namespace string
	var interfaces []string
	mlb := &cobra.Command{
		Use:   "metallb",
		Short: "Print MetalLB IPAddressPools (autoAssign: false) and an L2Advertisement covering exactly ipledger's IPPools",
		Long: `announce metallb reads ipledger's IPPools (ListPools) and prints, for kubectl apply, one MetalLB
IPAddressPool of the same name and addresses per IPPool, with autoAssign false (MetalLB never
allocates from it), and one L2Advertisement "ipledger" naming them all, held to --interfaces
when given. MetalLB's speaker then announces every address ipledger gives, and the ranges are
defined in one place: run it again after changing an IPPool. "kubectl ipledger why" says, for
each address, whether it is announced (docs/reachability.md).`,
		Example: `  kubectl ipledger announce metallb --metallb-namespace metallb-system --interfaces eth1 | kubectl apply --server-side -f -`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return o.Call(cmd.Context(), connect.AnyReplica, "ListPools", func(ctx context.Context, c *connect.Conn) error {
				resp, err := c.IPAM.ListPools(ctx, &ipamv1.ListPoolsRequest{})
				if err != nil {
					return err
				}
				return metallb.Announce(o.Streams.Out, resp.GetPools(), namespace, interfaces)
			})
		},
	}
	mlb.Flags().StringVar(&namespace, "metallb-namespace", "metallb-system", "The namespace MetalLB's speaker reads its configuration from.")
	mlb.Flags().StringSliceVar(&interfaces, "interfaces", nil, "The L2Advertisement's spec.interfaces: the node interfaces facing the LAN of the addresses (empty: every interface).")
	cmd.AddCommand(mlb)
	return cmd
}
