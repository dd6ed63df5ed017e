package grpcserver

import "testing"

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
	}
	for _, tt := range tests {
		if err := tt.cfg.Validate(); (err != nil) != tt.wantErr {
			t.Errorf("%s: Validate() = %v, wantErr %v", tt.name, err, tt.wantErr)
		}
	}
}
