package certsigner

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"time"
)

// The keys of the CA Secret and of the bundle ConfigMap.
const (
	// SecretCertKey holds the live CA certificates (PEM, any order).
	SecretCertKey = "ca.crt"
	// SecretKeyKey holds their private keys (PEM, in the same order).
	SecretKeyKey = "ca.key"
	// BundleKey is the key of the bundle ConfigMap every client mounts.
	BundleKey = "ca.crt"
)

// CA is one certificate authority and its key.
type CA struct {
	Cert *x509.Certificate
	Key  crypto.Signer
}

// NewCA makes a self-signed ECDSA P-256 CA valid for validity from now
// (backdated by Backdate).
func NewCA(now time.Time, validity time.Duration) (CA, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return CA{}, err
	}
	serial, err := randomSerial()
	if err != nil {
		return CA{}, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: "ipledger-grpc-ca " + now.UTC().Format("2006-01-02T15:04:05Z")},
		NotBefore:    now.Add(-Backdate), NotAfter: now.Add(validity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true, IsCA: true, MaxPathLenZero: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return CA{}, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return CA{}, err
	}
	return CA{Cert: cert, Key: key}, nil
}

// Sign issues a serving certificate for req's key and names, from
// notBefore to notAfter, signed by ca.
func (ca CA) Sign(req *x509.CertificateRequest, notBefore, notAfter time.Time) ([]byte, error) {
	serial, err := randomSerial()
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: req.Subject.CommonName},
		DNSNames:     req.DNSNames,
		NotBefore:    notBefore, NotAfter: notAfter,
		KeyUsage:              x509.KeyUsageDigitalSignature,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, req.PublicKey, ca.Key)
	if err != nil {
		return nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), nil
}

func randomSerial() (*big.Int, error) {
	return rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
}

// EncodeCAs is the CA Secret's data for cas.
func EncodeCAs(cas []CA) (map[string][]byte, error) {
	var certs, keys []byte
	for _, ca := range cas {
		k, err := x509.MarshalPKCS8PrivateKey(ca.Key)
		if err != nil {
			return nil, err
		}
		certs = append(certs, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ca.Cert.Raw})...)
		keys = append(keys, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: k})...)
	}
	return map[string][]byte{SecretCertKey: certs, SecretKeyKey: keys}, nil
}

// DecodeCAs reads the CA Secret's data (empty: no CA yet).
func DecodeCAs(data map[string][]byte) ([]CA, error) {
	certs, err := pemBlocks(data[SecretCertKey], "CERTIFICATE")
	if err != nil {
		return nil, err
	}
	keys, err := pemBlocks(data[SecretKeyKey], "PRIVATE KEY")
	if err != nil {
		return nil, err
	}
	if len(certs) != len(keys) {
		return nil, fmt.Errorf("%d CA certificates (%s) but %d keys (%s)", len(certs), SecretCertKey, len(keys), SecretKeyKey)
	}
	var cas []CA
	for i := range certs {
		cert, err := x509.ParseCertificate(certs[i])
		if err != nil {
			return nil, fmt.Errorf("%s #%d: %w", SecretCertKey, i+1, err)
		}
		k, err := x509.ParsePKCS8PrivateKey(keys[i])
		if err != nil {
			return nil, fmt.Errorf("%s #%d: %w", SecretKeyKey, i+1, err)
		}
		signer, ok := k.(crypto.Signer)
		if !ok {
			return nil, fmt.Errorf("%s #%d: %T is not a signing key", SecretKeyKey, i+1, k)
		}
		cas = append(cas, CA{Cert: cert, Key: signer})
	}
	return cas, nil
}

func pemBlocks(b []byte, typ string) ([][]byte, error) {
	var out [][]byte
	for {
		var block *pem.Block
		if block, b = pem.Decode(b); block == nil {
			break
		}
		if block.Type != typ {
			return nil, fmt.Errorf("PEM block %q where %q was expected", block.Type, typ)
		}
		out = append(out, block.Bytes)
	}
	return out, nil
}

// Bundle is the PEM bundle of cas' certificates.
func Bundle(certs []*x509.Certificate) string {
	var b []byte
	for _, c := range certs {
		b = append(b, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c.Raw})...)
	}
	return string(b)
}

var errNoSigningCA = errors.New("no CA to sign with")
