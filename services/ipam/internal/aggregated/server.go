// Package aggregated serves ipam's reads through the Kubernetes
// aggregation layer: an APIService for api.ipledger.io/v1alpha1 sends
// `kubectl get allocations.api.ipledger.io` and any other client's requests,
// authenticated by the kube-apiserver, to ipam. It is built from
// k8s.io/apiserver's generic API server with delegated authentication (the
// front proxy's client certificate and X-Remote-* headers, checked against
// kube-system/extension-apiserver-authentication, and TokenReviews for
// direct callers) and delegated authorization (SubjectAccessReviews, by
// the grants of GrantFor). What it answers it asks of ipam's own
// IPAMService implementation in process, so both APIs agree.
//
// Off unless --aggregated-api-addr is set (docs/kubectl-ipledger.md).
package aggregated

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"strings"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	openapinamer "k8s.io/apiserver/pkg/endpoints/openapi"
	"k8s.io/apiserver/pkg/registry/rest"
	genericapiserver "k8s.io/apiserver/pkg/server"
	"k8s.io/apiserver/pkg/server/options"
	basecompatibility "k8s.io/component-base/compatibility"

	"github.com/ipledger/ipledger/pkg/ipamapi"
)

// ServiceName is the Service the APIService sends requests to
// (components/aggregated-api).
const ServiceName = "ipledger-ipam-api"

// Config is the aggregated API's flags.
type Config struct {
	// Addr is where to serve; empty serves nothing (the default).
	Addr string
	// CertFile and KeyFile are the serving certificate the APIService's
	// caBundle verifies, for ipledger-ipam-api.<namespace>.svc.
	CertFile, KeyFile string
	// Kubeconfig reaches the API server for the delegated reviews and the
	// extension-apiserver-authentication ConfigMap; empty: in-cluster.
	Kubeconfig string
}

// Flags registers the flags.
func (c *Config) Flags(fs *flag.FlagSet) {
	fs.StringVar(&c.Addr, "aggregated-api-addr", c.Addr,
		"serve the api.ipledger.io aggregated API (kubectl get allocations.api.ipledger.io, as the caller themselves) on this address, e.g. :6443; "+
			"empty serves none. Needs the APIService of components/aggregated-api (docs/kubectl-ipledger.md)")
	fs.StringVar(&c.CertFile, "aggregated-api-tls-cert-file", c.CertFile,
		"serving certificate (PEM) of the aggregated API, which the APIService's caBundle verifies; empty: a self-signed one made in memory (the APIService must then skip verification)")
	fs.StringVar(&c.KeyFile, "aggregated-api-tls-key-file", c.KeyFile, "key (PEM) of --aggregated-api-tls-cert-file")
}

// Enabled reports whether the aggregated API is served.
func (c Config) Enabled() bool { return c.Addr != "" }

// Server is the aggregated API server, listening.
type Server struct {
	generic  *genericapiserver.GenericAPIServer
	listener net.Listener
}

// New builds the server and listens on cfg.Addr.
func New(cfg Config, ipam IPAM) (*Server, error) {
	if !cfg.Enabled() {
		return nil, errors.New("aggregated: --aggregated-api-addr is empty")
	}
	if (cfg.CertFile == "") != (cfg.KeyFile == "") {
		return nil, errors.New("aggregated: give both --aggregated-api-tls-cert-file and --aggregated-api-tls-key-file, or neither (a self-signed certificate)")
	}
	ln, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		return nil, fmt.Errorf("aggregated: listen on --aggregated-api-addr %s: %w", cfg.Addr, err)
	}
	s, err := build(cfg, ipam, ln)
	if err != nil {
		ln.Close()
		return nil, err
	}
	return s, nil
}

