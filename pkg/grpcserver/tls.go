package grpcserver

import (
	"crypto/tls"
	"fmt"
	"os"
	"sync"
	"time"
)

// keypairReloader serves the certificate in certFile/keyFile and loads it
// again when either file changes, so a rotated certificate is used without
// a restart. A broken new pair keeps the previous one.
type keypairReloader struct {
	certFile, keyFile string

	mu        sync.Mutex
	cert      *tls.Certificate
	certMod   time.Time
	keyMod    time.Time
	checkedAt time.Time
}

// reloadCheckInterval bounds how often a handshake stats the files.
const reloadCheckInterval = 5 * time.Second

func newKeypairReloader(certFile, keyFile string) (*keypairReloader, error) {
	k := &keypairReloader{certFile: certFile, keyFile: keyFile}
	if err := k.reload(); err != nil {
		return nil, err
	}
	return k, nil
}

func (k *keypairReloader) reload() error {
	ci, err := os.Stat(k.certFile)
	if err != nil {
		return fmt.Errorf("TLS certificate (--grpc-tls-cert-file): %w", err)
	}
	ki, err := os.Stat(k.keyFile)
	if err != nil {
		return fmt.Errorf("TLS key (--grpc-tls-key-file): %w", err)
	}
	cert, err := tls.LoadX509KeyPair(k.certFile, k.keyFile)
	if err != nil {
		return fmt.Errorf("TLS key pair %s, %s: %w", k.certFile, k.keyFile, err)
	}
	k.cert, k.certMod, k.keyMod = &cert, ci.ModTime(), ki.ModTime()
	return nil
}

func (k *keypairReloader) getCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	return k.current(), nil
}

// notAfter is the end of the serving certificate's validity, checking the
// files first as a handshake does, so a scrape sees a renewed certificate
// even while no client connects.
func (k *keypairReloader) notAfter() time.Time {
	if leaf := k.current().Leaf; leaf != nil {
		return leaf.NotAfter
	}
	return time.Time{}
}

func (k *keypairReloader) current() *tls.Certificate {
	k.mu.Lock()
	defer k.mu.Unlock()
	if time.Since(k.checkedAt) >= reloadCheckInterval {
		k.checkedAt = time.Now()
		ci, cerr := os.Stat(k.certFile)
		ki, kerr := os.Stat(k.keyFile)
		if cerr == nil && kerr == nil && (!ci.ModTime().Equal(k.certMod) || !ki.ModTime().Equal(k.keyMod)) {
			_ = k.reload() // on error keep serving the previous pair
		}
	}
	return k.cert
}

// serverTLSConfig serves the certificate getCert gives at each handshake.
func serverTLSConfig(getCert func(*tls.ClientHelloInfo) (*tls.Certificate, error)) *tls.Config {
	return &tls.Config{
		MinVersion:     tls.VersionTLS12,
		GetCertificate: getCert,
		NextProtos:     []string{"h2"},
	}
}
