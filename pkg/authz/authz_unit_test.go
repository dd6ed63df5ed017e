package authz

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

func TestIsOpen(t *testing.T) {
	tests := []struct {
		method string
		want   bool
	}{
		{"/grpc.health.v1.Health/Check", true},
		{"/grpc.health.v1.Health/Watch", true},
		{"/grpc.reflection.v1.ServerReflection/ServerReflectionInfo", true},
		{"/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo", true},
		{"/ipledger.ipam.v1.IPAMService/ListPools", false},
		{"/grpc.health.v1.HealthX/Check", false},
		{"", false},
	}
	for _, tt := range tests {
		if got := IsOpen(tt.method); got != tt.want {
			t.Errorf("IsOpen(%q) = %v, want %v", tt.method, got, tt.want)
		}
	}
}

func TestBearerToken(t *testing.T) {
	tests := []struct {
		name   string
		md     metadata.MD
		want   string
		wantOK bool
	}{
		{"none", nil, "", false},
		{"bearer", metadata.Pairs("authorization", "Bearer abc"), "abc", true},
		{"lowercase scheme", metadata.Pairs("authorization", "bearer abc"), "abc", true},
		{"basic", metadata.Pairs("authorization", "Basic abc"), "", false},
		{"no scheme", metadata.Pairs("authorization", "abc"), "", false},
		{"empty token", metadata.Pairs("authorization", "Bearer  "), "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			if tt.md != nil {
				ctx = metadata.NewIncomingContext(ctx, tt.md)
			}
			got, err := bearerToken(ctx)
			if (err == nil) != tt.wantOK || got != tt.want {
				t.Fatalf("bearerToken = %q, %v; want %q, ok=%v", got, err, tt.want, tt.wantOK)
			}
			if err != nil && status.Code(err) != codes.Unauthenticated {
				t.Fatalf("code = %v, want Unauthenticated", status.Code(err))
			}
		})
	}
}

// fakeReviews answers TokenReviews ("good" authenticates as alice) and
// SubjectAccessReviews (alice may list allocations) and counts them.
func fakeReviews(trs, sars *atomic.Int32) *fake.Clientset {
	c := fake.NewClientset()
	c.PrependReactor("create", "tokenreviews", func(a k8stesting.Action) (bool, runtime.Object, error) {
		trs.Add(1)
		tr := a.(k8stesting.CreateAction).GetObject().(*authenticationv1.TokenReview)
		switch tr.Spec.Token {
		case "good": // the API server answers with the audiences asked for that the token carries
			tr.Status = authenticationv1.TokenReviewStatus{Authenticated: true, User: authenticationv1.UserInfo{Username: "alice"}, Audiences: tr.Spec.Audiences}
		case "no-audience": // an authenticator that ignores audiences
			tr.Status = authenticationv1.TokenReviewStatus{Authenticated: true, User: authenticationv1.UserInfo{Username: "alice"}}
		default:
			tr.Status = authenticationv1.TokenReviewStatus{Error: "invalid bearer token"}
		}
		return true, tr, nil
	})
	c.PrependReactor("create", "subjectaccessreviews", func(a k8stesting.Action) (bool, runtime.Object, error) {
		sars.Add(1)
		sar := a.(k8stesting.CreateAction).GetObject().(*authorizationv1.SubjectAccessReview)
		ra := sar.Spec.ResourceAttributes
		sar.Status.Allowed = sar.Spec.User == "alice" && ra.Group == Group && ra.Resource == "allocations" && ra.Verb == "list"
		return true, sar, nil
	})
	return c
}

func TestCache(t *testing.T) {
	var trs, sars atomic.Int32
	rules := Rules{
		"/x.S/List":    {Verb: "list", Resource: "allocations"},
		"/x.S/Reserve": {Verb: "create", Resource: "reservations"},
	}
	a := New(fakeReviews(&trs, &sars), rules, slog.New(slog.NewTextHandler(io.Discard, nil)))
	now := time.Unix(1000, 0)
	a.now = func() time.Time { return now }
	call := func(token, method string) codes.Code {
		ctx := metadata.NewIncomingContext(context.Background(), metadata.Pairs("authorization", "Bearer "+token))
		_, err := a.Authorize(ctx, method)
		return status.Code(err)
	}
	steps := []struct {
		name              string
		advance           time.Duration
		token, method     string
		want              codes.Code
		wantTRs, wantSARs int32
	}{
		{"first call reviews both", 0, "good", "/x.S/List", codes.OK, 1, 1},
		{"cached", time.Second, "good", "/x.S/List", codes.OK, 1, 1},
		{"other rule reviews access only", 0, "good", "/x.S/Reserve", codes.PermissionDenied, 1, 2},
		{"denial cached", time.Second, "good", "/x.S/Reserve", codes.PermissionDenied, 1, 2},
		{"denial expires", DefaultDenyTTL, "good", "/x.S/Reserve", codes.PermissionDenied, 1, 3},
		{"allow expires", DefaultAllowTTL, "good", "/x.S/List", codes.OK, 2, 4},
		{"bad token", 0, "bad", "/x.S/List", codes.Unauthenticated, 3, 4},
		{"bad token cached", time.Second, "bad", "/x.S/List", codes.Unauthenticated, 3, 4},
		{"not in table", 0, "good", "/x.S/Other", codes.PermissionDenied, 3, 4},
		{"open without token", 0, "", "/grpc.health.v1.Health/Check", codes.OK, 3, 4},
		{"authenticated without our audience", 0, "no-audience", "/x.S/List", codes.Unauthenticated, 4, 4},
	}
	for _, s := range steps {
		now = now.Add(s.advance)
		if got := call(s.token, s.method); got != s.want {
			t.Errorf("%s: code %v, want %v", s.name, got, s.want)
		}
		if trs.Load() != s.wantTRs || sars.Load() != s.wantSARs {
			t.Errorf("%s: %d TokenReviews, %d SubjectAccessReviews; want %d, %d", s.name, trs.Load(), sars.Load(), s.wantTRs, s.wantSARs)
		}
	}
}

