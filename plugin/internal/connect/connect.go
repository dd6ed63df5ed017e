// Package connect reaches ipam for kubectl-ipledger: it finds ipam's Pods the
// way kubectl finds anything (the kubeconfig's current context), opens a
// port-forward to a Ready one (to the Lease holder for writes) and closes it
// again, and authenticates with a short-lived token for ipledger's audience
// that it requests for the caller, or one the caller gives.
package connect

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"

	"github.com/spf13/pflag"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/ipledger/ipledger/pkg/install"
	ipamv1grpc "github.com/ipledger/ipledger/proto/ipledger/ipam/v1/ipamv1grpc"
)

// Defaults of the base install (deploy/kustomize/base/ipam.yaml); its
// namespace is install.DefaultNamespace.
const (
	DefaultLease     = "ipledger-ipam"
	DefaultTLSSecret = "ipledger-ipam-tls" // components/tls; its ca.crt is the CA that signed ipam's certificate
	// DefaultCAConfigMap is components/tls-signer's bundle (ca.crt) of the
	// CAs of ipledger-signer (certsigner.DefaultConfigMapName).
	DefaultCAConfigMap = "ipledger-grpc-ca-bundle"
	// PodSelector selects ipam's Pods.
	PodSelector = "app.kubernetes.io/name=ipledger-ipam"
	// portName is the container port ipam serves gRPC on.
	portName    = "grpc"
	defaultPort = 9443
)

// Flags say where ipam is and who the caller is to it.
type Flags struct {
	// Namespace is where ipam runs (--ipam-namespace).
	Namespace string
	// Lease is ipam's leader-election Lease, whose holder takes writes.
	Lease string
	// Address, when set, is dialed directly instead of port-forwarding.
	Address string
	// TokenFile holds a token for ipledger's audience; when empty one is
	// requested (TokenRequest) for ServiceAccount, or for the caller's own
	// ServiceAccount.
	TokenFile      string
	ServiceAccount string
	// CAFile or TLSSecret (its ca.crt) verify ipam's TLS certificate;
	// ServerName is the name that certificate must carry.
	CAFile      string
	TLSSecret   string
	CAConfigMap string
	ServerName  string
	// API chooses how to reach ipam: APIAuto, APIAggregated or APIGRPC.
	API string
}

// AddFlags registers the flags on fs.
func (f *Flags) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&f.API, "api", APIAuto, "How to reach ipam: auto (the aggregated API api.ipledger.io as yourself when the cluster serves it and no gRPC flag is given, else gRPC through a port-forward), aggregated, or grpc.")
	fs.StringVar(&f.Namespace, "ipam-namespace", install.DefaultNamespace, "Namespace where ipam runs.")
	fs.StringVar(&f.Lease, "ipam-lease", DefaultLease, "ipam's leader-election Lease (in --ipam-namespace); reserve and release go to its holder.")
	fs.StringVar(&f.Address, "ipam-address", "", "Dial ipam at host:port instead of port-forwarding to one of its Pods.")
	fs.StringVar(&f.TokenFile, "token-file", "", "File holding a token for audience "+Audience+" (e.g. from kubectl create token NAME --audience "+Audience+"). By default the plugin requests one.")
	fs.StringVar(&f.ServiceAccount, "service-account", "", "[NAMESPACE/]NAME of the ServiceAccount to request a token for (namespace defaults to --ipam-namespace). By default: the caller's own ServiceAccount, when the kubeconfig is one.")
	fs.StringVar(&f.CAFile, "ipam-ca-file", "", "CA certificate (PEM) that signed ipam's gRPC certificate (components/tls). Also turns TLS on with --ipam-address.")
	fs.StringVar(&f.TLSSecret, "ipam-tls-secret", DefaultTLSSecret, "Secret in --ipam-namespace whose ca.crt verifies ipam's certificate, read when ipam serves TLS and --ipam-ca-file is not given.")
	fs.StringVar(&f.CAConfigMap, "ipam-ca-configmap", DefaultCAConfigMap, "ConfigMap in --ipam-namespace whose ca.crt verifies ipam's certificate, read when ipam gets it from ipledger-signer (components/tls-signer) and --ipam-ca-file is not given.")
	fs.StringVar(&f.ServerName, "ipam-tls-server-name", "", "Name ipam's certificate must carry (default: ipledger-ipam.<ipam-namespace>.svc through a port-forward, the host of --ipam-address otherwise).")
}

// Target says which ipam replica a command needs.
type Target int

const (
	// AnyReplica answers reads: every replica serves them.
	AnyReplica Target = iota
	// Leader takes reservations: only the holder of the Lease does.
	Leader
)

// Conn is an open connection to ipam; Close also ends the port-forward.
type Conn struct {
	IPAM ipamv1grpc.IPAMServiceClient
	// Pod is the Pod reached through the port-forward ("" with --ipam-address).
	Pod string

	cc   *grpc.ClientConn
	stop context.CancelFunc
}

// Close closes the connection and the port-forward.
func (c *Conn) Close() error {
	if c.cc == nil { // the aggregated API: nothing to close
		return nil
	}
	err := c.cc.Close()
	if c.stop != nil {
		c.stop()
	}
	return err
}

