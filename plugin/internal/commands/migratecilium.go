package commands

import (
	"context"
	"fmt"
	"strings"

	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"

	"github.com/ipledger/ipledger/plugin/internal/cilium"
)

// ciliumPools are the versions of CiliumLoadBalancerIPPool migrate-cilium
// lists, newest first: v2 on newer Cilium, v2alpha1 on older.
var ciliumPools = []schema.GroupVersionResource{
	{Group: cilium.Group, Version: "v2", Resource: "ciliumloadbalancerippools"},
	{Group: cilium.Group, Version: "v2alpha1", Resource: "ciliumloadbalancerippools"},
}

func newMigrateCiliumCommand(o *Options) *cobra.Command {
	var files []string
	cmd := &cobra.Command{
		Use:   "migrate-cilium",
		Short: "Print IPPools equivalent to Cilium LB-IPAM's CiliumLoadBalancerIPPools, and what does not carry over",
		Long: `migrate-cilium reads Cilium LB-IPAM's CiliumLoadBalancerIPPools (cilium.io/v2, or v2alpha1 on older
Cilium) from the cluster, or from files (-f, multi-document YAML or a List as kubectl get -o yaml writes it;
- for stdin), and prints equivalent ipledger IPPools as YAML on stdout, for you to review and apply with
kubectl. It changes nothing in the cluster.

Carried over: the blocks (spec.blocks and the deprecated spec.cidrs: CIDRs, start-stop ranges, single
addresses), allowFirstLastIPs "No" as skipFirstLastIPs: true, and serviceSelector: its
io.kubernetes.service.namespace requirements as spec.allocation.namespaces (or a namespace selector on
kubernetes.io/metadata.name), its other requirements as spec.allocation.serviceSelectors. Each IPPool keeps
its pool's name and is labelled ipledger.io/converted-from=cilium.

What does not carry over is printed on stderr, one "Warning:" line per object and field: disabled (written
as autoAssign: false, which still serves requests), labels, fields ipledger has no equivalent for, addresses
ipledger never hands out. A pool that cannot be converted without serving Services Cilium's did not (a
selector on io.kubernetes.service.name) or at all (no blocks, a block Cilium cannot read) is left out and the
command exits 1 after printing the others. The whole migration, step by step: docs/migrating-from-cilium.md.

Reading the cluster needs list on ciliumloadbalancerippools (cilium.io).`,
		Example: `  # Convert the cluster's pools, review, then apply
  kubectl ipledger migrate-cilium > ippools.yaml
  kubectl apply -f ippools.yaml

  # Convert files, or what kubectl prints
  kubectl ipledger migrate-cilium -f pools.yaml
  kubectl get ciliumloadbalancerippools -o yaml | kubectl ipledger migrate-cilium -f -`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, cancel := context.WithTimeout(cmd.Context(), o.Timeout)
			defer cancel()
			var objs []*unstructured.Unstructured
			var err error
			from := "in the cluster"
			if len(files) > 0 {
				objs, err = readFiles(o.Streams.In, files)
				from = "in " + strings.Join(files, ", ")
			} else {
				objs, err = readCiliumPools(ctx, o)
			}
			if err != nil {
				return err
			}
			return printConversion(o, cilium.Convert(objs), "No CiliumLoadBalancerIPPools found "+from+".", "CiliumLoadBalancerIPPool(s)")
		},
	}
	cmd.Flags().StringArrayVarP(&files, "filename", "f", nil, "Read Cilium objects from this file instead of the cluster (- for stdin); repeatable.")
	return cmd
}

// readCiliumPools lists the CiliumLoadBalancerIPPools in the newest version
// the cluster serves.
func readCiliumPools(ctx context.Context, o *Options) ([]*unstructured.Unstructured, error) {
	cfg, err := o.Kube.ToRESTConfig()
	if err != nil {
		return nil, fmt.Errorf("kubeconfig: %w", err)
	}
	client, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	for _, gvr := range ciliumPools {
		list, err := client.Resource(gvr).List(ctx, metav1.ListOptions{})
		switch {
		case apierrors.IsNotFound(err) || meta.IsNoMatchError(err):
			continue
		case apierrors.IsForbidden(err):
			return nil, fmt.Errorf("listing %s: %w; grant list on it, or export the pools and use -f", gvr.GroupResource(), err)
		case err != nil:
			return nil, fmt.Errorf("listing %s: %w", gvr.GroupResource(), err)
		}
		out := make([]*unstructured.Unstructured, 0, len(list.Items))
		for i := range list.Items {
			out = append(out, &list.Items[i])
		}
		return out, nil
	}
	return nil, fmt.Errorf("the cluster serves no %s (Cilium's LB-IPAM installs it); to convert files, use -f", ciliumPools[0].GroupResource())
}