func build(cfg Config, ipam IPAM, ln net.Listener) (*Server, error) {
	scheme := ipamapi.NewScheme()
	codecs := serializer.NewCodecFactory(scheme)
	config := genericapiserver.NewConfig(codecs)
	config.EffectiveVersion = basecompatibility.NewEffectiveVersionFromString("", "", "")

	serving := options.NewSecureServingOptions().WithLoopback()
	serving.Listener = ln
	serving.ServerCert.CertKey.CertFile, serving.ServerCert.CertKey.KeyFile = cfg.CertFile, cfg.KeyFile
	// Without files, a self-signed certificate made in memory at each
	// start, as metrics-server's default: the APIService then cannot pin a
	// caBundle and says insecureSkipTLSVerify (docs/kubectl-ipledger.md).
	serving.ServerCert.CertDirectory = ""
	if err := serving.MaybeDefaultWithSelfSignedCerts(ServiceName, nil, nil); err != nil {
		return nil, fmt.Errorf("aggregated: self-signed certificate: %w", err)
	}
	if err := serving.ApplyTo(&config.SecureServing, &config.LoopbackClientConfig); err != nil {
		return nil, fmt.Errorf("aggregated: serving: %w", err)
	}
	authn := options.NewDelegatingAuthenticationOptions()
	authn.RemoteKubeConfigFile = cfg.Kubeconfig
	if err := authn.ApplyTo(&config.Authentication, config.SecureServing, nil); err != nil {
		return nil, fmt.Errorf("aggregated: delegated authentication (needs get on configmaps/extension-apiserver-authentication in kube-system, "+
			"RoleBinding to extension-apiserver-authentication-reader): %w", err)
	}
	authzOpts := options.NewDelegatingAuthorizationOptions()
	authzOpts.RemoteKubeConfigFile = cfg.Kubeconfig
	if err := authzOpts.ApplyTo(&config.Authorization); err != nil {
		return nil, fmt.Errorf("aggregated: delegated authorization: %w", err)
	}
	delegated := config.Authorization.Authorizer
	config.Authorization.Authorizer = authorizer.AuthorizerFunc(translating{next: delegated}.Authorize)

	// The generic API server builds its field managers from OpenAPI
	// models, and kubectl validates what it creates against them (v2 for
	// its client-side validation, v3 otherwise; openapi.go).
	config.OpenAPIV3Config = genericapiserver.DefaultOpenAPIV3Config(definitions, openapinamer.NewDefinitionNamer(scheme))
	config.OpenAPIV3Config.Info.Title = "ipledger ipam"
	config.OpenAPIConfig = genericapiserver.DefaultOpenAPIConfig(definitions, openapinamer.NewDefinitionNamer(scheme))
	config.OpenAPIConfig.Info.Title = "ipledger ipam"
	// No admission (nothing is stored), no priority and fairness (the
	// kube-apiserver in front applies its own), no audit (the kube-apiserver
	// audits the person's request; ipam logs who reserved what).
	config.AdmissionControl = nil
	config.FlowControl = nil

	generic, err := config.Complete(nil).New("ipledger-ipam-aggregated", genericapiserver.NewEmptyDelegate())
	if err != nil {
		return nil, fmt.Errorf("aggregated: %w", err)
	}
	group := genericapiserver.NewDefaultAPIGroupInfo(ipamapi.Group, scheme, runtime.NewParameterCodec(scheme), codecs)
	group.VersionedResourcesStorageMap[ipamapi.Version] = map[string]rest.Storage{
		"allocations":  &allocations{reads: ipam},
		"pools":        &pools{reads: ipam},
		"explanations": &explanations{reads: ipam},
		"reservations": &reservations{ipam: ipam},
		"poolpreviews": &poolPreviews{ipam: ipam},
		// The namespace rule of AddressHistory is answered with the
		// delegated authorizer, for the user of the request.
		"historyqueries":      &historyQueries{ipam: ipam, authz: delegated},
		"localhistoryqueries": &historyQueries{ipam: ipam, authz: delegated, local: true},
	}
	if err := generic.InstallAPIGroup(&group); err != nil {
		return nil, fmt.Errorf("aggregated: install %s: %w", ipamapi.Group, err)
	}
	return &Server{generic: generic, listener: ln}, nil
}

// Addr is where the server listens.
func (s *Server) Addr() net.Addr { return s.listener.Addr() }

// Run serves until ctx ends.
func (s *Server) Run(ctx context.Context) error {
	err := s.generic.PrepareRun().RunWithContext(ctx)
	if err != nil && ctx.Err() != nil && strings.Contains(err.Error(), "context canceled") {
		return nil
	}
	return err
}
