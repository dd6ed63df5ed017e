// Command ipledger-cluster brings the real single-node Kubernetes of
// lab/cluster up and down on this machine (as root), for `make cluster-up`,
// `make cluster-down` and `make test-cluster`.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/ipledger/ipledger/lab/cluster"
)

const usage = `ipledger-cluster runs a real single-node Kubernetes on this machine (root):
etcd, kube-apiserver on the node address, kube-controller-manager,
kube-scheduler, containerd + runc, the kubelet, kube-proxy, a bridge CNI
network and CoreDNS; with --nodes N (or IPLEDGER_NODES=N) N-1 more nodes
beside it, each with its own network namespace, containerd, kubelet and
kube-proxy. Images are imported from OCI archives, never pulled.
One node per machine; it outlives this command until "down". Each command
waits while a test run (make test-cluster) uses the node.

Usage:
  ipledger-cluster [flags] up              start the node (or keep the one that is up)
  ipledger-cluster [flags] import DIR      import every DIR/*.tar image archive (make images writes .dev/images)
  ipledger-cluster [flags] down            stop it and remove every trace it left on the machine

Then: kubectl --kubeconfig <dir>/kubeconfig get nodes

The binaries come from hack/build-tools.sh and hack/build-node.sh (cached;
the first build takes ~20 minutes), or $IPLEDGER_TOOLS_BIN and
$IPLEDGER_NODE_BIN. Needs: apt-get install -y containerd runc
containernetworking-plugins iptables conntrack.

Flags:
`

func main() {
	var opts cluster.Options
	flag.StringVar(&opts.Dir, "dir", cluster.DefaultDir, "the node's folder (every file of the node; down removes it)")
	flag.StringVar(&opts.NodeIP, "node-ip", "", "address of the API server and kubelet (default: the IPv4 address of the default route's interface)")
	flag.IntVar(&opts.Nodes, "nodes", 0, "how many nodes: the first in the host's network namespace, the others each in its own (default: $IPLEDGER_NODES, else 1)")
	flag.Usage = func() {
		fmt.Fprint(flag.CommandLine.Output(), usage)
		flag.PrintDefaults()
	}
	flag.Parse()
	opts.Log = func(format string, args ...any) { fmt.Fprintf(os.Stderr, format+"\n", args...) }
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, opts, flag.Args()); err != nil {
		fmt.Fprintln(os.Stderr, "ipledger-cluster:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, opts cluster.Options, args []string) error {
	start := time.Now()
	release, err := cluster.Acquire(opts.Log)
	if err != nil {
		return err
	}
	defer release()
	switch {
	case len(args) == 1 && args[0] == "up":
		c, err := cluster.Up(ctx, opts)
		if err != nil {
			return err
		}
		fmt.Printf("node up in %s: kubectl --kubeconfig %s get nodes\n", time.Since(start).Round(time.Second), c.KubeconfigPath)
		return nil
	case len(args) == 2 && args[0] == "import":
		c, err := cluster.Get(ctx, opts)
		if err != nil {
			return err
		}
		return c.ImportImages(ctx, args[1])
	case len(args) == 1 && args[0] == "down":
		return cluster.Down(opts)
	}
	flag.Usage()
	return fmt.Errorf("want one of: up, import DIR, down (got %q)", args)
}
