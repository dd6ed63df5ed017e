package commands

import (
	"context"

	"github.com/spf13/cobra"

	"github.com/ipledger/ipledger/plugin/internal/connect"
	"github.com/ipledger/ipledger/plugin/internal/output"
	ipamv1 "github.com/ipledger/ipledger/proto/ipledger/ipam/v1"
)

func newAllocationsCommand(o *Options) *cobra.Command {
	var (
		format        string
		pool          string
		allNamespaces bool
		pageSize      int32
	)
	cmd := &cobra.Command{
		Use:     "allocations",
		Aliases: []string{"allocation", "alloc"},
		Short:   "List the addresses that Services hold or that are kept for them, as the ledger records them",
		Long: `allocations lists the ledger's allocations (ListAllocations), one row per Service and IP, in IP
order, following the API's pages to the end. As kubectl get: the context's namespace by default, -n for
another, -A for all.

STATE is Held for an address the Service holds, and "Kept until T" for one kept for a Service that
released it (it was deleted, or is no longer ipam's): the Service created again before T gets it back;
then it is freed. For a kept address, POOL is the pool containing it and ALLOCATED (-o wide) when it was
released. "kubectl ipledger release IP" frees a kept address at once.`,
		Example: `  kubectl ipledger allocations -A
  kubectl ipledger allocations -n shop --pool public -o wide
  kubectl ipledger allocations -A -o json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			f, err := output.Parse(format, output.Table, output.Wide, output.JSON, output.YAML)
			if err != nil {
				return err
			}
			ns := ""
			if !allNamespaces {
				if ns, err = o.Namespace(); err != nil {
					return err
				}
			}
			return o.Call(cmd.Context(), connect.AnyReplica, "ListAllocations", func(ctx context.Context, c *connect.Conn) error {
				all := &ipamv1.ListAllocationsResponse{}
				req := &ipamv1.ListAllocationsRequest{Namespace: ns, Pool: pool, PageSize: pageSize}
				for {
					resp, err := c.IPAM.ListAllocations(ctx, req)
					if err != nil {
						return err
					}
					all.Allocations = append(all.Allocations, resp.GetAllocations()...)
					if resp.GetNextPageToken() == "" {
						break
					}
					req.PageToken = resp.GetNextPageToken()
				}
				switch f {
				case output.JSON, output.YAML:
					return output.Message(o.Streams.Out, f, all)
				}
				if len(all.Allocations) == 0 {
					return noneFound(o, allNamespaces, ns)
				}
				return output.PrintTable(o.Streams.Out, output.Allocations(all.Allocations, allNamespaces), f == output.Wide)
			})
		},
	}
	cmd.Flags().StringVarP(&format, "output", "o", "", "Output format: wide, json or yaml.")
	cmd.Flags().StringVar(&pool, "pool", "", "Only the allocations from this IPPool.")
	cmd.Flags().BoolVarP(&allNamespaces, "all-namespaces", "A", false, "List the allocations of every namespace.")
	cmd.Flags().Int32Var(&pageSize, "page-size", 500, "Allocations per API call (the server allows up to 5000); the plugin follows the pages to the end.")
	return cmd
}
