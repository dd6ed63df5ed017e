// Package servingcert gets a gRPC server its serving certificate from the
// Kubernetes CertificateSigningRequest API and renews it before it ends.
// The private key is generated in the process's memory at each request and
// never written anywhere: only the CSR (the public key and the names) and
// the signed certificate travel through the API server. The signer
// (pkg/certsigner) decides what it signs; this package only asks.
package servingcert

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	certv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	watchtools "k8s.io/client-go/tools/watch"
)

// Config names what a server asks for.
type Config struct {
	// SignerName is the CSR's spec.signerName (certsigner.SignerName for
	// ipledger's own signer).
	SignerName string
	// DNSNames are the names the certificate must carry; the first is also
	// the subject's common name.
	DNSNames []string
	// Validity is the lifetime asked for (spec.expirationSeconds; the API
	// server's minimum is 10 minutes); the signer may give less.
	Validity time.Duration
	// WaitTimeout bounds the wait for one CSR to be signed; then a new one
	// is made (default DefaultWaitTimeout).
	WaitTimeout time.Duration
}

// DefaultValidity is the lifetime a server asks for (certsigner's cap).
const DefaultValidity = 60 * 24 * time.Hour

// DefaultWaitTimeout bounds the wait for one CSR.
const DefaultWaitTimeout = 5 * time.Minute

// ErrNoCertificate is the handshake error and readiness of a server whose
// first certificate is not signed yet.
var ErrNoCertificate = errors.New("no serving certificate yet: waiting for the CertificateSigningRequest to be signed (is ipledger-signer running?)")

// Source holds the current certificate and renews it.
type Source struct {
	cfg    Config
	client kubernetes.Interface
	log    *slog.Logger
	cert   atomic.Pointer[tls.Certificate]
}

// New returns a Source that asks through client (which needs create, get,
// list and watch on certificatesigningrequests). Nothing is requested until
// Run.
func New(cfg Config, client kubernetes.Interface, log *slog.Logger) (*Source, error) {
	if cfg.SignerName == "" || len(cfg.DNSNames) == 0 {
		return nil, errors.New("servingcert: a signer name and at least one DNS name are required (--grpc-tls-signer, --grpc-tls-dns-names)")
	}
	if cfg.Validity == 0 {
		cfg.Validity = DefaultValidity
	}
	if cfg.WaitTimeout == 0 {
		cfg.WaitTimeout = DefaultWaitTimeout
	}
	return &Source{cfg: cfg, client: client, log: log}, nil
}

// GetCertificate is a tls.Config's: the current certificate, or
// ErrNoCertificate before the first is signed.
func (s *Source) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	if c := s.cert.Load(); c != nil {
		return c, nil
	}
	return nil, ErrNoCertificate
}

// Ready is nil once a certificate is held.
func (s *Source) Ready() error {
	_, err := s.GetCertificate(nil)
	return err
}

// NotAfter is the end of the current certificate (zero before the first).
func (s *Source) NotAfter() time.Time {
	if c := s.cert.Load(); c != nil {
		return c.Leaf.NotAfter
	}
	return time.Time{}
}

// Run asks for a certificate, then for a new one at RenewAt of each, until
// ctx ends. A failed request is retried after Backoff; the current
// certificate keeps serving meanwhile.
func (s *Source) Run(ctx context.Context) error {
	failures := 0
	for {
		next := time.Now()
		cert, name, err := s.request(ctx)
		switch {
		case ctx.Err() != nil:
			return nil
		case err != nil:
			failures++
			next = next.Add(Backoff(failures))
			s.log.Error("Serving certificate not issued; retrying", "signer", s.cfg.SignerName, "csr", name, "err", err,
				"retryAt", next.Format(time.RFC3339), "haveCertificate", s.cert.Load() != nil)
		default:
			failures = 0
			s.cert.Store(cert)
			next = RenewAt(time.Now(), cert.Leaf.NotAfter)
			s.log.Info("Serving certificate issued", "csr", name, "dnsNames", cert.Leaf.DNSNames,
				"notAfter", cert.Leaf.NotAfter.Format(time.RFC3339), "renewAt", next.Format(time.RFC3339))
		}
		t := time.NewTimer(time.Until(next))
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-t.C:
		}
	}
}

