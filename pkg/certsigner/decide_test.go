package certsigner

import (
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"net"
	"strings"
	"testing"
	"time"

	certv1 "k8s.io/api/certificates/v1"
)

func csrPEM(t *testing.T, key any, tmpl x509.CertificateRequest) []byte {
	t.Helper()
	der, err := x509.CreateCertificateRequest(rand.Reader, &tmpl, key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der})
}

func TestReview(t *testing.T) {
	p256, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	_, edKey, _ := ed25519.GenerateKey(rand.Reader)
	ipam := DNSNames("ipam", "ipledger-system", "cluster.local")
	const ipamSA = "system:serviceaccount:ipledger-system:ipledger-ipam"
	serving := []certv1.KeyUsage{certv1.UsageDigitalSignature, certv1.UsageServerAuth}
	good := csrPEM(t, p256, x509.CertificateRequest{Subject: pkix.Name{CommonName: ipam[0]}, DNSNames: ipam})
	tampered := append([]byte(nil), good...)
	block, _ := pem.Decode(tampered)
	block.Bytes[len(block.Bytes)-3] ^= 0xff
	tampered = pem.EncodeToMemory(block)
	for _, c := range []struct {
		name    string
		spec    certv1.CertificateSigningRequestSpec
		refusal string // "" signs
	}{
		{"ipam for its own names", certv1.CertificateSigningRequestSpec{Username: ipamSA, Request: good, Usages: serving}, ""},
		{"names in another order", certv1.CertificateSigningRequestSpec{Username: ipamSA, Usages: serving,
			Request: csrPEM(t, p256, x509.CertificateRequest{DNSNames: []string{ipam[1], ipam[0]}})}, ""},
		{"endpoints serves nothing", certv1.CertificateSigningRequestSpec{Username: "system:serviceaccount:ipledger-system:ipledger-endpoints", Request: good, Usages: serving},
			"not one of ipledger's gRPC servers"},
		{"a ServiceAccount of the same name elsewhere", certv1.CertificateSigningRequestSpec{Username: "system:serviceaccount:shop:ipledger-ipam", Request: good, Usages: serving},
			"not one of ipledger's gRPC servers"},
		{"ipam asking for the watcher's names", certv1.CertificateSigningRequestSpec{Username: "system:serviceaccount:ipledger-system:ipledger-watcher", Request: good, Usages: serving},
			"may ask for exactly"},
		{"one name more", certv1.CertificateSigningRequestSpec{Username: ipamSA, Usages: serving,
			Request: csrPEM(t, p256, x509.CertificateRequest{DNSNames: append([]string{"kubernetes.default.svc"}, ipam...)})}, "may ask for exactly"},
		{"an IP address", certv1.CertificateSigningRequestSpec{Username: ipamSA, Usages: serving,
			Request: csrPEM(t, p256, x509.CertificateRequest{DNSNames: ipam, IPAddresses: []net.IP{net.IPv4(10, 0, 0, 1)}})}, "IP, email or URI"},
		{"a foreign common name", certv1.CertificateSigningRequestSpec{Username: ipamSA, Usages: serving,
			Request: csrPEM(t, p256, x509.CertificateRequest{Subject: pkix.Name{CommonName: "admin"}, DNSNames: ipam})}, "common name"},
		{"client auth", certv1.CertificateSigningRequestSpec{Username: ipamSA, Request: good, Usages: append(serving, certv1.UsageClientAuth)}, "usage \"client auth\""},
		{"no server auth", certv1.CertificateSigningRequestSpec{Username: ipamSA, Request: good, Usages: []certv1.KeyUsage{certv1.UsageDigitalSignature}}, "lack"},
		{"an Ed25519 key", certv1.CertificateSigningRequestSpec{Username: ipamSA, Usages: serving,
			Request: csrPEM(t, edKey, x509.CertificateRequest{DNSNames: ipam})}, "want ECDSA"},
		{"a broken signature", certv1.CertificateSigningRequestSpec{Username: ipamSA, Request: tampered, Usages: serving}, "signature"},
		{"no PEM", certv1.CertificateSigningRequestSpec{Username: ipamSA, Request: []byte("hello"), Usages: serving}, "no PEM"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := DefaultPolicy("ipledger-system", "cluster.local").Review(c.spec)
			switch {
			case c.refusal == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case c.refusal != "" && err == nil:
				t.Fatalf("signed, want a refusal saying %q", c.refusal)
			case c.refusal != "" && !strings.Contains(err.Error(), c.refusal):
				t.Fatalf("refusal %q does not say %q", err, c.refusal)
			}
		})
	}
}

