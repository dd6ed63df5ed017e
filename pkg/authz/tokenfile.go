package authz

import (
	"context"
	"crypto/tls"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
)

// TokenFromFile returns client credentials that send the bearer token in
// path (a projected ServiceAccount token) on every RPC, re-reading the file
// whenever it changes (the kubelet rotates it by swapping a symlink).
//
// The credentials require transport security: gRPC refuses to send them on
// a plaintext connection, because anyone on the path could replay the
// token. For a deliberately plaintext connection (--*-plaintext, local
// development) use PlaintextTokenFromFile, or let DialOptions pick.
func TokenFromFile(path string) credentials.PerRPCCredentials {
	return &fileToken{path: path, secure: true}
}

// PlaintextTokenFromFile is TokenFromFile for a connection the operator
// explicitly asked to be plaintext; it does not require transport security.
func PlaintextTokenFromFile(path string) credentials.PerRPCCredentials {
	return &fileToken{path: path}
}

// DialOptions returns the transport and per-RPC credentials of a client of
// an ipledger gRPC server, consistent with each other: TLS (verified with
// caFile, re-read when it changes, or the system roots when it is empty)
// unless plaintext, and the token from tokenFile when it is not empty.
func DialOptions(tokenFile, caFile string, plaintext bool) ([]grpc.DialOption, error) {
	var opts []grpc.DialOption
	if plaintext {
		if caFile != "" {
			return nil, fmt.Errorf("a CA file (%s) makes no sense with plaintext: drop one of them", caFile)
		}
		opts = append(opts, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if tokenFile != "" {
			opts = append(opts, grpc.WithPerRPCCredentials(PlaintextTokenFromFile(tokenFile)))
		}
		return opts, nil
	}
	tlsCfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if caFile == "" {
		opts = append(opts, grpc.WithTransportCredentials(credentials.NewTLS(tlsCfg)))
	} else {
		// Re-read on change: a rotated CA (kubectl ipledger tls bootstrap,
		// cert-manager) is trusted by the next connection.
		creds, err := ReloadingCA(caFile, tlsCfg)
		if err != nil {
			return nil, err
		}
		opts = append(opts, grpc.WithTransportCredentials(creds))
	}
	if tokenFile != "" {
		opts = append(opts, grpc.WithPerRPCCredentials(TokenFromFile(tokenFile)))
	}
	return opts, nil
}

// fileToken caches the token and re-reads the file when its identity,
// size or modification time changes. It also re-reads at least every
// maxTokenAge so an in-place rewrite within one mtime tick is picked up.
type fileToken struct {
	path   string
	secure bool

	mu     sync.Mutex
	token  string
	info   os.FileInfo
	readAt time.Time
}

const maxTokenAge = time.Minute

func (f *fileToken) GetRequestMetadata(ctx context.Context, _ ...string) (map[string]string, error) {
	token, err := f.current()
	if err != nil {
		return nil, err
	}
	return map[string]string{"authorization": "Bearer " + token}, nil
}

func (f *fileToken) RequireTransportSecurity() bool { return f.secure }

func (f *fileToken) current() (string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	info, err := os.Stat(f.path)
	if err != nil {
		if f.token != "" {
			// Keep using the last token while the file is being swapped.
			return f.token, nil
		}
		return "", fmt.Errorf("bearer token file: %w", err)
	}
	if f.token != "" && f.info != nil && os.SameFile(info, f.info) && info.Size() == f.info.Size() &&
		info.ModTime().Equal(f.info.ModTime()) && time.Since(f.readAt) < maxTokenAge {
		return f.token, nil
	}
	b, err := os.ReadFile(f.path)
	if err != nil {
		if f.token != "" {
			return f.token, nil
		}
		return "", fmt.Errorf("bearer token file: %w", err)
	}
	token := strings.TrimSpace(string(b))
	if token == "" {
		if f.token != "" {
			return f.token, nil
		}
		return "", fmt.Errorf("bearer token file %s is empty", f.path)
	}
	f.token, f.info, f.readAt = token, info, time.Now()
	return token, nil
}