func TestTokenFromFileRotation(t *testing.T) {
	dir := t.TempDir()
	// Lay the file out as the kubelet does: token -> ..data/token, and
	// rotation swaps the ..data symlink.
	write := func(gen, token string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Join(dir, gen), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, gen, "token"), []byte(token+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		tmp := filepath.Join(dir, "..data_tmp")
		if err := os.Symlink(gen, tmp); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, filepath.Join(dir, "..data")); err != nil {
			t.Fatal(err)
		}
	}
	write("gen1", "first")
	if err := os.Symlink(filepath.Join("..data", "token"), filepath.Join(dir, "token")); err != nil {
		t.Fatal(err)
	}
	creds := TokenFromFile(filepath.Join(dir, "token"))
	if !creds.RequireTransportSecurity() {
		t.Fatal("TokenFromFile must require transport security")
	}
	if PlaintextTokenFromFile("x").RequireTransportSecurity() {
		t.Fatal("PlaintextTokenFromFile must not require transport security")
	}
	get := func() string {
		t.Helper()
		md, err := creds.GetRequestMetadata(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		return md["authorization"]
	}
	if got := get(); got != "Bearer first" {
		t.Fatalf("got %q", got)
	}
	write("gen2", "second-token")
	if got := get(); got != "Bearer second-token" {
		t.Fatalf("after rotation got %q", got)
	}
	if _, err := TokenFromFile(filepath.Join(dir, "missing")).GetRequestMetadata(context.Background()); err == nil {
		t.Fatal("missing token file: want an error")
	}
}

func TestDialOptions(t *testing.T) {
	tests := []struct {
		name      string
		token, ca string
		plaintext bool
		wantErr   bool
		wantOpts  int
	}{
		{"plaintext no token", "", "", true, false, 1},
		{"plaintext token", "/t", "", true, false, 2},
		{"plaintext with CA", "", "/ca", true, true, 0},
		{"tls system roots", "/t", "", false, false, 2},
		{"tls missing CA", "", "/nonexistent/ca.pem", false, true, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			opts, err := DialOptions(tt.token, tt.ca, tt.plaintext)
			if (err != nil) != tt.wantErr || len(opts) != tt.wantOpts {
				t.Fatalf("DialOptions = %d opts, %v; want %d, err=%v", len(opts), err, tt.wantOpts, tt.wantErr)
			}
		})
	}
}

