package grpcserver

import (
	"flag"
	"testing"
	"time"

	"github.com/ipledger/ipledger/pkg/authz"
)

func TestCamelKey(t *testing.T) {
	tests := map[string]string{
		"grpc.method":   "grpcMethod",
		"peer.address":  "peerAddress",
		"grpc.time_ms":  "grpcTimeMs",
		"grpc.code":     "grpcCode",
		"duration":      "duration",
		".leading":      "leading",
		"already_Camel": "alreadyCamel",
	}
	for in, want := range tests {
		if got := camelKey(in); got != want {
			t.Errorf("camelKey(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestConfigValidate(t *testing.T) {
	tests := []struct {
		name    string
		cfg     Config
		wantErr bool
	}{
		{"plaintext", Config{Plaintext: true}, false},
		{"tls", Config{TLSCertFile: "c", TLSKeyFile: "k"}, false},
		{"nothing: TLS is the default and needs files", Config{}, true},
		{"cert without key", Config{TLSCertFile: "c"}, true},
		{"both plaintext and TLS", Config{Plaintext: true, TLSCertFile: "c", TLSKeyFile: "k"}, true},
		{"negative auth cache TTL", Config{Plaintext: true, AuthCacheTTL: -time.Second}, true},
		{"negative stream limit", Config{Plaintext: true, MaxStreamsPerIdentity: -1}, true},
	}
	for _, tt := range tests {
		if err := tt.cfg.Validate(); (err != nil) != tt.wantErr {
			t.Errorf("%s: Validate() = %v, wantErr %v", tt.name, err, tt.wantErr)
		}
	}
}

// TestFlagDefaults: a server started with no authorization flags refuses
// tokens without ipledger's audience, re-authorizes streams at the
// authorization cache's TTL and bounds streams per caller.
func TestFlagDefaults(t *testing.T) {
	var c Config
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	c.Flags(fs, ":9443")
	if err := fs.Parse(nil); err != nil {
		t.Fatal(err)
	}
	if c.TokenAudience != authz.Audience || c.AuthCacheTTL != authz.DefaultAllowTTL || c.MaxStreamsPerIdentity != DefaultMaxStreamsPerIdentity {
		t.Errorf("defaults: audience %q, cache TTL %s, streams per identity %d", c.TokenAudience, c.AuthCacheTTL, c.MaxStreamsPerIdentity)
	}
	if err := fs.Parse([]string{"--grpc-token-audience=example.com/x", "--grpc-auth-cache-ttl=2s", "--grpc-max-streams-per-identity=3"}); err != nil {
		t.Fatal(err)
	}
	if c.TokenAudience != "example.com/x" || c.AuthCacheTTL != 2*time.Second || c.MaxStreamsPerIdentity != 3 {
		t.Errorf("flags: audience %q, cache TTL %s, streams per identity %d", c.TokenAudience, c.AuthCacheTTL, c.MaxStreamsPerIdentity)
	}
}
