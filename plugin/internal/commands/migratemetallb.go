package commands

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"

	"github.com/ipledger/ipledger/plugin/internal/metallb"
)

// The MetalLB resources migrate-metallb reads from a cluster: the pools, and
// the advertisements so that it can say which pools they announce.
var (
	metallbPools = schema.GroupVersionResource{Group: metallb.Group, Version: "v1beta1", Resource: "ipaddresspools"}
	metallbAdvs  = []schema.GroupVersionResource{
		{Group: metallb.Group, Version: "v1beta1", Resource: "l2advertisements"},
		{Group: metallb.Group, Version: "v1beta1", Resource: "bgpadvertisements"},
	}
)

func newMigrateMetalLBCommand(o *Options) *cobra.Command {
	var (
		files         []string
		namespaces    []string
		allNamespaces bool
	)
	cmd := &cobra.Command{
		Use:   "migrate-metallb",
		Short: "Print IPPools equivalent to MetalLB's IPAddressPools, and what does not carry over",
		Long: `migrate-metallb reads MetalLB's IPAddressPools (metallb.io/v1beta1) from the cluster (namespace
--metallb-namespace, metallb-system by default) or from files (-f, multi-document YAML or a List as kubectl
get -o yaml writes it; - for stdin), and prints equivalent ipledger IPPools as YAML on stdout, for you to
review and apply with kubectl. It changes nothing in the cluster.

Carried over: addresses (CIDRs and ranges, IPv4 and IPv6; host bits dropped as MetalLB drops them),
autoAssign, avoidBuggyIPs, and serviceAllocation (priority, namespaces, namespaceSelectors, serviceSelectors)
as spec.allocation. Each IPPool keeps its IPAddressPool's name, so Services that name a pool with
metallb.universe.tf/address-pool keep meaning the same pool; it is labelled ipledger.io/converted-from=metallb.

What does not carry over is printed on stderr, one "Warning:" line per object and field: L2Advertisements
and BGPAdvertisements (announcing is not ipledger's job: docs/reachability.md), labels, fields ipledger has
no equivalent for, addresses ipledger never hands out. A pool that cannot be converted at all is left out
and the command exits 1 after printing the others. The whole migration, step by step:
docs/migrating-from-metallb.md.

Reading the cluster needs list on ipaddresspools, l2advertisements and bgpadvertisements (metallb.io) in
those namespaces.`,
		Example: `  # Convert the cluster's pools, review, then apply
  kubectl ipledger migrate-metallb > ippools.yaml
  kubectl apply -f ippools.yaml

  # MetalLB installed in another namespace
  kubectl ipledger migrate-metallb --metallb-namespace metallb

  # Convert files, or what kubectl prints
  kubectl ipledger migrate-metallb -f pools.yaml -f advertisements.yaml
  kubectl get ipaddresspools -n metallb-system -o yaml | kubectl ipledger migrate-metallb -f -`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, cancel := context.WithTimeout(cmd.Context(), o.Timeout)
			defer cancel()
			var objs []*unstructured.Unstructured
			var err error
			var from string
			if len(files) > 0 {
				objs, err = readFiles(o.Streams.In, files)
				from = "in " + strings.Join(files, ", ")
			} else {
				if allNamespaces {
					namespaces = []string{metav1.NamespaceAll}
				}
				objs, err = readCluster(ctx, o, namespaces)
				from = "in namespace " + strings.Join(namespaces, ", ")
				if allNamespaces {
					from = "in any namespace"
				}
			}
			if err != nil {
				return err
			}
			return printConversion(o, metallb.Convert(objs), "No IPAddressPools found "+from+".", "IPAddressPool(s)")
		},
	}
	cmd.Flags().StringArrayVarP(&files, "filename", "f", nil, "Read MetalLB objects from this file instead of the cluster (- for stdin); repeatable.")
	cmd.Flags().StringSliceVar(&namespaces, "metallb-namespace", []string{"metallb-system"}, "The namespace(s) where MetalLB's IPAddressPools live.")
	cmd.Flags().BoolVarP(&allNamespaces, "all-namespaces", "A", false, "Read IPAddressPools from every namespace.")
	return cmd
}

// printConversion prints what a migrate-* command converted: the warnings
// on stderr, the IPPools as YAML on stdout, or the line none when nothing was
// found; what was left out (of kind) makes the command fail after the rest
// is printed.
func printConversion(o *Options, res metallb.Result, none, kind string) error {
	if _, err := io.WriteString(o.Streams.ErrOut, metallb.Warnings(res.Warnings)); err != nil {
		return err
	}
	if len(res.Pools) == 0 && len(res.NotConverted) == 0 {
		_, err := fmt.Fprintln(o.Streams.ErrOut, none)
		return err
	}
	if err := metallb.Write(o.Streams.Out, res.Pools); err != nil {
		return err
	}
	if n := len(res.NotConverted); n > 0 {
		return fmt.Errorf("%d %s not converted: %s; the warnings above say why and what to fix", n, kind, strings.Join(res.NotConverted, ", "))
	}
	return nil
}

func readFiles(stdin io.Reader, files []string) ([]*unstructured.Unstructured, error) {
	var out []*unstructured.Unstructured
	for _, name := range files {
		r, source := stdin, "stdin"
		if name != "-" {
			f, err := os.Open(name)
			if err != nil {
				return nil, err
			}
			defer f.Close()
			r, source = f, name
		}
		objs, err := metallb.Decode(r, source)
		if err != nil {
			return nil, err
		}
		out = append(out, objs...)
	}
	return out, nil
}

// readCluster lists the IPAddressPools and advertisements of namespaces.
func readCluster(ctx context.Context, o *Options, namespaces []string) ([]*unstructured.Unstructured, error) {
	cfg, err := o.Kube.ToRESTConfig()
	if err != nil {
		return nil, fmt.Errorf("kubeconfig: %w", err)
	}
	client, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	var out []*unstructured.Unstructured
	for _, ns := range namespaces {
		for i, gvr := range append([]schema.GroupVersionResource{metallbPools}, metallbAdvs...) {
			list, err := client.Resource(gvr).Namespace(ns).List(ctx, metav1.ListOptions{})
			switch {
			case i > 0 && (apierrors.IsNotFound(err) || meta.IsNoMatchError(err)):
				continue // no advertisements: nothing to say about them
			case apierrors.IsNotFound(err):
				return nil, fmt.Errorf("the cluster serves no %s (MetalLB 0.13 or newer installs it); to convert files, use -f", gvr.GroupResource())
			case apierrors.IsForbidden(err):
				return nil, fmt.Errorf("listing %s in namespace %q: %w; grant list on it, or export the pools and use -f", gvr.GroupResource(), ns, err)
			case err != nil:
				return nil, fmt.Errorf("listing %s in namespace %q: %w", gvr.GroupResource(), ns, err)
			}
			for i := range list.Items {
				out = append(out, &list.Items[i])
			}
		}
	}
	return out, nil
}
