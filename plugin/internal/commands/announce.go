package commands

import (
	"context"

	"github.com/spf13/cobra"

	"github.com/ipledger/ipledger/plugin/internal/cilium"
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
(docs/reachability.md). Its subcommand names the announcer: metallb or cilium.`,
		Example: `  kubectl ipledger announce metallb | kubectl apply --server-side -f -
  kubectl ipledger announce cilium --interfaces '^eth1$' | kubectl apply --server-side -f -`,
		Args: cobra.NoArgs,
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

	var copts cilium.AnnounceOptions
	cil := &cobra.Command{
		Use:   "cilium",
		Short: "Print a CiliumL2AnnouncementPolicy announcing every address ipledger's IPPools give",
		Long: `announce cilium reads ipledger's IPPools (ListPools) and prints, for kubectl apply, one
CiliumL2AnnouncementPolicy "ipledger" (cilium.io/v2alpha1, Cilium 1.14 and later, with
l2announcements.enabled): loadBalancerIPs true, externalIPs false, held to --interfaces and
--node-selector when given. Cilium's policy selects Services, not address ranges: it announces the
addresses in status.loadBalancer.ingress of every Service without a loadBalancerClass (Cilium
announces no other class but its own io.cilium/l2-announcer), which are the Services ipam serves
in its default mode. So the ranges stay defined in the IPPools alone; a comment lists the pools
it covers. With ipam's --require-lb-class, Cilium announces none of them (docs/reachability.md).
"kubectl ipledger why" says, for each address, whether Cilium announces it and from which node.`,
		Example: `  kubectl ipledger announce cilium --interfaces '^eth1$' --node-selector '!node-role.kubernetes.io/control-plane' | kubectl apply --server-side -f -`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return o.Call(cmd.Context(), connect.AnyReplica, "ListPools", func(ctx context.Context, c *connect.Conn) error {
				resp, err := c.IPAM.ListPools(ctx, &ipamv1.ListPoolsRequest{})
				if err != nil {
					return err
				}
				return cilium.Announce(o.Streams.Out, resp.GetPools(), copts)
			})
		},
	}
	cil.Flags().StringSliceVar(&copts.Interfaces, "interfaces", nil, "The policy's spec.interfaces: regular expressions of the node interfaces facing the LAN of the addresses, e.g. ^eth1$ (empty: every interface).")
	cil.Flags().StringVar(&copts.NodeSelector, "node-selector", "", "The policy's spec.nodeSelector, as a label selector (e.g. lan=true,!node-role.kubernetes.io/control-plane; empty: every node).")
	cmd.AddCommand(cil)
	return cmd
}
