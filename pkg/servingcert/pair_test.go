package servingcert

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"strings"
	"testing"
	"time"
)

// TestPair: the issued certificate is taken only for the key the server
// asked with, and only as PEM.
func TestPair(t *testing.T) {
	mine, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	other, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	issue := func(pub *ecdsa.PublicKey) []byte {
		tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "x"},
			NotBefore: time.Now(), NotAfter: time.Now().Add(time.Hour)}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, pub, other)
		if err != nil {
			t.Fatal(err)
		}
		return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	}
	for _, c := range []struct {
		name  string
		chain []byte
		err   string
	}{
		{"for my key", issue(&mine.PublicKey), ""},
		{"for another key", issue(&other.PublicKey), "not for the key"},
		{"not PEM", []byte("garbage"), "no PEM CERTIFICATE"},
	} {
		cert, err := Pair(c.chain, mine)
		switch {
		case c.err == "" && (err != nil || cert.Leaf == nil || cert.PrivateKey != mine):
			t.Errorf("%s: %v", c.name, err)
		case c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err)):
			t.Errorf("%s: error %v, want one saying %q", c.name, err, c.err)
		}
	}
}
