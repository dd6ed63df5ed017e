package integration

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ipledger/ipledger/lab/testenv"
)

// TestTLSBootstrap runs `kubectl ipledger tls bootstrap` against the API
// server: it creates the CA and the three server Secrets components/tls
// mounts, each verifying for the names the components dial; a second run
// changes nothing; --renew re-issues the leaves from the same CA; a Secret
// cert-manager manages is left alone.
func TestTLSBootstrap(t *testing.T) {
	env := testenv.Get(t)
	ctx := context.Background()
	s := &system{env: env, admin: env.CP.KubeconfigPath}
	ns := env.Namespace(t, nil)
	secrets := env.Client.CoreV1().Secrets(ns)
	read := func() map[string]*corev1.Secret {
		t.Helper()
		got := map[string]*corev1.Secret{}
		for _, name := range []string{"ipledger-grpc-ca", "ipledger-watcher-tls", "ipledger-ipam-tls", "ipledger-eipd-tls"} {
			sec, err := secrets.Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			got[name] = sec
		}
		return got
	}

	out := s.ok(t, "tls", "bootstrap", "--ipam-namespace", ns)
	wantAll(t, "first bootstrap", out, "ipledger-grpc-ca: created CA", "ipledger-watcher-tls: created", "ipledger-ipam-tls: created", "ipledger-eipd-tls: created", "expires")
	first := read()
	ca := first["ipledger-grpc-ca"]
	if len(ca.Data["ca.key"]) == 0 || len(ca.Data["ca.crt"]) == 0 {
		t.Fatalf("CA Secret holds %v, want ca.crt and ca.key", keys(ca))
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(ca.Data["ca.crt"]) {
		t.Fatal("ca.crt holds no certificate")
	}
	for server, names := range map[string][]string{
		"watcher": {"ipledger-watcher." + ns + ".svc.cluster.local", "ipledger-watcher." + ns + ".svc"},
		"ipam":    {"ipledger-ipam." + ns + ".svc"},
		"eipd":    {"ipledger-eipd." + ns + ".svc"},
	} {
		sec := first["ipledger-"+server+"-tls"]
		if sec.Type != corev1.SecretTypeTLS || string(sec.Data["ca.crt"]) != string(ca.Data["ca.crt"]) || len(sec.Data["tls.key"]) == 0 {
			t.Errorf("Secret %s: type %s, keys %v; want kubernetes.io/tls with tls.crt, tls.key and the CA's ca.crt", sec.Name, sec.Type, keys(sec))
		}
		if _, ok := sec.Data["ca.key"]; ok {
			t.Errorf("Secret %s carries the CA's key", sec.Name)
		}
		block, _ := pem.Decode(sec.Data["tls.crt"])
		cert, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range names {
			if _, err := cert.Verify(x509.VerifyOptions{Roots: roots, DNSName: n, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err != nil {
				t.Errorf("%s's certificate for %s: %v", server, n, err)
			}
		}
		if days := cert.NotAfter.Sub(cert.NotBefore).Hours() / 24; days < 89 || days > 91 {
			t.Errorf("%s's certificate is valid %.1f days, want 90", server, days)
		}
	}

	out = s.ok(t, "tls", "bootstrap", "--ipam-namespace", ns)
	wantAll(t, "second bootstrap", out, "ipledger-grpc-ca: kept CA", "ipledger-ipam-tls: kept, expires")
	for name, sec := range read() {
		if sec.ResourceVersion != first[name].ResourceVersion {
			t.Errorf("a second bootstrap wrote Secret %s", name)
		}
	}

	out = s.ok(t, "tls", "bootstrap", "--ipam-namespace", ns, "--renew")
	wantAll(t, "renew", out, "ipledger-grpc-ca: kept CA", "ipledger-watcher-tls: renewed", "ipledger-ipam-tls: renewed", "ipledger-eipd-tls: renewed")
	renewed := read()
	if string(renewed["ipledger-grpc-ca"].Data["ca.crt"]) != string(ca.Data["ca.crt"]) {
		t.Error("--renew replaced the CA")
	}
	for _, name := range []string{"ipledger-watcher-tls", "ipledger-ipam-tls", "ipledger-eipd-tls"} {
		if string(renewed[name].Data["tls.crt"]) == string(first[name].Data["tls.crt"]) {
			t.Errorf("--renew kept the certificate of %s", name)
		}
	}

	// A Secret made elsewhere is reported, not overwritten; one cert-manager
	// manages is not even renewed.
	eipd := renewed["ipledger-eipd-tls"].DeepCopy()
	eipd.Data["ca.crt"] = []byte("-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n")
	if _, err := secrets.Update(ctx, eipd, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	wantAll(t, "bootstrap over a foreign Secret", s.fails(t, "tls", "bootstrap", "--ipam-namespace", ns), "ipledger-eipd-tls", "--renew")
	ipam := renewed["ipledger-ipam-tls"].DeepCopy()
	ipam.Annotations = map[string]string{"cert-manager.io/certificate-name": "ipledger-ipam"}
	if _, err := secrets.Update(ctx, ipam, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	out = s.ok(t, "tls", "bootstrap", "--ipam-namespace", ns, "--renew")
	wantAll(t, "renew beside cert-manager", out, "ipledger-ipam-tls: left alone, cert-manager", "ipledger-eipd-tls: renewed")
	if got := read()["ipledger-ipam-tls"]; string(got.Data["tls.crt"]) != string(renewed["ipledger-ipam-tls"].Data["tls.crt"]) {
		t.Error("--renew wrote a Secret cert-manager manages")
	}
}

func keys(s *corev1.Secret) string {
	var k []string
	for key := range s.Data {
		k = append(k, key)
	}
	return strings.Join(k, ",")
}
