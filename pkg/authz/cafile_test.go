package authz

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pem  []byte
}

func newTestCA(t *testing.T, name string) testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	return testCA{cert: cert, key: key, pem: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
}

func (ca testCA) leaf(t *testing.T, dnsName string, eku x509.ExtKeyUsage) *tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: dnsName},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{eku},
		DNSNames: []string{dnsName},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	return &tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

// writeAtomically replaces path the way the kubelet updates a Secret
// volume: a new file renamed over the old one.
func writeAtomically(t *testing.T, path string, data []byte) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// TestDialOptionsReloadTheCAFile proves a client built once by DialOptions
// trusts a rotated CA file on its next connection, and that the reloading
// keeps every check of crypto/tls: the old CA no longer verifies, a wrong
// server name, an untrusted issuer and a client-only certificate are
// refused.
func TestDialOptionsReloadTheCAFile(t *testing.T) {
	const name = "ipledger-watcher.ipledger-system.svc.cluster.local"
	oldCA, newCA, stranger := newTestCA(t, "old"), newTestCA(t, "new"), newTestCA(t, "stranger")

	var serving atomic.Pointer[tls.Certificate]
	serving.Store(oldCA.leaf(t, name, x509.ExtKeyUsageServerAuth))
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(grpc.Creds(credentials.NewTLS(&tls.Config{
		MinVersion:     tls.VersionTLS12,
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return serving.Load(), nil },
	})))
	healthpb.RegisterHealthServer(srv, health.NewServer())
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)

	caFile := filepath.Join(t.TempDir(), "ca.crt")
	writeAtomically(t, caFile, oldCA.pem)
	opts, err := DialOptions("", caFile, false)
	if err != nil {
		t.Fatal(err)
	}
	// check opens a new connection (one per call) as authority and
	// returns the error of one health check.
	check := func(authority string) error {
		t.Helper()
		conn, err := grpc.NewClient("passthrough:///"+lis.Addr().String(), append(opts, grpc.WithAuthority(authority))...)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, err = healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{})
		return err
	}

	if err := check(name); err != nil {
		t.Fatalf("with the CA that signed the server: %v", err)
	}
	if err := check("ipledger-ipam.ipledger-system.svc"); err == nil {
		t.Error("a certificate for another name was accepted")
	}

	// The server rotates to the new CA first: the client's old CA refuses it.
	serving.Store(newCA.leaf(t, name, x509.ExtKeyUsageServerAuth))
	if err := check(name); err == nil {
		t.Fatal("a certificate of a CA not (yet) in the CA file was accepted")
	}
	// Then the CA file changes, as the kubelet updates it; the same dial
	// options trust the new CA on the next connection.
	writeAtomically(t, caFile, newCA.pem)
	if err := check(name); err != nil {
		t.Fatalf("after the CA file was rotated: %v", err)
	}
	if err := check("elsewhere.example"); err == nil {
		t.Error("after rotation, a certificate for another name was accepted")
	}

	serving.Store(stranger.leaf(t, name, x509.ExtKeyUsageServerAuth))
	if err := check(name); err == nil {
		t.Error("a certificate of an untrusted CA was accepted")
	}
	serving.Store(newCA.leaf(t, name, x509.ExtKeyUsageClientAuth))
	if err := check(name); err == nil {
		t.Error("a certificate without the ServerAuth usage was accepted")
	}

	// A broken update keeps the last good CA.
	writeAtomically(t, caFile, []byte("not a certificate"))
	serving.Store(newCA.leaf(t, name, x509.ExtKeyUsageServerAuth))
	if err := check(name); err != nil {
		t.Errorf("a CA file without a certificate dropped the last good CA: %v", err)
	}
}

func TestDialOptionsRefuseACAFileWithoutACertificate(t *testing.T) {
	caFile := filepath.Join(t.TempDir(), "ca.crt")
	if err := os.WriteFile(caFile, []byte("nothing"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := DialOptions("", caFile, false); err == nil {
		t.Error("DialOptions accepted a CA file without a certificate")
	}
	if _, err := DialOptions("", filepath.Join(t.TempDir(), "missing"), false); err == nil {
		t.Error("DialOptions accepted a missing CA file")
	}
}
