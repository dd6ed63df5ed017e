package cluster_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"os"
	"path/filepath"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ipledger/ipledger/pkg/controlplane"
)

// TestOverlaysRollOut applies what users apply — components/high-availability
// on the base, then overlays/production with TLS from a Secret made as
// components/tls describes (a certificate with only the .svc names it used
// to list kept every consumer from the watcher) — on top of the e2e
// install, and checks every Deployment rolls out with its replicas, the
// consumers stream (over TLS in production) and Services get addresses. The
// e2e install is put back at the end.
func TestOverlaysRollOut(t *testing.T) {
	e := get(t)
	root, err := controlplane.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	ca := e.tlsSecret(t)
	t.Cleanup(func() {
		e.apply(t, filepath.Join(root, "deploy", "kustomize", "overlays", "e2e"))
		for _, d := range deployments {
			e.rolledOut(t, d)
		}
	})
	for _, tc := range []struct {
		name string
		ca   string // the CA the test trusts reading ipam's ledger; empty for plaintext
	}{
		{"high-availability", ""},
		{"production", ca},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir, err := filepath.Abs(filepath.Join("testdata", tc.name))
			if err != nil {
				t.Fatal(err)
			}
			e.apply(t, dir)
			for _, d := range deployments {
				e.rolledOut(t, d)
				if got := len(e.pods(t, d)); got != highAvailability[d] {
					t.Errorf("%s runs %d pods, want %d", d, got, highAvailability[d])
				}
			}
			e.subscribersPerWatcher(t)
			l := e.startLoad(t, 50*time.Millisecond, 20)
			l.waitCreated(t, 20)
			e.ips(t, l.ns, l.stop(t), 2*time.Minute)
			e.consistent(t, tc.ca)
		})
	}
}

// apply applies a kustomization as TestMain does (server-side), taking
// over the fields `kubectl scale` set.
func (e *env) apply(t testing.TB, dir string) {
	t.Helper()
	e.kubectl(t, "apply", "--server-side", "--force-conflicts", "-k", dir)
}

// tlsSecret creates the Secret components/tls expects — ipledger-grpc-tls
// of type kubernetes.io/tls with ca.crt, for the names its comment lists —
// from a CA of the test's own, and returns that CA's PEM file.
func (e *env) tlsSecret(t testing.TB) string {
	t.Helper()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "ipledger-test-ca"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "ipledger"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames: []string{
			"ipledger-watcher.ipledger-system.svc.cluster.local",
			"ipledger-watcher.ipledger-system.svc",
			"ipledger-ipam.ipledger-system.svc",
			"ipledger-eipd.ipledger-system.svc",
		},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, caTmpl, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	caPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER})
	secret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "ipledger-grpc-tls", Namespace: systemNS},
		Type:       corev1.SecretTypeTLS,
		Data: map[string][]byte{
			"tls.crt": pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
			"tls.key": pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}),
			"ca.crt":  caPEM,
		},
	}
	secrets := e.client.CoreV1().Secrets(systemNS)
	if _, err := secrets.Create(context.Background(), secret, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := secrets.Delete(context.Background(), secret.Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			t.Error(err)
		}
	})
	path := filepath.Join(t.TempDir(), "ca.crt")
	if err := os.WriteFile(path, caPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}
