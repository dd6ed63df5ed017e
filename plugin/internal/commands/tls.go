package commands

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"strings"
	"time"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/ipledger/ipledger/pkg/certsigner"
)

// The Secrets of components/tls and the CA that signs them.
const (
	caSecretName = "ipledger-grpc-ca"
	caCommonName = "ipledger-grpc-ca"
	// managedByCertManager marks a Secret cert-manager issues
	// (components/cert-manager): bootstrap never writes one.
	managedByCertManager = "cert-manager.io/certificate-name"
)

// tlsServers are the gRPC servers components/tls serves TLS on, each with
// its own Secret ipledger-<server>-tls: those ipledger-signer signs for.
var tlsServers = certsigner.Servers

// serverDNSNames are the names a server's certificate must carry: the
// Service's .svc name (what kubectl ipledger and grpcurl dial) and its
// fully qualified name (what the base's --watcher-addr dials), the same as
// ipledger-signer's.
func serverDNSNames(server, namespace string) []string {
	return certsigner.DNSNames(server, namespace, "cluster.local")
}

func newTLSCommand(o *Options) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "tls",
		Short: "Certificates of ipledger's gRPC servers (components/tls)",
		Long: `tls manages the certificates components/tls mounts: one Secret per gRPC server (watcher, ipam,
eipd), signed by a CA of the cluster's own that no Pod mounts. Use it or cert-manager
(components/cert-manager), not both for one Secret.`,
		Example: `  kubectl ipledger tls bootstrap
  kubectl ipledger tls bootstrap --renew`,
	}
	cmd.AddCommand(newTLSBootstrapCommand(o))
	return cmd
}

func newTLSBootstrapCommand(o *Options) *cobra.Command {
	var (
		renew      bool
		validity   time.Duration
		caValidity time.Duration
	)
	cmd := &cobra.Command{
		Use:   "bootstrap",
		Short: "Create the CA and the servers' certificate Secrets components/tls mounts",
		Long: `bootstrap makes, in --ipam-namespace, what components/tls needs and nothing else:

  ipledger-grpc-ca      the CA (ca.crt, ca.key; ECDSA P-256, 10 years), mounted by no Pod
  ipledger-watcher-tls  kubernetes.io/tls with ca.crt, for ipledger-watcher.<namespace>.svc(.cluster.local)
  ipledger-ipam-tls     the same for ipledger-ipam
  ipledger-eipd-tls     the same for ipledger-eipd

Each leaf is ECDSA P-256, valid 90 days (--validity), signed by the CA. It is idempotent: what exists
is kept and reported with its expiry. --renew issues new leaves from the existing CA; the servers load
the new files when the kubelet updates their volumes (within a minute or two), no restart needed.
A Secret cert-manager manages (components/cert-manager) is never written.`,
		Example: `  # Before applying overlays/production
  kubectl ipledger tls bootstrap

  # Every few weeks, well before the printed expiry (alert IpledgerGRPCCertificateExpiringSoon)
  kubectl ipledger tls bootstrap --renew`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			client, err := o.kubeClient()
			if err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), o.Timeout)
			defer cancel()
			b := bootstrapper{client: client, ns: o.Connect.Namespace, now: time.Now(), validity: validity, caValidity: caValidity,
				say: func(format string, a ...any) { fmt.Fprintf(o.Streams.Out, format+"\n", a...) }}
			return b.run(ctx, renew)
		},
	}
	cmd.Flags().BoolVar(&renew, "renew", false, "Issue new server certificates from the existing CA, even when the current ones are valid.")
	cmd.Flags().DurationVar(&validity, "validity", 90*24*time.Hour, "How long a server certificate is valid.")
	cmd.Flags().DurationVar(&caValidity, "ca-validity", 10*365*24*time.Hour, "How long a new CA is valid (an existing CA is kept).")
	return cmd
}

type bootstrapper struct {
	client       kubernetes.Interface
	ns           string
	now          time.Time
	validity     time.Duration
	caValidity   time.Duration
	say          func(format string, a ...any)
	caCert       *x509.Certificate
	caKey        *ecdsa.PrivateKey
	caPEM        []byte
	leafTroubles []string
}

