package controlplane

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"os"
	"path/filepath"
	"time"

	"k8s.io/client-go/rest"
)

// The certificate authorities of the loopback control plane (and of the
// real node's API server, lab/cluster) besides its serving certificate:
//   - ClientCAName signs the client certificates people authenticate with
//     (--client-ca-file), so a test can act as a user who is not a
//     ServiceAccount and has no token (UserConfig);
//   - FrontProxyCAName signs the one client certificate, CN
//     FrontProxyClientName, that kube-apiserver presents to aggregated API
//     servers with the caller's identity in X-Remote-* headers
//     (--requestheader-client-ca-file, --proxy-client-cert-file); the API
//     server publishes it in kube-system/extension-apiserver-authentication.
const (
	ClientCAName         = "client-ca"
	FrontProxyCAName     = "front-proxy-ca"
	FrontProxyClientName = "front-proxy-client"
)

// Authority is a CA certificate and its key, kept on disk in Dir/pki.
type Authority struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	// certFile is the PEM file of cert (what kube-apiserver reads).
	certFile string
}

// loadOrCreateAuthority reads Dir/pki/name.{crt,key}, or makes them: a
// restarted API server keeps trusting what the first one trusted.
func loadOrCreateAuthority(dir, name string) (*Authority, error) {
	certFile, keyFile := filepath.Join(dir, name+".crt"), filepath.Join(dir, name+".key")
	if certPEM, err := os.ReadFile(certFile); err == nil {
		keyPEM, err := os.ReadFile(keyFile)
		if err != nil {
			return nil, err
		}
		return parseAuthority(certFile, certPEM, keyPEM)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(), Subject: pkix.Name{CommonName: "ipledger-local-" + name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(10 * 365 * 24 * time.Hour),
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature, BasicConstraintsValid: true, IsCA: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, err
	}
	certPEM, keyPEM, err := encodePair(der, key)
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(certFile, certPEM, 0o600); err != nil {
		return nil, err
	}
	if err := os.WriteFile(keyFile, keyPEM, 0o600); err != nil {
		return nil, err
	}
	return parseAuthority(certFile, certPEM, keyPEM)
}

func parseAuthority(certFile string, certPEM, keyPEM []byte) (*Authority, error) {
	cb, _ := pem.Decode(certPEM)
	kb, _ := pem.Decode(keyPEM)
	if cb == nil || kb == nil {
		return nil, fmt.Errorf("%s: not a PEM certificate and key", certFile)
	}
	cert, err := x509.ParseCertificate(cb.Bytes)
	if err != nil {
		return nil, err
	}
	key, err := x509.ParseECPrivateKey(kb.Bytes)
	if err != nil {
		return nil, err
	}
	return &Authority{cert: cert, key: key, certFile: certFile}, nil
}

// clientCert signs a client certificate for user (CommonName) in groups
// (Organization) and returns its PEM certificate and key.
func (a *Authority) clientCert(user string, groups ...string) (certPEM, keyPEM []byte, err error) {
	if user == "" {
		return nil, nil, errors.New("a client certificate needs a user name")
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(), Subject: pkix.Name{CommonName: user, Organization: groups},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(365 * 24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, a.cert, &key.PublicKey, a.key)
	if err != nil {
		return nil, nil, err
	}
	return encodePair(der, key)
}

func encodePair(der []byte, key *ecdsa.PrivateKey) (certPEM, keyPEM []byte, err error) {
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), nil
}

func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		return big.NewInt(time.Now().UnixNano())
	}
	return n
}

// ClientAuthority is the client CA of the API server whose files are in
// dir (FrontProxy made it there): it signs the certificates of people.
func ClientAuthority(dir string) (*Authority, error) {
	return loadOrCreateAuthority(filepath.Join(dir, "pki"), ClientCAName)
}

