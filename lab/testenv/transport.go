package testenv

import (
	"net/http"
	"testing"

	"google.golang.org/grpc"

	"github.com/ipledger/ipledger/pkg/authz"
)

// RoundTripFunc is an http.RoundTripper made of a function: a test wraps a
// client's transport with it (rest.Config.Wrap) to see, delay, fail or
// drop the answer of the requests the client sends.
type RoundTripFunc func(*http.Request) (*http.Response, error)

// RoundTrip calls f.
func (f RoundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// Dial opens a plaintext gRPC connection to addr that sends the token in
// tokenFile ("" sends none), closed when the test ends: how tests and
// benchmarks reach an ipledger server as a given ServiceAccount.
func Dial(t testing.TB, addr, tokenFile string, extra ...grpc.DialOption) *grpc.ClientConn {
	t.Helper()
	opts, err := authz.DialOptions(tokenFile, "", true)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := grpc.NewClient(addr, append(opts, extra...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}