func (b *bootstrapper) run(ctx context.Context, renew bool) error {
	if err := b.ensureCA(ctx); err != nil {
		return err
	}
	for _, server := range tlsServers {
		if err := b.ensureLeaf(ctx, server, renew); err != nil {
			return err
		}
	}
	if len(b.leafTroubles) > 0 {
		return fmt.Errorf("%s; run with --renew to re-issue from %s", strings.Join(b.leafTroubles, "; "), caSecretName)
	}
	return nil
}

func (b *bootstrapper) ensureCA(ctx context.Context) error {
	secrets := b.client.CoreV1().Secrets(b.ns)
	s, err := secrets.Get(ctx, caSecretName, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		key, cert, certPEM, err := b.newCA()
		if err != nil {
			return err
		}
		keyDER, err := x509.MarshalECPrivateKey(key)
		if err != nil {
			return err
		}
		s = &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Name: caSecretName, Namespace: b.ns, Labels: tlsSecretLabels()},
			Type:       corev1.SecretTypeOpaque,
			Data: map[string][]byte{
				"ca.crt": certPEM,
				"ca.key": pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}),
			},
		}
		if _, err := secrets.Create(ctx, s, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("create Secret %s/%s: %w", b.ns, caSecretName, err)
		}
		b.caCert, b.caKey, b.caPEM = cert, key, certPEM
		b.say("Secret %s/%s: created CA %q, expires %s", b.ns, caSecretName, caCommonName, cert.NotAfter.UTC().Format(time.RFC3339))
		return nil
	case err != nil:
		return fmt.Errorf("read Secret %s/%s: %w", b.ns, caSecretName, err)
	}
	cert, err := parseCert(s.Data["ca.crt"])
	if err != nil {
		return fmt.Errorf("Secret %s/%s, ca.crt: %w", b.ns, caSecretName, err)
	}
	block, _ := pem.Decode(s.Data["ca.key"])
	if block == nil {
		return fmt.Errorf("Secret %s/%s: ca.key holds no PEM key", b.ns, caSecretName)
	}
	key, err := x509.ParseECPrivateKey(block.Bytes)
	if err != nil {
		return fmt.Errorf("Secret %s/%s, ca.key: %w", b.ns, caSecretName, err)
	}
	if !key.PublicKey.Equal(cert.PublicKey) {
		return fmt.Errorf("Secret %s/%s: ca.key is not the key of ca.crt", b.ns, caSecretName)
	}
	if !b.now.Before(cert.NotAfter) {
		return fmt.Errorf("Secret %s/%s: the CA expired at %s; delete the Secret and run bootstrap again (every server gets a new certificate)",
			b.ns, caSecretName, cert.NotAfter.UTC().Format(time.RFC3339))
	}
	b.caCert, b.caKey, b.caPEM = cert, key, s.Data["ca.crt"]
	b.say("Secret %s/%s: kept CA %q, expires %s", b.ns, caSecretName, cert.Subject.CommonName, cert.NotAfter.UTC().Format(time.RFC3339))
	return nil
}

func (b *bootstrapper) newCA() (*ecdsa.PrivateKey, *x509.Certificate, []byte, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, nil, err
	}
	serial, err := newSerial()
	if err != nil {
		return nil, nil, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial, Subject: pkix.Name{CommonName: caCommonName, Organization: []string{"ipledger"}},
		NotBefore: b.now.Add(-5 * time.Minute), NotAfter: b.now.Add(b.caValidity),
		IsCA: true, BasicConstraintsValid: true, MaxPathLenZero: true,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, nil, nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, nil, nil, err
	}
	return key, cert, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), nil
}