// FrontProxy makes, in dir/pki, the CAs and the front-proxy client
// certificate (or reads them: a restarted API server trusts what the first
// one did) and returns the kube-apiserver flags that use them: client
// certificates of people (--client-ca-file, ClientAuthority), and the
// aggregation layer's request-header authentication. Both the loopback
// control plane and the real node of lab/cluster run their API server
// with them.
//
// Here, no --enable-aggregator-routing: EndpointSlices may not name
// loopback addresses, and this control plane runs no kube-proxy, so an
// aggregated API server running on this machine is reached through a
// Service of type ExternalName (e.g. localhost), which the aggregator
// resolves itself. The node runs kube-proxy: its aggregator reaches a
// Service's ClusterIP.
func FrontProxy(dir string) ([]string, *Authority, error) {
	pki := filepath.Join(dir, "pki")
	clients, err := ClientAuthority(dir)
	if err != nil {
		return nil, nil, err
	}
	proxyCA, err := loadOrCreateAuthority(pki, FrontProxyCAName)
	if err != nil {
		return nil, nil, err
	}
	certFile, keyFile := filepath.Join(pki, FrontProxyClientName+".crt"), filepath.Join(pki, FrontProxyClientName+".key")
	if _, err := os.Stat(certFile); err != nil {
		certPEM, keyPEM, err := proxyCA.clientCert(FrontProxyClientName)
		if err != nil {
			return nil, nil, err
		}
		if err := os.WriteFile(certFile, certPEM, 0o600); err != nil {
			return nil, nil, err
		}
		if err := os.WriteFile(keyFile, keyPEM, 0o600); err != nil {
			return nil, nil, err
		}
	}
	return []string{
		"--client-ca-file=" + clients.certFile,
		"--requestheader-client-ca-file=" + proxyCA.certFile,
		"--requestheader-allowed-names=" + FrontProxyClientName,
		"--requestheader-username-headers=X-Remote-User",
		"--requestheader-uid-headers=X-Remote-Uid",
		"--requestheader-group-headers=X-Remote-Group",
		"--requestheader-extra-headers-prefix=X-Remote-Extra-",
		"--proxy-client-cert-file=" + certFile,
		"--proxy-client-key-file=" + keyFile,
	}, clients, nil
}

// UserConfig returns a client configuration for user in groups,
// authenticated by a client certificate the control plane's client CA signs:
// a person with an ordinary kubeconfig, not a ServiceAccount, and no token.
func (cp *ControlPlane) UserConfig(user string, groups ...string) (*rest.Config, error) {
	certPEM, keyPEM, err := cp.clientCA.clientCert(user, groups...)
	if err != nil {
		return nil, err
	}
	cfg := cp.RESTConfig()
	cfg.BearerToken = ""
	cfg.CertData, cfg.KeyData = certPEM, keyPEM
	return cfg, nil
}

// UserKubeconfig writes a kubeconfig for UserConfig(user, groups...) in
// dir and returns its path, for kubectl.
func (cp *ControlPlane) UserKubeconfig(dir, user string, groups ...string) (string, error) {
	path := filepath.Join(dir, "kubeconfig-"+user)
	return path, cp.clientCA.WriteKubeconfig(path, cp.APIServerURL, "", user, groups...)
}

// WriteKubeconfig writes to path a kubeconfig for user in groups at the API
// server server, authenticated by a client certificate a signs: a person
// with an ordinary kubeconfig, not a ServiceAccount, and no token. It
// trusts the server's certificate with caFile, or, when empty, does not
// verify it.
func (a *Authority) WriteKubeconfig(path, server, caFile, user string, groups ...string) error {
	certPEM, keyPEM, err := a.clientCert(user, groups...)
	if err != nil {
		return err
	}
	kc := kubeconfig(server, caFile, user, "client-certificate-data: "+b64(certPEM)+"\n    client-key-data: "+b64(keyPEM))
	return os.WriteFile(path, []byte(kc), 0o600)
}
