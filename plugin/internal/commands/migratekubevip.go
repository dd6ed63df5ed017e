package commands

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"

	"github.com/ipledger/ipledger/plugin/internal/kubevip"
)

// configMaps is read as unstructured, as the other converters read their
// objects, so that a file and the cluster give Convert the same input.
var configMaps = schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}

func newMigrateKubeVIPCommand(o *Options) *cobra.Command {
	var files []string
	name, namespace := kubevip.ConfigMapName, kubevip.ConfigMapNamespace
	cmd := &cobra.Command{
		Use:   "migrate-kube-vip",
		Short: "Print IPPools equivalent to kube-vip-cloud-provider's kubevip ConfigMap, and what does not carry over",
		Long: `migrate-kube-vip reads kube-vip-cloud-provider's configuration, the kubevip ConfigMap in kube-system
(--configmap, --configmap-namespace for another), from the cluster or from a file (-f; - for stdin), and
prints equivalent ipledger IPPools as YAML on stdout, for you to review and apply with kubectl. It changes
nothing in the cluster.

Each cidr-<namespace> or range-<namespace> key that serves becomes IPPool kube-vip-<namespace>, pinned to its
namespace; cidr-global or range-global becomes kube-vip-global, for every namespace without a key of its
own (kube-vip-cloud-provider never falls back to the global key). Keys rank as kube-vip-cloud-provider
ranks them: cidr-<namespace>, cidr-global, range-<namespace>, range-global; a key that never serves is
warned about and not converted. Every pool skips IPv4 addresses ending in .0 and .255 (avoidBuggyIPs), as
kube-vip-cloud-provider does; skip-end-ips-in-cidr carries over. Each IPPool is labelled
ipledger.io/converted-from=kube-vip.

What does not carry over is printed on stderr, one "Warning:" line per key: allow-share-* (ipam shares an
address only between Services with one ipledger.io/allow-shared-ip key), search-order, interface-*, keys
kube-vip-cloud-provider does not read. A key that cannot be converted (DHCP's 0.0.0.0/32, an empty or
unreadable value) is left out and the command exits 1 after printing the others. The whole migration,
step by step: docs/migrating-from-kube-vip.md.

Reading the cluster needs get on the ConfigMap.`,
		Example: `  # Convert the cluster's configuration, review, then apply
  kubectl ipledger migrate-kube-vip > ippools.yaml
  kubectl apply -f ippools.yaml

  # Convert a file, or what kubectl prints
  kubectl ipledger migrate-kube-vip -f kubevip.yaml
  kubectl -n kube-system get configmap kubevip -o yaml | kubectl ipledger migrate-kube-vip -f -`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, cancel := context.WithTimeout(cmd.Context(), o.Timeout)
			defer cancel()
			var objs []*unstructured.Unstructured
			var err error
			if len(files) > 0 {
				objs, err = readFiles(o.Streams.In, files)
			} else {
				objs, err = readKubeVIPConfig(ctx, o, namespace, name)
			}
			if err != nil {
				return err
			}
			return printConversion(o, kubevip.Convert(objs), "No address keys (cidr-*, range-*) found, so no IPPools.", "key(s)")
		},
	}
	cmd.Flags().StringArrayVarP(&files, "filename", "f", nil, "Read the ConfigMap from this file instead of the cluster (- for stdin); repeatable.")
	cmd.Flags().StringVar(&name, "configmap", name, "The ConfigMap kube-vip-cloud-provider reads (its KUBEVIP_CONFIG_MAP).")
	cmd.Flags().StringVar(&namespace, "configmap-namespace", namespace, "The namespace of that ConfigMap (its KUBEVIP_NAMESPACE).")
	return cmd
}

// readKubeVIPConfig gets the ConfigMap kube-vip-cloud-provider reads.
func readKubeVIPConfig(ctx context.Context, o *Options, namespace, name string) ([]*unstructured.Unstructured, error) {
	cfg, err := o.Kube.ToRESTConfig()
	if err != nil {
		return nil, fmt.Errorf("kubeconfig: %w", err)
	}
	client, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	cm, err := client.Resource(configMaps).Namespace(namespace).Get(ctx, name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return nil, fmt.Errorf("ConfigMap %s/%s not found; kube-vip-cloud-provider reads the one its KUBEVIP_NAMESPACE and KUBEVIP_CONFIG_MAP name (--configmap-namespace, --configmap)", namespace, name)
	case apierrors.IsForbidden(err):
		return nil, fmt.Errorf("getting ConfigMap %s/%s: %w; grant get on it, or export it and use -f", namespace, name, err)
	case err != nil:
		return nil, fmt.Errorf("getting ConfigMap %s/%s: %w", namespace, name, err)
	}
	return []*unstructured.Unstructured{cm}, nil
}