func (b *bootstrapper) ensureLeaf(ctx context.Context, server string, renew bool) error {
	name := "ipledger-" + server + "-tls"
	names := serverDNSNames(server, b.ns)
	secrets := b.client.CoreV1().Secrets(b.ns)
	s, err := secrets.Get(ctx, name, metav1.GetOptions{})
	exists := err == nil
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("read Secret %s/%s: %w", b.ns, name, err)
	}
	if exists {
		if _, ok := s.Annotations[managedByCertManager]; ok {
			b.say("Secret %s/%s: left alone, cert-manager manages it (Certificate %s)", b.ns, name, s.Annotations[managedByCertManager])
			return nil
		}
		if !renew {
			notAfter, trouble := b.check(s, names)
			if trouble != "" {
				b.leafTroubles = append(b.leafTroubles, fmt.Sprintf("Secret %s/%s %s", b.ns, name, trouble))
				b.say("Secret %s/%s: kept, but it %s", b.ns, name, trouble)
				return nil
			}
			left := notAfter.Sub(b.now)
			b.say("Secret %s/%s: kept, expires %s (in %d days)", b.ns, name, notAfter.UTC().Format(time.RFC3339), int(left.Hours()/24))
			return nil
		}
	}
	certPEM, keyPEM, notAfter, err := b.issue(server, names)
	if err != nil {
		return err
	}
	data := map[string][]byte{corev1.TLSCertKey: certPEM, corev1.TLSPrivateKeyKey: keyPEM, "ca.crt": b.caPEM}
	verb := "created"
	if exists {
		s = s.DeepCopy()
		s.Data = data
		if s.Type != corev1.SecretTypeTLS {
			return fmt.Errorf("Secret %s/%s is of type %s, not %s: delete it and run bootstrap again", b.ns, name, s.Type, corev1.SecretTypeTLS)
		}
		if _, err := secrets.Update(ctx, s, metav1.UpdateOptions{}); err != nil {
			return fmt.Errorf("update Secret %s/%s: %w", b.ns, name, err)
		}
		verb = "renewed"
	} else {
		s = &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: b.ns, Labels: tlsSecretLabels()},
			Type:       corev1.SecretTypeTLS,
			Data:       data,
		}
		if _, err := secrets.Create(ctx, s, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("create Secret %s/%s: %w", b.ns, name, err)
		}
	}
	b.say("Secret %s/%s: %s for %s, expires %s", b.ns, name, verb, strings.Join(names, ", "), notAfter.UTC().Format(time.RFC3339))
	return nil
}

// check says what is wrong with a server's Secret for the names, if
// anything, and when its certificate expires.
func (b *bootstrapper) check(s *corev1.Secret, names []string) (time.Time, string) {
	cert, err := parseCert(s.Data[corev1.TLSCertKey])
	if err != nil {
		return time.Time{}, "has no valid tls.crt (" + err.Error() + ")"
	}
	if len(s.Data[corev1.TLSPrivateKeyKey]) == 0 {
		return cert.NotAfter, "has no tls.key"
	}
	if !bytes.Equal(bytes.TrimSpace(s.Data["ca.crt"]), bytes.TrimSpace(b.caPEM)) {
		return cert.NotAfter, "has a ca.crt other than " + caSecretName + "'s"
	}
	roots := x509.NewCertPool()
	roots.AddCert(b.caCert)
	for _, n := range names {
		if _, err := cert.Verify(x509.VerifyOptions{Roots: roots, DNSName: n, CurrentTime: b.now, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err != nil {
			return cert.NotAfter, fmt.Sprintf("does not verify for %s: %v", n, err)
		}
	}
	return cert.NotAfter, ""
}

func (b *bootstrapper) issue(server string, names []string) (certPEM, keyPEM []byte, notAfter time.Time, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, time.Time{}, err
	}
	serial, err := newSerial()
	if err != nil {
		return nil, nil, time.Time{}, err
	}
	notAfter = b.now.Add(b.validity)
	if notAfter.After(b.caCert.NotAfter) {
		notAfter = b.caCert.NotAfter
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial, Subject: pkix.Name{CommonName: "ipledger-" + server, Organization: []string{"ipledger"}},
		NotBefore: b.now.Add(-5 * time.Minute), NotAfter: notAfter,
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames: names,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, b.caCert, &key.PublicKey, b.caKey)
	if err != nil {
		return nil, nil, time.Time{}, err
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, nil, time.Time{}, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), notAfter, nil
}

func tlsSecretLabels() map[string]string {
	return map[string]string{"app.kubernetes.io/part-of": "ipledger", "app.kubernetes.io/managed-by": "kubectl-ipledger"}
}

func parseCert(pemBytes []byte) (*x509.Certificate, error) {
	block, _ := pem.Decode(pemBytes)
	if block == nil || block.Type != "CERTIFICATE" {
		return nil, errors.New("no PEM certificate")
	}
	return x509.ParseCertificate(block.Bytes)
}

func newSerial() (*big.Int, error) {
	return rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
}