// Dial connects to ipam as flags say, through kube's kubeconfig and context.
// With --ipam-address and --token-file it needs no kubeconfig at all.
func Dial(ctx context.Context, kube genericclioptions.RESTClientGetter, f Flags, target Target) (*Conn, error) {
	var (
		cfg    *rest.Config
		client kubernetes.Interface
		err    error
	)
	if f.Address == "" || f.TokenFile == "" {
		if cfg, err = kube.ToRESTConfig(); err != nil {
			return nil, fmt.Errorf("kubeconfig: %w", err)
		}
		if client, err = kubernetes.NewForConfig(cfg); err != nil {
			return nil, fmt.Errorf("kubeconfig: %w", err)
		}
	}
	token, err := Token(ctx, client, f)
	if err != nil {
		return nil, err
	}
	if f.Address != "" {
		var tlsCfg *tls.Config
		if f.CAFile != "" {
			host, _, _ := net.SplitHostPort(f.Address)
			if tlsCfg, err = tlsConfig(ctx, nil, f, nil, host); err != nil { // the CA file only
				return nil, err
			}
		}
		conn, err := newClient(f.Address, token, tlsCfg)
		if err != nil {
			return nil, err
		}
		return &Conn{IPAM: ipamv1grpc.NewIPAMServiceClient(conn), cc: conn}, nil
	}

	pod, err := Find(ctx, client, f, target)
	if err != nil {
		return nil, err
	}
	var tlsCfg *tls.Config
	if f.CAFile != "" || servesTLS(pod) != plaintext {
		if tlsCfg, err = tlsConfig(ctx, client, f, pod, "ipledger-ipam."+f.Namespace+".svc"); err != nil {
			return nil, err
		}
	}
	// The port-forward outlives Dial's ctx, until Close.
	life, stop := context.WithCancel(context.WithoutCancel(ctx))
	local, err := forward(ctx, life, cfg, pod, grpcPort(pod))
	if err != nil {
		stop()
		return nil, err
	}
	conn, err := newClient(local, token, tlsCfg)
	if err != nil {
		stop()
		return nil, err
	}
	return &Conn{IPAM: ipamv1grpc.NewIPAMServiceClient(conn), Pod: pod.Name, cc: conn, stop: stop}, nil
}

// newClient dials addr with the token on every call. Through a port-forward
// the plaintext hop is the loopback; the tunnel itself is the API server's
// TLS connection.
func newClient(addr, token string, tlsCfg *tls.Config) (*grpc.ClientConn, error) {
	creds := insecure.NewCredentials()
	if tlsCfg != nil {
		creds = credentials.NewTLS(tlsCfg)
	}
	conn, err := grpc.NewClient("passthrough:///"+addr,
		grpc.WithTransportCredentials(creds), grpc.WithPerRPCCredentials(bearer(token)))
	if err != nil {
		return nil, fmt.Errorf("ipam at %s: %w", addr, err)
	}
	return conn, nil
}

// bearer sends the token on every call. It does not demand transport
// security: the caller chose plaintext (see newClient).
type bearer string

func (b bearer) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + string(b)}, nil
}

func (bearer) RequireTransportSecurity() bool { return false }

// How a Pod runs ipam's gRPC server.
type tlsMode int

const (
	plaintext     tlsMode = iota
	tlsFromFiles          // components/tls: --grpc-tls-cert-file, the CA in the Secret's ca.crt
	tlsFromSigner         // components/tls-signer: --grpc-tls-signer, the CA in the bundle ConfigMap
)

// servesTLS says how the Pod runs ipam: components/tls and
// components/tls-signer replace --grpc-plaintext.
func servesTLS(pod *corev1.Pod) tlsMode {
	for _, c := range pod.Spec.Containers {
		for _, a := range append(append([]string{}, c.Command...), c.Args...) {
			switch {
			case strings.HasPrefix(a, "--grpc-tls-cert-file"):
				return tlsFromFiles
			case strings.HasPrefix(a, "--grpc-tls-signer"):
				return tlsFromSigner
			}
		}
	}
	return plaintext
}

// grpcPort is the Pod's container port named grpc.
func grpcPort(pod *corev1.Pod) int {
	for _, c := range pod.Spec.Containers {
		for _, p := range c.Ports {
			if p.Name == portName {
				return int(p.ContainerPort)
			}
		}
	}
	return defaultPort
}

func tlsConfig(ctx context.Context, client kubernetes.Interface, f Flags, pod *corev1.Pod, serverName string) (*tls.Config, error) {
	if f.ServerName != "" {
		serverName = f.ServerName
	}
	var pem []byte
	switch {
	case f.CAFile != "":
		b, err := os.ReadFile(f.CAFile)
		if err != nil {
			return nil, fmt.Errorf("--ipam-ca-file: %w", err)
		}
		pem = b
	case servesTLS(pod) == tlsFromSigner:
		cm, err := client.CoreV1().ConfigMaps(f.Namespace).Get(ctx, f.CAConfigMap, metav1.GetOptions{})
		if err != nil {
			return nil, fmt.Errorf("ipam Pod %s gets its certificate from ipledger-signer; reading the CA bundle from ConfigMap %s/%s (ca.crt): %w; give the CA with --ipam-ca-file instead",
				pod.Name, f.Namespace, f.CAConfigMap, err)
		}
		pem = []byte(cm.Data["ca.crt"])
	default:
		secret, err := client.CoreV1().Secrets(f.Namespace).Get(ctx, f.TLSSecret, metav1.GetOptions{})
		if err != nil {
			return nil, fmt.Errorf("ipam Pod %s serves TLS; reading the CA from Secret %s/%s (ca.crt): %w; give the CA with --ipam-ca-file instead",
				pod.Name, f.Namespace, f.TLSSecret, err)
		}
		pem = secret.Data["ca.crt"]
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(pem) {
		return nil, errors.New("the CA (--ipam-ca-file, or ca.crt of the Secret or the bundle ConfigMap) holds no PEM certificate")
	}
	return &tls.Config{MinVersion: tls.VersionTLS12, RootCAs: roots, ServerName: serverName}, nil
}
