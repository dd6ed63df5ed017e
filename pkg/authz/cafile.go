package authz

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"os"
	"sync"
	"time"

	"google.golang.org/grpc/credentials"
)

// ReloadingCA returns TLS transport credentials that verify the server
// against the CA bundle in caFile as it is at each handshake: the file is
// stat'ed on every new connection and read again when its identity, size or
// modification time changes (the kubelet swaps a Secret's files by
// replacing a symlink), and at least every maxCAAge. A rotated CA is
// therefore trusted by the next connection without a restart.
//
// Verification is crypto/tls's own, unchanged: each handshake runs with a
// fresh clone of base whose RootCAs is the current pool, so the chain, the
// server name (the dial target's host, or base.ServerName) and the
// ServerAuth extended key usage are checked exactly as with a fixed pool.
// Nothing is skipped and no callback re-implements verification.
//
// The file must hold a PEM certificate now; later an unreadable or empty
// file keeps the last good pool (a half-written update must not cut every
// connection).
func ReloadingCA(caFile string, base *tls.Config) (credentials.TransportCredentials, error) {
	r := &caReloader{path: caFile}
	if _, err := r.current(); err != nil {
		return nil, err
	}
	if base == nil {
		base = &tls.Config{MinVersion: tls.VersionTLS12}
	}
	return &reloadingTLS{base: base.Clone(), ca: r}, nil
}

// maxCAAge bounds how long an unchanged-looking file is trusted without a
// read, so an in-place rewrite within one mtime tick is still picked up.
const maxCAAge = time.Minute

type caReloader struct {
	path string

	mu     sync.Mutex
	pool   *x509.CertPool
	info   os.FileInfo
	readAt time.Time
}

// current is the pool of the CA file, read again if it changed; when the
// file cannot be read or holds no certificate, the last good pool (an
// error only before there is one).
func (r *caReloader) current() (*x509.CertPool, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.reloadIfChanged(); err != nil && r.pool == nil {
		return nil, err
	}
	return r.pool, nil
}

// reloadIfChanged reads the file into r.pool unless it looks unchanged
// since the last read (within maxCAAge); on error r.pool is untouched.
func (r *caReloader) reloadIfChanged() error {
	info, err := os.Stat(r.path)
	if err != nil {
		return fmt.Errorf("read CA file: %w", err)
	}
	if r.pool != nil && os.SameFile(info, r.info) && info.Size() == r.info.Size() &&
		info.ModTime().Equal(r.info.ModTime()) && time.Since(r.readAt) < maxCAAge {
		return nil
	}
	pem, err := os.ReadFile(r.path)
	if err != nil {
		return fmt.Errorf("read CA file: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return fmt.Errorf("CA file %s holds no PEM certificate", r.path)
	}
	r.pool, r.info, r.readAt = pool, info, time.Now()
	return nil
}

// reloadingTLS is credentials.NewTLS with RootCAs read per handshake.
type reloadingTLS struct {
	base *tls.Config
	ca   *caReloader
}

func (c *reloadingTLS) ClientHandshake(ctx context.Context, authority string, conn net.Conn) (net.Conn, credentials.AuthInfo, error) {
	pool, err := c.ca.current()
	if err != nil {
		return nil, nil, err
	}
	cfg := c.base.Clone()
	cfg.RootCAs = pool
	return credentials.NewTLS(cfg).ClientHandshake(ctx, authority, conn)
}

func (c *reloadingTLS) ServerHandshake(net.Conn) (net.Conn, credentials.AuthInfo, error) {
	return nil, nil, fmt.Errorf("authz: reloading-CA credentials are for clients only")
}

func (c *reloadingTLS) Info() credentials.ProtocolInfo { return credentials.NewTLS(c.base).Info() }

func (c *reloadingTLS) Clone() credentials.TransportCredentials {
	return &reloadingTLS{base: c.base.Clone(), ca: c.ca}
}

// OverrideServerName implements the deprecated method of the interface as
// credentials.NewTLS does.
func (c *reloadingTLS) OverrideServerName(name string) error {
	c.base.ServerName = name
	return nil
}