func TestLeafWindow(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	secs := func(s int32) *int32 { return &s }
	for _, c := range []struct {
		name      string
		requested *int32
		caEnd     time.Time
		want      time.Duration
	}{
		{"nothing asked: the cap", nil, now.Add(1000 * time.Hour), 168 * time.Hour},
		{"less than the cap", secs(600), now.Add(1000 * time.Hour), 10 * time.Minute},
		{"more than the cap", secs(1 << 30), now.Add(1000 * time.Hour), 168 * time.Hour},
		{"never beyond the CA", nil, now.Add(time.Hour), time.Hour},
	} {
		nb, na := LeafWindow(now, c.requested, 168*time.Hour, c.caEnd)
		if !nb.Equal(now.Add(-Backdate)) || na.Sub(now) != c.want {
			t.Errorf("%s: %s..%s, want %s..%s after now", c.name, nb.Sub(now), na.Sub(now), -Backdate, c.want)
		}
	}
}

func TestPlanCAs(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	ca := func(name string, madeAgo, lifetime time.Duration) *x509.Certificate {
		nb := now.Add(-madeAgo - Backdate)
		return &x509.Certificate{Subject: pkix.Name{CommonName: name}, NotBefore: nb, NotAfter: nb.Add(Backdate + lifetime)}
	}
	const year, prop = 365 * 24 * time.Hour, 3 * time.Minute
	old := ca("old", 300*24*time.Hour, year) // a sixth of its life left
	young := ca("young", 30*24*time.Hour, year)
	fresh := ca("fresh", time.Minute, year) // in the bundle for less than prop
	ended := ca("ended", 2*year, year)
	for _, c := range []struct {
		name     string
		cas      []*x509.Certificate
		live     []string
		generate bool
		signing  string
	}{
		{"none: make one", nil, nil, true, ""},
		{"only ended: make one, drop it", []*x509.Certificate{ended}, nil, true, ""},
		{"one with most of its life", []*x509.Certificate{young}, []string{"young"}, false, "young"},
		{"a third of its life left: make the next", []*x509.Certificate{old}, []string{"old"}, true, "old"},
		{"just made, alone: it signs at once", []*x509.Certificate{fresh}, []string{"fresh"}, false, "fresh"},
		{"just made beside the old: the old signs until the bundle spread", []*x509.Certificate{old, fresh}, []string{"fresh", "old"}, false, "old"},
		{"the new one spread: it signs, the old stays trusted", []*x509.Certificate{young, old}, []string{"young", "old"}, false, "young"},
		{"the ended one is dropped", []*x509.Certificate{ended, young}, []string{"young"}, false, "young"},
	} {
		p := PlanCAs(c.cas, now, prop)
		var live []string
		for _, l := range p.Live {
			live = append(live, l.Subject.CommonName)
		}
		signing := ""
		if len(p.Live) > 0 {
			signing = p.Live[p.Signing].Subject.CommonName
		}
		if strings.Join(live, ",") != strings.Join(c.live, ",") || p.Generate != c.generate || signing != c.signing {
			t.Errorf("%s: live %v generate %v signing %q, want %v %v %q", c.name, live, p.Generate, signing, c.live, c.generate, c.signing)
		}
	}
}
