package integration

import (
	"crypto/tls"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"sync"
	"testing"
)

// watchGate is an HTTP reverse proxy in front of the API server that can
// hold back the bodies of watch responses: a watcher behind it keeps serving
// while its informers stop hearing of changes, as a replica whose watch
// connections stall (a partition, a slow API server) does. Every other
// request (lists, TokenReviews, SubjectAccessReviews) passes.
type watchGate struct {
	url string

	mu     sync.Mutex
	paused bool
	resume chan struct{} // closed when unpaused
}

func startWatchGate(t *testing.T, apiServer string) *watchGate {
	t.Helper()
	target, err := url.Parse(apiServer)
	if err != nil {
		t.Fatal(err)
	}
	g := &watchGate{resume: make(chan struct{})}
	close(g.resume)
	proxy := httputil.NewSingleHostReverseProxy(target)
	proxy.Transport = &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, ForceAttemptHTTP2: true}
	proxy.FlushInterval = -1 // watch events go out as they come
	proxy.ModifyResponse = func(resp *http.Response) error {
		if q := resp.Request.URL.Query().Get("watch"); q == "true" || q == "1" {
			resp.Body = &gatedBody{ReadCloser: resp.Body, g: g}
		}
		return nil
	}
	// TLS, since client-go sends bearer tokens only over it.
	srv := httptest.NewTLSServer(proxy)
	t.Cleanup(srv.Close)
	t.Cleanup(g.Resume) // runs first: no proxied watch stays blocked
	g.url = srv.URL
	return g
}

// Pause holds every watch event from now on until Resume.
func (g *watchGate) Pause() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.paused {
		g.paused = true
		g.resume = make(chan struct{})
	}
}

// Resume lets the held events through.
func (g *watchGate) Resume() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.paused {
		g.paused = false
		close(g.resume)
	}
}

func (g *watchGate) wait() {
	g.mu.Lock()
	ch := g.resume
	g.mu.Unlock()
	<-ch
}

// gatedBody hands out what it read only while the gate is open, so an event
// already on its way when Pause is called is held too.
type gatedBody struct {
	io.ReadCloser
	g *watchGate
}

func (b *gatedBody) Read(p []byte) (int, error) {
	b.g.wait()
	n, err := b.ReadCloser.Read(p)
	b.g.wait()
	return n, err
}