// TestFloodOfRefusedTokensKeepsAuthorizedCallersCached: more distinct
// made-up tokens than the refused cache holds evict only refused answers;
// the authorized caller is still answered from the cache.
func TestFloodOfRefusedTokensKeepsAuthorizedCallersCached(t *testing.T) {
	var trs, sars atomic.Int32
	a := New(fakeReviews(&trs, &sars), Rules{"/x.S/List": {Verb: "list", Resource: "allocations"}}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	call := func(token string) codes.Code {
		ctx := metadata.NewIncomingContext(context.Background(), metadata.Pairs("authorization", "Bearer "+token))
		_, err := a.Authorize(ctx, "/x.S/List")
		return status.Code(err)
	}
	if got := call("good"); got != codes.OK {
		t.Fatalf("good: %v", got)
	}
	for i := range maxRefusedEntries + 10 {
		if got := call(fmt.Sprintf("made-up-%d", i)); got != codes.Unauthenticated {
			t.Fatalf("made-up token %d: %v, want Unauthenticated", i, got)
		}
	}
	before := trs.Load()
	if got := call("good"); got != codes.OK {
		t.Fatalf("good after the flood: %v", got)
	}
	if trs.Load() != before {
		t.Errorf("the authorized caller was reviewed again after the flood: its cached answer was evicted by refused tokens")
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if n := len(a.refused); n > maxRefusedEntries {
		t.Errorf("%d refused answers cached, want at most %d", n, maxRefusedEntries)
	}
}

// TestPendingReviewsAreBounded: with every review slot taken, a call that
// needs a review is refused at once with UNAVAILABLE, and a cached caller
// is still answered.
func TestPendingReviewsAreBounded(t *testing.T) {
	var trs, sars atomic.Int32
	a := New(fakeReviews(&trs, &sars), Rules{"/x.S/List": {Verb: "list", Resource: "allocations"}}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	a.SetMaxPendingReviews(2)
	call := func(token string) codes.Code {
		ctx := metadata.NewIncomingContext(context.Background(), metadata.Pairs("authorization", "Bearer "+token))
		_, err := a.Authorize(ctx, "/x.S/List")
		return status.Code(err)
	}
	if got := call("good"); got != codes.OK {
		t.Fatalf("good: %v", got)
	}
	// Two reviews in flight (held as a slow API server would hold them).
	a.pending.TryAcquire()
	a.pending.TryAcquire()
	if got := call("made-up"); got != codes.Unavailable {
		t.Errorf("a review beyond the bound: %v, want Unavailable", got)
	}
	if got := call("good"); got != codes.OK {
		t.Errorf("a cached caller while the reviews are full: %v, want OK", got)
	}
	a.pending.Release()
	if got := call("made-up"); got != codes.Unauthenticated {
		t.Errorf("a review once a slot is free: %v, want Unauthenticated", got)
	}
}

// TestRevokedTokenRefusalIsCached: a token that authenticated, then was
// revoked (its Pod deleted, its ServiceAccount gone), is refused once its
// allowed answer expires — and that refusal is cached like any other, not
// shadowed by the expired allowed entry (a revoked token repeated must not
// cost a TokenReview per call).
func TestRevokedTokenRefusalIsCached(t *testing.T) {
	var trs atomic.Int32
	var revoked atomic.Bool
	c := fake.NewClientset()
	c.PrependReactor("create", "tokenreviews", func(a k8stesting.Action) (bool, runtime.Object, error) {
		trs.Add(1)
		tr := a.(k8stesting.CreateAction).GetObject().(*authenticationv1.TokenReview)
		if revoked.Load() {
			tr.Status = authenticationv1.TokenReviewStatus{Error: "token has been invalidated"}
		} else {
			tr.Status = authenticationv1.TokenReviewStatus{Authenticated: true, User: authenticationv1.UserInfo{Username: "alice"}, Audiences: tr.Spec.Audiences}
		}
		return true, tr, nil
	})
	c.PrependReactor("create", "subjectaccessreviews", func(a k8stesting.Action) (bool, runtime.Object, error) {
		sar := a.(k8stesting.CreateAction).GetObject().(*authorizationv1.SubjectAccessReview)
		sar.Status.Allowed = true
		return true, sar, nil
	})
	a := New(c, Rules{"/x.S/List": {Verb: "list", Resource: "allocations"}}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	now := time.Unix(1000, 0)
	a.now = func() time.Time { return now }
	call := func() codes.Code {
		ctx := metadata.NewIncomingContext(context.Background(), metadata.Pairs("authorization", "Bearer t"))
		_, err := a.Authorize(ctx, "/x.S/List")
		return status.Code(err)
	}
	if got := call(); got != codes.OK {
		t.Fatalf("before the revocation: %v", got)
	}
	revoked.Store(true)
	now = now.Add(DefaultAllowTTL)
	for i := range 5 {
		if got := call(); got != codes.Unauthenticated {
			t.Fatalf("call %d after the revocation: %v, want Unauthenticated", i, got)
		}
	}
	if n := trs.Load(); n != 2 {
		t.Fatalf("%d TokenReviews, want 2 (one accepted, one refused and cached)", n)
	}
}

func TestWithNamespaceAccess(t *testing.T) {
	bg := context.Background()
	if !AllowedEverywhere(bg) {
		t.Error("a call with no scope: not allowed everywhere")
	}
	if ok, err := ContextAllowedIn(bg, "shop"); !ok || err != nil {
		t.Errorf("a call with no scope in shop: %v %v", ok, err)
	}
	shopOnly := WithNamespaceAccess(bg, false, func(_ context.Context, ns string) (bool, error) { return ns == "shop", nil })
	if AllowedEverywhere(shopOnly) {
		t.Error("scoped to shop: allowed everywhere")
	}
	for ns, want := range map[string]bool{"shop": true, "bank": false, "": false} {
		for name, in := range map[string]func(context.Context, string) (bool, error){
			"ContextAllowedIn": ContextAllowedIn, "Authorizer.AllowedIn": (&Authorizer{}).AllowedIn,
		} {
			if ok, err := in(shopOnly, ns); ok != want || err != nil {
				t.Errorf("%s(shop only, %q) = %v, %v; want %v", name, ns, ok, err, want)
			}
		}
	}
	if !AllowedEverywhere(WithNamespaceAccess(bg, true, nil)) {
		t.Error("allowed cluster-wide: not allowed everywhere")
	}
}
