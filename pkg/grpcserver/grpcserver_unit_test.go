package grpcserver

import (
	"flag"
	"reflect"
	"testing"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/flowcontrol"

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
	aud := []string{authz.IPAMAudience}
	tests := []struct {
		name    string
		cfg     Config
		wantErr bool
	}{
		{"plaintext", Config{Plaintext: true, TokenAudiences: aud}, false},
		{"tls", Config{TLSCertFile: "c", TLSKeyFile: "k", TokenAudiences: aud}, false},
		{"nothing: TLS is the default and needs files", Config{TokenAudiences: aud}, true},
		{"cert without key", Config{TLSCertFile: "c", TokenAudiences: aud}, true},
		{"both plaintext and TLS", Config{Plaintext: true, TLSCertFile: "c", TLSKeyFile: "k", TokenAudiences: aud}, true},
		{"no audience", Config{Plaintext: true}, true},
		{"signer", Config{TLSSigner: "ipledger.io/grpc-serving", TLSDNSNames: []string{"a.svc"}, TokenAudiences: aud}, false},
		{"signer without names", Config{TLSSigner: "ipledger.io/grpc-serving", TokenAudiences: aud}, true},
		{"signer and files", Config{TLSSigner: "ipledger.io/grpc-serving", TLSDNSNames: []string{"a.svc"}, TLSCertFile: "c", TLSKeyFile: "k", TokenAudiences: aud}, true},
		{"signer and plaintext", Config{TLSSigner: "ipledger.io/grpc-serving", TLSDNSNames: []string{"a.svc"}, Plaintext: true, TokenAudiences: aud}, true},
		{"signer without audience", Config{TLSSigner: "ipledger.io/grpc-serving", TLSDNSNames: []string{"a.svc"}}, true},
		{"negative auth cache TTL", Config{Plaintext: true, TokenAudiences: aud, AuthCacheTTL: -time.Second}, true},
		{"negative stream limit", Config{Plaintext: true, TokenAudiences: aud, MaxStreamsPerIdentity: -1}, true},
		{"negative open-stream limit", Config{Plaintext: true, TokenAudiences: aud, MaxOpenStreams: -1}, true},
		{"negative review QPS", Config{Plaintext: true, TokenAudiences: aud, ReviewQPS: -1}, true},
	}
	for _, tt := range tests {
		if err := tt.cfg.Validate(); (err != nil) != tt.wantErr {
			t.Errorf("%s: Validate() = %v, wantErr %v", tt.name, err, tt.wantErr)
		}
	}
}

// TestFlagDefaults: a server started with no authorization flags accepts
// its own audience and the legacy one, re-authorizes streams at the
// authorization cache's TTL, bounds streams per caller, per connection and
// of the open methods, the header size, and its reviews' rate and number.
func TestFlagDefaults(t *testing.T) {
	var c Config
	c.DefaultAudiences(authz.WatcherAudience)
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	c.Flags(fs, ":9443")
	if err := fs.Parse(nil); err != nil {
		t.Fatal(err)
	}
	want := Config{
		Addr: ":9443", TokenAudiences: []string{authz.WatcherAudience, authz.LegacyAudience},
		AuthCacheTTL: authz.DefaultAllowTTL, MaxStreamsPerIdentity: DefaultMaxStreamsPerIdentity,
		MaxConcurrentStreams: DefaultMaxConcurrentStreams, MaxHeaderListSize: DefaultMaxHeaderListSize, MaxOpenStreams: DefaultMaxOpenStreams,
		ReviewQPS: DefaultReviewQPS, ReviewBurst: DefaultReviewBurst, MaxPendingReviews: authz.DefaultMaxPendingReviews,
	}
	if !reflect.DeepEqual(c, want) {
		t.Errorf("defaults:\n got %+v\nwant %+v", c, want)
	}
	if got := fs.Lookup("grpc-token-audiences").DefValue; got != "ipledger.io/watcher,ipledger.io/grpc" {
		t.Errorf("--help shows the default audiences as %q", got)
	}
	if err := fs.Parse([]string{"--grpc-token-audiences=example.com/x, example.com/y", "--grpc-auth-cache-ttl=2s", "--grpc-max-streams-per-identity=3",
		"--grpc-max-concurrent-streams=7", "--grpc-max-header-list-size=4096", "--grpc-max-open-streams=5",
		"--grpc-auth-kube-api-qps=3", "--grpc-auth-kube-api-burst=6", "--grpc-auth-max-pending-reviews=9"}); err != nil {
		t.Fatal(err)
	}
	want = Config{
		Addr: ":9443", TokenAudiences: []string{"example.com/x", "example.com/y"}, AuthCacheTTL: 2 * time.Second, MaxStreamsPerIdentity: 3,
		MaxConcurrentStreams: 7, MaxHeaderListSize: 4096, MaxOpenStreams: 5, ReviewQPS: 3, ReviewBurst: 6, MaxPendingReviews: 9,
	}
	if !reflect.DeepEqual(c, want) {
		t.Errorf("flags:\n got %+v\nwant %+v", c, want)
	}
	if err := fs.Parse([]string{"--grpc-token-audience=example.com/old"}); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(c.TokenAudiences, []string{"example.com/old"}) {
		t.Errorf("deprecated --grpc-token-audience: %q", c.TokenAudiences)
	}
}

// TestReviewClientHasItsOwnLimiter: the review client's config is a copy
// with its own QPS and burst and no shared limiter; the base is untouched.
func TestReviewClientHasItsOwnLimiter(t *testing.T) {
	base := &rest.Config{Host: "https://127.0.0.1:1", QPS: 50, Burst: 100}
	base.RateLimiter = flowcontrol.NewTokenBucketRateLimiter(50, 100)
	c := Config{ReviewQPS: 2, ReviewBurst: 3}
	client, err := c.ReviewClient(base)
	if err != nil {
		t.Fatal(err)
	}
	rc, ok := client.AuthenticationV1().RESTClient().(*rest.RESTClient)
	if !ok {
		t.Fatalf("unexpected REST client %T", client.AuthenticationV1().RESTClient())
	}
	if rc.GetRateLimiter() == base.RateLimiter {
		t.Fatal("the review client shares the component's rate limiter")
	}
	if got := rc.GetRateLimiter().QPS(); got != 2 {
		t.Errorf("review client QPS %g, want 2", got)
	}
	if base.QPS != 50 || base.Burst != 100 {
		t.Errorf("base config changed: %g/%d", base.QPS, base.Burst)
	}
}
