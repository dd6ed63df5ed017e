// Command ipledger-signer is the certificate authority of ipledger's gRPC
// servers (pkg/certsigner): it keeps the CA in a Secret only it reads,
// publishes the bundle the clients trust, and signs the
// CertificateSigningRequests of ipledger.io/grpc-serving that ipledger's own
// ServiceAccounts make for their own Service names.
package main

import (
	"context"
	"flag"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sync/errgroup"
	"k8s.io/client-go/kubernetes"

	"github.com/ipledger/ipledger/pkg/certsigner"
	"github.com/ipledger/ipledger/pkg/cmdmain"
	"github.com/ipledger/ipledger/pkg/opsserver"
)

func main() {
	var (
		common cmdmain.Common
		ops    opsserver.Config
		cfg    certsigner.Config
	)
	fs := flag.NewFlagSet("ipledger-signer", flag.ContinueOnError)
	common.KubeAPIQPS, common.KubeAPIBurst = 5, 10 // a few writes a day
	common.Flags(fs)
	ops.Flags(fs)
	cfg.Defaults()
	fs.StringVar(&cfg.SecretName, "ca-secret", cfg.SecretName, "Secret in --namespace holding the CA certificates and keys (the install ships it empty)")
	fs.StringVar(&cfg.ConfigMapName, "ca-bundle-configmap", cfg.ConfigMapName, "ConfigMap in --namespace where the CA bundle (ca.crt) every client trusts is published (the install ships it empty)")
	fs.StringVar(&cfg.ClusterDomain, "cluster-domain", cfg.ClusterDomain, "the cluster's DNS domain: the servers' names are ipledger-<server>.<namespace>.svc and that plus .<domain>")
	fs.DurationVar(&cfg.CAValidity, "ca-validity", cfg.CAValidity, "lifetime of a new CA; the next one is made when a third is left, and both are trusted until the old one ends")
	fs.DurationVar(&cfg.MaxValidity, "max-validity", cfg.MaxValidity, "longest lifetime of a serving certificate (servers renew at two thirds)")
	fs.DurationVar(&cfg.Propagation, "ca-propagation", cfg.Propagation, "how long a new CA is in the bundle before it signs (the kubelet's ConfigMap refresh and the clients' re-read)")
	fs.DurationVar(&cfg.CAInterval, "ca-check-interval", cfg.CAInterval, "how often the CA Secret is checked")
	cmdmain.Main("ipledger-signer", fs, func(ctx context.Context) error {
		cfg.Namespace = common.Namespace
		log := common.Logger().With("component", "signer")
		restCfg, err := common.RESTConfig()
		if err != nil {
			return err
		}
		typed, _ := cmdmain.ClientConfigs(restCfg)
		client, err := kubernetes.NewForConfig(typed)
		if err != nil {
			return err
		}
		s := certsigner.New(cfg, client, log)
		g, ctx := errgroup.WithContext(ctx)
		g.Go(func() error { return s.Run(ctx) })
		g.Go(func() error { return opsserver.New(ops, prometheus.NewRegistry(), s.Ready).Serve(ctx) })
		return g.Wait()
	})
}
