package commands

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/ipledger/ipledger/plugin/internal/connect"
	"github.com/ipledger/ipledger/plugin/internal/output"
	ipamv1 "github.com/ipledger/ipledger/proto/ipledger/ipam/v1"
)

// maxManifestBytes bounds what preview reads: an IPPool is a few hundred
// bytes; gRPC refuses messages over 4 MiB anyway.
const maxManifestBytes = 1 << 20

func newPreviewCommand(o *Options) *cobra.Command {
	var (
		file, format string
		del          bool
	)
	cmd := &cobra.Command{
		Use:   "preview -f pool.yaml",
		Short: "Say what applying an IPPool (or deleting it) would do, before you do it",
		Long: `preview sends one IPPool manifest (-f FILE, or - for stdin) to ipam's PreviewPool and prints what
applying it would do, decided by the same code the leader allocates with, from the live ledger, pools
and Services. Nothing is written. A pool of a name that exists is an edit of that pool, any other name a
new pool; --delete previews kubectl delete of the pool the manifest names.

It says which pending Services would get an address (and which), which Services would keep their
addresses outside their pool (HeldOutsidePool: a shrink or a selector change never moves an address),
which pools would be Conflicting (overlapping an older pool, serving nothing), and each changed pool's
usage before and after. A manifest the API server would refuse is answered with its errors, naming the
field, and preview exits 1.

It needs the ClusterRole ipledger:viewer (get allocations.ipledger.io), as why does.`,
		Example: `  # Grow a pool: who gets an address?
  kubectl ipledger preview -f pool.yaml

  # Shrink it, as YAML for a script
  kubectl ipledger preview -f smaller-pool.yaml -o yaml

  # What deleting a pool would do
  kubectl get ippool lab -o yaml | kubectl ipledger preview -f - --delete`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			f, err := output.Parse(format, output.Table, output.JSON, output.YAML)
			if err != nil {
				return err
			}
			manifest, err := readManifest(o.Streams.In, file)
			if err != nil {
				return err
			}
			var resp *ipamv1.PreviewPoolResponse
			err = o.Call(cmd.Context(), connect.AnyReplica, "PreviewPool", func(ctx context.Context, c *connect.Conn) error {
				resp, err = c.IPAM.PreviewPool(ctx, &ipamv1.PreviewPoolRequest{Manifest: manifest, Delete: del})
				return err
			})
			if err != nil {
				return err
			}
			if f == output.Table {
				err = writePreview(o.Streams.Out, resp)
			} else {
				err = output.Message(o.Streams.Out, f, resp)
			}
			if err != nil {
				return err
			}
			if n := len(resp.GetValidationErrors()); n > 0 {
				return fmt.Errorf("the API server would refuse IPPool %s (%d errors above); fix the manifest and preview again", resp.GetPool(), n)
			}
			return nil
		},
	}
	cmd.Flags().StringVarP(&file, "filename", "f", "", "The IPPool manifest, YAML or JSON (- for stdin).")
	cmd.Flags().BoolVar(&del, "delete", false, "Preview deleting the pool the manifest names instead of applying it.")
	cmd.Flags().StringVarP(&format, "output", "o", "", "Output format: json or yaml (default: words and tables).")
	_ = cmd.MarkFlagRequired("filename")
	return cmd
}

// readManifest reads -f: a file, or stdin for "-".
func readManifest(stdin io.Reader, file string) ([]byte, error) {
	r := stdin
	if file != "-" {
		f, err := os.Open(file)
		if err != nil {
			return nil, fmt.Errorf("-f: %w", err)
		}
		defer f.Close()
		r = f
	}
	b, err := io.ReadAll(io.LimitReader(r, maxManifestBytes+1))
	switch {
	case err != nil:
		return nil, fmt.Errorf("-f %s: %w", file, err)
	case len(b) > maxManifestBytes:
		return nil, fmt.Errorf("-f %s: more than %d bytes; give one IPPool", file, maxManifestBytes)
	case len(strings.TrimSpace(string(b))) == 0:
		return nil, errors.New("-f " + file + ": empty; give one IPPool manifest (YAML or JSON)")
	}
	return b, nil
}

// writePreview prints a preview in words, then the changed pools and
// Services as tables.
func writePreview(w io.Writer, r *ipamv1.PreviewPoolResponse) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "Pool:\t%s (%s)\n", r.GetPool(), r.GetChange())
	if errs := r.GetValidationErrors(); len(errs) > 0 {
		fmt.Fprintf(tw, "Refused:\n")
		for _, e := range errs {
			fmt.Fprintf(tw, "  %s\n", e)
		}
		return tw.Flush()
	}
	fmt.Fprintf(tw, "Preview:\n")
	for _, s := range r.GetSummary() {
		fmt.Fprintf(tw, "  %s\n", s)
	}
	if len(r.GetPools()) > 0 {
		fmt.Fprintf(tw, "\nPOOL\tSTATE\tIPV4 USED/TOTAL\tIPV6 USED/TOTAL\tHELD OUTSIDE\n")
		for _, p := range r.GetPools() {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", p.GetName(), beforeAfter(p.GetStateBefore(), p.GetStateAfter()),
				beforeAfter(previewUsage(p.GetIpv4Before()), previewUsage(p.GetIpv4After())), beforeAfter(previewUsage(p.GetIpv6Before()), previewUsage(p.GetIpv6After())),
				beforeAfter(fmt.Sprint(p.GetHeldOutsideBefore()), fmt.Sprint(p.GetHeldOutsideAfter())))
		}
	}
	groups := []struct {
		what string
		list []*ipamv1.ServicePreview
	}{{"gets an address", r.GetAllocated()}, {"held outside", r.GetHeldOutside()}, {"changes", r.GetOtherChanges()}}
	if len(r.GetAllocated())+len(r.GetHeldOutside())+len(r.GetOtherChanges()) > 0 {
		fmt.Fprintf(tw, "\nSERVICE\tWHAT\tIPS\tREASON\tPOOL\n")
		for _, g := range groups {
			for _, s := range g.list {
				fmt.Fprintf(tw, "%s/%s\t%s\t%s\t%s\t%s\n", s.GetService().GetNamespace(), s.GetService().GetName(), g.what,
					beforeAfter(previewIPs(s.GetIpsBefore()), previewIPs(s.GetIpsAfter())), beforeAfter(noneIfEmpty(s.GetReasonBefore()), s.GetReasonAfter()), noneIfEmpty(s.GetPoolAfter()))
			}
		}
	}
	return tw.Flush()
}

// beforeAfter is "a -> b", or a alone when equal.
func beforeAfter(before, after string) string {
	if before == after {
		return before
	}
	return before + " -> " + after
}

func previewUsage(u *ipamv1.FamilyUsage) string {
	if u.GetTotal() == "0" || u.GetTotal() == "" {
		return "-"
	}
	return u.GetUsed() + "/" + u.GetTotal()
}

func previewIPs(list []string) string { return noneIfEmpty(strings.Join(list, ",")) }

func noneIfEmpty(s string) string {
	if s == "" {
		return "<none>"
	}
	return s
}
