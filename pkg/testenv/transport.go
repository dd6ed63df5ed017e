package testenv

import "net/http"

// RoundTripFunc is an http.RoundTripper made of a function: a test wraps a
// client's transport with it (rest.Config.Wrap) to see, delay, fail or
// drop the answer of the requests the client sends.
type RoundTripFunc func(*http.Request) (*http.Response, error)

// RoundTrip calls f.
func (f RoundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }
