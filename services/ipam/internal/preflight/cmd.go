package preflight

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/ipledger/ipledger/pkg/cmdmain"
	"github.com/ipledger/ipledger/services/ipam/internal/objects"
)

// Usage is the help of `ipledger-ipam preflight`.
const Usage = `Usage: ipledger-ipam preflight [flags]

Run the ipam you are about to install once, before the upgrade, to list the
Services it would treat differently from what their statuses and the ledger
say now. It reads every Service, Namespace and IPPool and the ledger from the
API server, decides with its own leader's code what a new term would write
(as a new leader does before anything else, with the pools as they are), and
compares. It writes nothing: no status, no ledger, no Event, no Lease.

Listed, with the reason: a Service that would lose an address it shows
(AddressMoved, AddressRemoved; "moves"), get one (AddressAdded: a pending
Service, or a family gained), get another condition (Condition:
HeldOutsidePool, HeldSharedAcrossNamespaces, a refusal), another
allocated-from-pool (Pool), other ledger entries (Ledger), and ledger entries
of Services that are gone (LedgerReleased). Conflicts and ledger entries the
statuses contradict are reported as the term start would report them.

Outside a Pod it uses --kubeconfig, else $KUBECONFIG, else ~/.kube/config;
in a Pod, its ServiceAccount. Its own logs (client-go's) go to stderr, at warn
and as text unless --log-level and --log-format say otherwise. Give it the same --namespace, --lb-class and --require-lb-class as your ipam
Deployment runs with. It needs list on services, namespaces and
ippools.ipledger.io, and list on configmaps in --namespace.

Exit status:
  0  no address would move or vanish (changes that move nothing are listed)
  1  preflight could not decide (API server unreachable, ledger unreadable)
  2  usage error
  3  an address a Service shows would move or vanish
  4  with --fail-on=any: some treatment would change, nothing would move

Examples:
  ipledger-ipam preflight --kubeconfig ~/.kube/config
  ipledger-ipam preflight --output json --fail-on any | jq .changes

Flags:
`

// Main runs `ipledger-ipam preflight args…` and returns its exit code.
func Main(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("ipledger-ipam preflight", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var common cmdmain.Common
	common.LogLevel = "warn"
	common.LogFormat = "text"
	common.Flags(fs)
	var class objects.Class
	objects.ClassFlags(fs, &class.Name, &class.Required)
	var gatewayNamespaces []string
	objects.GatewayServiceNamespacesFlag(fs, &gatewayNamespaces)
	keepReleased := objects.DefaultKeepReleased
	objects.KeepReleasedFlag(fs, &keepReleased)
	output := fs.String("output", "text", "output format: text or json")
	failOn := fs.String("fail-on", "moves", "what exits non-zero: moves (an address would move or vanish: 3) or any (also any other change of treatment: 4)")
	timeout := fs.Duration("timeout", 2*time.Minute, "give up reading the API server after this long")
	fs.Usage = func() {
		fmt.Fprint(stderr, Usage)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return ExitOK
		}
		return ExitUsage
	}
	switch {
	case fs.NArg() > 0:
		fmt.Fprintf(stderr, "ipledger-ipam preflight: unexpected arguments %q\n", fs.Args())
		return ExitUsage
	case *output != "text" && *output != "json":
		fmt.Fprintf(stderr, "ipledger-ipam preflight: --output %q: want text or json\n", *output)
		return ExitUsage
	case *failOn != "moves" && *failOn != "any":
		fmt.Fprintf(stderr, "ipledger-ipam preflight: --fail-on %q: want moves or any\n", *failOn)
		return ExitUsage
	}
	common.Logger() // client-go's messages in the chosen format, on stderr
	if common.Kubeconfig == "" && os.Getenv("KUBERNETES_SERVICE_HOST") == "" {
		// Run by hand outside a Pod: kubectl's default kubeconfig.
		if home, err := os.UserHomeDir(); err == nil {
			if p := filepath.Join(home, ".kube", "config"); fileExists(p) {
				common.Kubeconfig = p
			}
		}
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	r, err := run(ctx, &common, class, gatewayNamespaces, keepReleased)
	if err != nil {
		fmt.Fprintf(stderr, "ipledger-ipam preflight: %v\n", err)
		return ExitError
	}
	r.ExitCode = exitCode(r, *failOn == "any")
	if *output == "json" {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(r); err != nil {
			fmt.Fprintf(stderr, "ipledger-ipam preflight: %v\n", err)
			return ExitError
		}
	} else {
		WriteText(stdout, r)
	}
	return r.ExitCode
}

func exitCode(r *Report, failOnAny bool) int {
	switch {
	case r.Moves():
		return ExitMoves
	case failOnAny && len(r.Changes) > 0:
		return ExitChanges
	}
	return ExitOK
}

func run(ctx context.Context, common *cmdmain.Common, class objects.Class, gatewayNamespaces []string, keepReleased time.Duration) (*Report, error) {
	restCfg, err := common.RESTConfig()
	if err != nil {
		return nil, err
	}
	typedCfg, dynCfg := cmdmain.ClientConfigs(restCfg)
	client, err := kubernetes.NewForConfig(typedCfg)
	if err != nil {
		return nil, fmt.Errorf("kubernetes client: %w", err)
	}
	dyn, err := dynamic.NewForConfig(dynCfg)
	if err != nil {
		return nil, fmt.Errorf("dynamic client: %w", err)
	}
	in, err := Read(ctx, client, dyn, common.Namespace, class, gatewayNamespaces, keepReleased)
	if err != nil {
		return nil, err
	}
	return Check(in), nil
}

// WriteText prints the report for people: the summary, then one block per
// changed Service, those that would lose an address first.
func WriteText(w io.Writer, r *Report) {
	for _, s := range r.Summary {
		fmt.Fprintln(w, s)
	}
	for _, moves := range []bool{true, false} {
		for _, c := range r.Changes {
			if c.Moves != moves {
				continue
			}
			mark := " "
			if c.Moves {
				mark = "!"
			}
			fmt.Fprintf(w, "\n%s %s/%s  %s\n", mark, c.Namespace, c.Name, c.Change)
			fmt.Fprintf(w, "    addresses: %s -> %s\n", listOrNone(c.IPsBefore), listOrNone(c.IPsAfter))
			if c.ReasonBefore != "" || c.ReasonAfter != "" {
				fmt.Fprintf(w, "    condition: %s -> %s\n", orNone(c.ReasonBefore), orNone(c.ReasonAfter))
			}
			fmt.Fprintf(w, "    %s\n", c.Why)
		}
	}
	for _, s := range r.Conflicts {
		fmt.Fprintf(w, "\nconflict: %s\n", s)
	}
	for _, s := range r.Overruled {
		fmt.Fprintf(w, "\noverruled ledger entry: %s\n", s)
	}
	switch r.ExitCode {
	case ExitMoves:
		fmt.Fprintln(w, "\nExit 3: an address would move or vanish ('!' above).")
	case ExitChanges:
		fmt.Fprintln(w, "\nExit 4: treatment would change (--fail-on=any); no address would move.")
	}
}

func orNone(s string) string {
	if strings.TrimSpace(s) == "" {
		return "(none)"
	}
	return s
}

func fileExists(p string) bool {
	st, err := os.Stat(p)
	return err == nil && !st.IsDir()
}
