package commands

import (
	"context"
	"fmt"
	"net/netip"
	"strings"

	"github.com/spf13/cobra"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ipledger/ipledger/plugin/internal/connect"
	"github.com/ipledger/ipledger/plugin/internal/output"
	ipamv1 "github.com/ipledger/ipledger/proto/ipledger/ipam/v1"
)

func newHistoryCommand(o *Options) *cobra.Command {
	var (
		format   string
		pool     string
		since    string
		pageSize int32
	)
	cmd := &cobra.Command{
		Use:   "history [IP | NAMESPACE/SERVICE]",
		Short: "Show who held an address, and when: every change of holder ipam recorded",
		Long: `history lists the address history (AddressHistory), oldest first, following the API's pages to the end:
of one address (10.1.2.3), of one Service (namespace/name), or of every address (--pool, --since narrow
it). ACTION is granted, shared, returned, taken, released, kept, expired, reserved or unreserved; BY is
"ipam" for ipam's own decisions, else the caller of the gRPC call; HOW is "recovered" or "restored" for
a change a term start found unrecorded (docs/history.md). You see only the namespaces you may
"get history.ipledger.io" in.`,
		Example: `  kubectl ipledger history 10.1.2.3
  kubectl ipledger history shop/web
  kubectl ipledger history --pool public --since 2026-11-01
  kubectl ipledger history 10.1.2.3 -o json`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			f, err := output.Parse(format, output.Table, output.JSON, output.YAML)
			if err != nil {
				return err
			}
			req := &ipamv1.AddressHistoryRequest{Pool: pool, Since: since, PageSize: pageSize}
			if len(args) == 1 {
				if ns, name, ok := strings.Cut(args[0], "/"); ok {
					req.Service = &ipamv1.ServiceRef{Namespace: ns, Name: name}
				} else if _, err := netip.ParseAddr(args[0]); err == nil {
					req.Ip = args[0]
				} else {
					return fmt.Errorf("%q is neither an IP address (10.1.2.3) nor a Service (namespace/name)", args[0])
				}
			}
			return o.Call(cmd.Context(), connect.AnyReplica, "AddressHistory", func(ctx context.Context, c *connect.Conn) error {
				all := &ipamv1.AddressHistoryResponse{}
				for {
					resp, err := c.IPAM.AddressHistory(ctx, req)
					if err != nil {
						return err
					}
					all.Entries = append(all.Entries, resp.GetEntries()...)
					if resp.GetNextPageToken() == "" {
						break
					}
					req.PageToken = resp.GetNextPageToken()
				}
				if f != output.Table {
					return output.Message(o.Streams.Out, f, all)
				}
				if len(all.Entries) == 0 {
					_, err := fmt.Fprintln(o.Streams.ErrOut, "No history found.")
					return err
				}
				return output.PrintTable(o.Streams.Out, historyTable(all.GetEntries()), false)
			})
		},
	}
	cmd.Flags().StringVarP(&format, "output", "o", "", "Output format: json or yaml.")
	cmd.Flags().StringVar(&pool, "pool", "", "Only the entries of addresses of this IPPool.")
	cmd.Flags().StringVar(&since, "since", "", "Only the entries at or after this time: RFC 3339 or a date (2026-11-01, midnight UTC).")
	cmd.Flags().Int32Var(&pageSize, "page-size", 500, "Entries per API call (the server allows up to 5000); the plugin follows the pages to the end.")
	return cmd
}

func historyTable(entries []*ipamv1.HistoryEntry) *metav1.Table {
	t := &metav1.Table{ColumnDefinitions: []metav1.TableColumnDefinition{
		{Name: "Time", Type: "string"}, {Name: "IP", Type: "string"}, {Name: "Pool", Type: "string"},
		{Name: "Service", Type: "string"}, {Name: "Action", Type: "string"}, {Name: "By", Type: "string"}, {Name: "How", Type: "string"},
	}}
	for _, e := range entries {
		svc := "-"
		if s := e.GetService(); s != nil {
			svc = s.GetNamespace() + "/" + s.GetName()
		}
		if e.GetNote() != "" {
			svc += " (" + e.GetNote() + ")"
		}
		t.Rows = append(t.Rows, metav1.TableRow{Cells: []any{e.GetAt(), e.GetIp(), e.GetPool(), svc, e.GetAction(), e.GetBy(), e.GetHow()}})
	}
	return t
}