// request makes one CSR with a new key and waits for its certificate.
func (s *Source) request(ctx context.Context) (*tls.Certificate, string, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, "", err
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{
		Subject: pkix.Name{CommonName: s.cfg.DNSNames[0]}, DNSNames: s.cfg.DNSNames,
	}, key)
	if err != nil {
		return nil, "", err
	}
	seconds := int32(s.cfg.Validity / time.Second)
	csr, err := s.client.CertificatesV1().CertificateSigningRequests().Create(ctx, &certv1.CertificateSigningRequest{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "ipledger-grpc-"},
		Spec: certv1.CertificateSigningRequestSpec{
			Request:           pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der}),
			SignerName:        s.cfg.SignerName,
			Usages:            []certv1.KeyUsage{certv1.UsageDigitalSignature, certv1.UsageServerAuth},
			ExpirationSeconds: &seconds,
		},
	}, metav1.CreateOptions{})
	if err != nil {
		return nil, "", fmt.Errorf("create CertificateSigningRequest: %w", err)
	}
	chain, err := s.wait(ctx, csr.Name)
	if err != nil {
		return nil, csr.Name, err
	}
	cert, err := Pair(chain, key)
	return cert, csr.Name, err
}

// wait returns the certificate of CSR name once it has one, or the reason
// it was denied or failed.
func (s *Source) wait(ctx context.Context, name string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.WaitTimeout)
	defer cancel()
	csrs := s.client.CertificatesV1().CertificateSigningRequests()
	sel := fields.OneTermEqualSelector("metadata.name", name).String()
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			o.FieldSelector = sel
			return csrs.List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.FieldSelector = sel
			return csrs.Watch(ctx, o)
		},
	}
	var chain []byte
	_, err := watchtools.UntilWithSync(ctx, lw, &certv1.CertificateSigningRequest{}, nil, func(e watch.Event) (bool, error) {
		csr, ok := e.Object.(*certv1.CertificateSigningRequest)
		if !ok {
			return false, nil
		}
		if e.Type == watch.Deleted {
			return false, fmt.Errorf("CertificateSigningRequest %s was deleted before it was signed", name)
		}
		for _, c := range csr.Status.Conditions {
			if (c.Type == certv1.CertificateDenied || c.Type == certv1.CertificateFailed) && c.Status == corev1.ConditionTrue {
				return false, fmt.Errorf("CertificateSigningRequest %s %s: %s: %s", name, c.Type, c.Reason, c.Message)
			}
		}
		chain = csr.Status.Certificate
		return len(chain) > 0, nil
	})
	if err != nil {
		return nil, fmt.Errorf("wait for CertificateSigningRequest %s: %w", name, err)
	}
	return chain, nil
}

// Pair is the tls.Certificate of a signed PEM chain (leaf first) and the
// key it was asked for; an issued certificate for another key is refused.
func Pair(chainPEM []byte, key *ecdsa.PrivateKey) (*tls.Certificate, error) {
	var ders [][]byte
	for rest := chainPEM; ; {
		var b *pem.Block
		if b, rest = pem.Decode(rest); b == nil {
			break
		}
		if b.Type == "CERTIFICATE" {
			ders = append(ders, b.Bytes)
		}
	}
	if len(ders) == 0 {
		return nil, errors.New("the issued certificate holds no PEM CERTIFICATE")
	}
	leaf, err := x509.ParseCertificate(ders[0])
	if err != nil {
		return nil, fmt.Errorf("the issued certificate: %w", err)
	}
	if pub, ok := leaf.PublicKey.(*ecdsa.PublicKey); !ok || !pub.Equal(&key.PublicKey) {
		return nil, errors.New("the issued certificate is not for the key this server asked with")
	}
	return &tls.Certificate{Certificate: ders, PrivateKey: key, Leaf: leaf}, nil
}
