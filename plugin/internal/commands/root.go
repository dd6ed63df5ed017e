// Package commands is kubectl-ipledger's command tree. Each command is one
// file with a constructor func(*Options) *cobra.Command, registered by one
// line in NewRoot; Options carries what they share: the kubeconfig flags
// (cli-runtime's, as every kubectl plugin), how to reach ipam, and the
// output streams.
package commands

import (
	"context"
	"fmt"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/genericiooptions"

	"github.com/ipledger/ipledger/pkg/install"
	"github.com/ipledger/ipledger/pkg/version"
	"github.com/ipledger/ipledger/plugin/internal/connect"
	"github.com/ipledger/ipledger/plugin/internal/diagnose"
)

// Options is what every command shares.
type Options struct {
	Streams genericiooptions.IOStreams
	// Kube is --kubeconfig, --context, -n and the rest of kubectl's flags.
	Kube *genericclioptions.ConfigFlags
	// Connect says where ipam is and who the caller is to it.
	Connect connect.Flags
	// Timeout bounds one command, connection included.
	Timeout time.Duration
}

// NewRoot builds `kubectl ipledger` and its commands.
func NewRoot(streams genericiooptions.IOStreams) *cobra.Command {
	o := &Options{Streams: streams, Kube: genericclioptions.NewConfigFlags(true)}
	root := &cobra.Command{
		Use: "ipledger",
		// Help says "kubectl ipledger", as the user types it.
		Annotations: map[string]string{cobra.CommandDisplayNameAnnotation: "kubectl ipledger"},
		Short:       "Inspect and operate ipledger's address management from kubectl",
		Long: `kubectl ipledger asks ipledger's ipam, the way kubectl asks the API server: it finds ipam
in the current kubeconfig context (namespace --ipam-namespace, default ` + install.DefaultNamespace + `), opens a
port-forward to one of its Pods (to the leader for reserve and release) and closes it when done,
and authenticates with a short-lived token it requests for ipam's audience (ipledger.io/ipam):
for --service-account, or for your own ServiceAccount when the kubeconfig is one. Or give
--token-file, and --ipam-address to dial ipam directly.

-n/--namespace is, as in kubectl, the namespace of the Services asked about.

Reading needs the ClusterRole ipledger:viewer, reserve and release ipledger:operator, both bound to
the ServiceAccount whose token the plugin sends.`,
		Example: `  # Why has my Service no external IP?
  kubectl ipledger why svc/web -n shop --service-account ` + install.DefaultNamespace + `/me

  # Every allocation, in every namespace, and the pools' usage
  kubectl ipledger allocations -A
  kubectl ipledger pools -o wide`,
		// --version: the release and revision the plugin was built from.
		Version:       version.Get().String(),
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetOut(streams.Out)
	root.SetErr(streams.ErrOut)
	o.Kube.AddFlags(root.PersistentFlags())
	o.Connect.AddFlags(root.PersistentFlags())
	root.PersistentFlags().DurationVar(&o.Timeout, "timeout", 30*time.Second, "Give up after this long (finding ipam, the port-forward and the calls).")

	// One line per command.
	for _, newCommand := range []func(*Options) *cobra.Command{
		newWhyCommand,
		newAllocationsCommand,
		newHistoryCommand,
		newPoolsCommand,
		newReserveCommand,
		newReleaseCommand,
		newMigrateMetalLBCommand,
		newMigrateCiliumCommand,
		newMigrateKubeVIPCommand,
		newPreviewCommand,
		newAnnounceCommand,
		newLedgerCommand,
		newTLSCommand,
	} {
		root.AddCommand(newCommand(o))
	}
	return root
}

// Namespace is -n, or the kubeconfig context's namespace ("default" when
// it names none), as kubectl resolves it.
func (o *Options) Namespace() (string, error) {
	ns, _, err := o.Kube.ToRawKubeConfigLoader().Namespace()
	if err != nil {
		return "", fmt.Errorf("kubeconfig: %w", err)
	}
	return ns, nil
}

// Call connects to ipam (the leader for Leader), runs f, closes the
// connection and port-forward, and explains f's error. method names the RPC
// for the error's fix (which ClusterRole grants it).
func (o *Options) Call(ctx context.Context, target connect.Target, method string, f func(ctx context.Context, c *connect.Conn) error) error {
	ctx, cancel := context.WithTimeout(ctx, o.Timeout)
	defer cancel()
	var (
		conn       *connect.Conn
		where      string
		aggregated bool
	)
	if connect.UseAggregated(o.Connect, method) {
		c, ok, err := connect.DialAggregated(o.Kube, method)
		switch {
		case err != nil:
			return err
		case ok:
			conn, where, aggregated = c, "ipam through the aggregated API "+connect.AggregatedGroupVersion+", as yourself", true
		case o.Connect.API == connect.APIAggregated:
			return fmt.Errorf("--api=aggregated: the cluster does not serve %s (install components/aggregated-api, and check `kubectl get apiservice v1alpha1.api.ipledger.io`)", connect.AggregatedGroupVersion)
		}
	}
	if conn == nil {
		c, err := connect.Dial(ctx, o.Kube, o.Connect, target)
		if err != nil {
			return err
		}
		conn, where = c, "ipam at "+o.Connect.Address
		if conn.Pod != "" {
			where = fmt.Sprintf("ipam Pod %s/%s", o.Connect.Namespace, conn.Pod)
		}
	}
	defer conn.Close()
	if err := f(ctx, conn); err != nil {
		return diagnose.Explain(err, diagnose.Call{Method: method, Pod: conn.Pod, Where: where, Aggregated: aggregated})
	}
	return nil
}
