package output

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	ipamv1 "github.com/ipledger/ipledger/proto/ipledger/ipam/v1"
)

// Explanation writes ExplainService's answer in words: the Gateway the
// Service serves (if any), the decision, the IPs held, whether each is
// announced (by whom, from which node, or why not), and each pool's verdict.
func Explanation(w io.Writer, namespace, name string, r *ipamv1.ExplainServiceResponse) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "Service:\t%s/%s\n", namespace, name)
	if gw := r.GetGateway(); gw != "" {
		fmt.Fprintf(tw, "Gateway:\t%s (its spec.addresses and GatewayClass are part of the request; docs/gateway-api.md)\n", gw)
	}
	fmt.Fprintf(tw, "Decision:\t%s\n", r.GetDecision())
	if r.GetReason() != "" {
		fmt.Fprintf(tw, "Reason:\t%s\n", r.GetReason())
	}
	fmt.Fprintf(tw, "IPs:\t%s\n", orNone(strings.Join(r.GetIps(), ", ")))
	if len(r.GetAnnouncements()) > 0 {
		fmt.Fprintf(tw, "Announced:\n")
		for _, a := range r.GetAnnouncements() {
			fmt.Fprintf(tw, "  %s\t%s\n", a.GetIp(), a.GetMessage())
		}
	}
	if len(r.GetVerdicts()) > 0 {
		fmt.Fprintf(tw, "Pools:\n")
		for _, v := range r.GetVerdicts() {
			verdict := "eligible"
			if !v.GetEligible() {
				verdict = "not eligible"
			}
			fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\n", v.GetPool(), verdict, v.GetReason(), v.GetMessage())
		}
	}
	return tw.Flush()
}
