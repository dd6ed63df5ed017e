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

func newWhyCommand(o *Options) *cobra.Command {
	var format string
	cmd := &cobra.Command{
		Use:   "why svc/NAME",
		Short: "Say why a Service has, or has not, got its external IP",
		Long: `why asks ipam's ExplainService about a LoadBalancer Service: the decision in words, the IPs
the Service holds, and each pool's verdict (eligible or not, and why), as the allocator sees it now.
The Service is in -n's namespace (the context's namespace by default).`,
		Example: `  kubectl ipledger why svc/web -n shop
  kubectl ipledger why web -n shop -o yaml`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			f, err := output.Parse(format, output.Table, output.JSON, output.YAML)
			if err != nil {
				return err
			}
			name, err := ServiceName(args[0])
			if err != nil {
				return err
			}
			ns, err := o.Namespace()
			if err != nil {
				return err
			}
			return o.Call(cmd.Context(), connect.AnyReplica, "ExplainService", func(ctx context.Context, c *connect.Conn) error {
				resp, err := c.IPAM.ExplainService(ctx, &ipamv1.ExplainServiceRequest{Service: &ipamv1.ServiceRef{Namespace: ns, Name: name}})
				if err != nil {
					return err
				}
				if f == output.Table {
					return output.Explanation(o.Streams.Out, ns, name, resp)
				}
				return output.Message(o.Streams.Out, f, resp)
			})
		},
	}
	cmd.Flags().StringVarP(&format, "output", "o", "", "Output format: json or yaml (default: words).")
	return cmd
}

// ServiceName accepts svc/NAME, service/NAME, services/NAME or NAME, as
// kubectl does.
func ServiceName(arg string) (string, error) {
	kind, name, found := strings.Cut(arg, "/")
	if !found {
		kind, name = "svc", arg
	}
	switch {
	case kind != "svc" && kind != "service" && kind != "services":
		return "", fmt.Errorf("%q: why explains Services; write svc/NAME", arg)
	case name == "" || strings.Contains(name, "/"):
		return "", fmt.Errorf("%q: write svc/NAME, and the namespace with -n", arg)
	}
	return name, nil
}
