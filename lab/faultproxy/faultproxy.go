// Package faultproxy is a test-only HTTP reverse proxy for the EC2 query API
// that misbehaves on purpose: it throttles (RequestLimitExceeded, HTTP 503),
// fails with 5xx, drops the response of a request it did forward (so the
// caller cannot know that an address was allocated), and hides addresses
// younger than a delay from DescribeAddresses (EC2's eventual consistency).
// It also counts the requests it sees per action.
package faultproxy

import (
	"bytes"
	"encoding/xml"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"
)

// Fault is a way to misbehave.
type Fault int

const (
	// Throttle answers 503 RequestLimitExceeded without forwarding.
	Throttle Fault = iota + 1
	// ServerError answers 500 InternalError without forwarding.
	ServerError
	// DropResponse forwards the request, then closes the connection
	// without answering: the action happened, the caller cannot know.
	DropResponse
)

// Forever makes Inject apply until Clear.
const Forever = -1

type rule struct {
	action string // "" matches every action
	fault  Fault
	times  int
}

// Proxy forwards to an EC2 endpoint (moto_server).
type Proxy struct {
	target *url.URL
	ln     net.Listener
	srv    *http.Server

	mu     sync.Mutex
	rules  []rule
	counts map[string]int
	faults map[string]int
	born   map[string]time.Time // allocation ID -> when the proxy saw it allocated
	delay  time.Duration
	// params are the form parameters of every request, by action.
	params map[string][]url.Values
}

// Start listens on a free loopback port and proxies to target.
func Start(target string) (*Proxy, error) {
	u, err := url.Parse(target)
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{target: u, ln: ln, counts: map[string]int{}, faults: map[string]int{}, born: map[string]time.Time{}, params: map[string][]url.Values{}}
	p.srv = &http.Server{Handler: p, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = p.srv.Serve(ln) }()
	return p, nil
}

// URL is the proxy's base URL, to use as the EC2 endpoint.
func (p *Proxy) URL() string { return "http://" + p.ln.Addr().String() }

// Close stops the proxy.
func (p *Proxy) Close() error { return p.srv.Close() }

// Inject makes the next times requests of action ("" = any) fail with f.
func (p *Proxy) Inject(action string, f Fault, times int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.rules = append(p.rules, rule{action: action, fault: f, times: times})
}

// Clear removes every injected fault.
func (p *Proxy) Clear() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.rules = nil
}

// SetVisibilityDelay hides addresses allocated through the proxy from
// DescribeAddresses until they are d old.
func (p *Proxy) SetVisibilityDelay(d time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.delay = d
}

// Count returns how many requests of action reached the proxy.
func (p *Proxy) Count(action string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.counts[action]
}

// Params returns the form parameters of every request of action that
// reached the proxy, in order: what a test checks the client sent when the
// server behind ignores it (moto does not model every parameter).
func (p *Proxy) Params(action string) []url.Values {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.params[action])
}

// Faults returns how many requests of action the proxy failed on purpose.
func (p *Proxy) Faults(action string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.faults[action]
}

// TotalFaults returns how many requests, of any action, the proxy failed on purpose.
func (p *Proxy) TotalFaults() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for _, c := range p.faults {
		n += c
	}
	return n
}

// Counts returns a copy of the per-action request counts.
func (p *Proxy) Counts() map[string]int {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make(map[string]int, len(p.counts))
	for k, v := range p.counts {
		out[k] = v
	}
	return out
}

// Mutations is the number of requests that change EC2 state.
func (p *Proxy) Mutations() int {
	n := 0
	for a, c := range p.Counts() {
		if !strings.HasPrefix(a, "Describe") {
			n += c
		}
	}
	return n
}

func (p *Proxy) takeFault(action string) Fault {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.counts[action]++
	for i := range p.rules {
		r := &p.rules[i]
		if (r.action == "" || r.action == action) && r.times != 0 {
			if r.times > 0 {
				r.times--
			}
			p.faults[action]++
			return r.fault
		}
	}
	return 0
}

// ServeHTTP implements http.Handler.
func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	action := actionOf(r, body)
	if v, err := url.ParseQuery(string(body)); err == nil {
		p.mu.Lock()
		p.params[action] = append(p.params[action], v)
		p.mu.Unlock()
	}
	switch p.takeFault(action) {
	case Throttle:
		writeError(w, http.StatusServiceUnavailable, "RequestLimitExceeded", "Request limit exceeded.")
		return
	case ServerError:
		writeError(w, http.StatusInternalServerError, "InternalError", "An internal error has occurred.")
		return
	case DropResponse:
		resp, respBody, err := p.forward(r, body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		p.observe(action, resp, respBody)
		if hj, ok := w.(http.Hijacker); ok {
			if conn, _, err := hj.Hijack(); err == nil {
				conn.Close()
				return
			}
		}
		panic(http.ErrAbortHandler)
	}
	resp, respBody, err := p.forward(r, body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	p.observe(action, resp, respBody)
	if resp.StatusCode == http.StatusOK && action == "DescribeAddresses" {
		respBody = p.hideYoung(respBody)
	}
	for k, vs := range resp.Header {
		if k == "Content-Length" {
			continue
		}
		for _, v := range vs {
			w.Header().Add(k, v)
		}
	}
	w.Header().Set("Content-Length", fmt.Sprint(len(respBody)))
	w.WriteHeader(resp.StatusCode)
	_, _ = w.Write(respBody)
}

// observe learns when addresses are born, to hide them while young.
func (p *Proxy) observe(action string, resp *http.Response, body []byte) {
	if resp.StatusCode != http.StatusOK || action != "AllocateAddress" {
		return
	}
	if id := firstElement(body, "allocationId"); id != "" {
		p.mu.Lock()
		p.born[id] = time.Now()
		p.mu.Unlock()
	}
}

func (p *Proxy) forward(r *http.Request, body []byte) (*http.Response, []byte, error) {
	u := *p.target
	u.Path = r.URL.Path
	u.RawQuery = r.URL.RawQuery
	out, err := http.NewRequestWithContext(r.Context(), r.Method, u.String(), bytes.NewReader(body))
	if err != nil {
		return nil, nil, err
	}
	out.Header = r.Header.Clone()
	resp, err := http.DefaultTransport.RoundTrip(out)
	if err != nil {
		return nil, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp, b, err
}

func actionOf(r *http.Request, body []byte) string {
	if a := r.URL.Query().Get("Action"); a != "" {
		return a
	}
	if v, err := url.ParseQuery(string(body)); err == nil {
		return v.Get("Action")
	}
	return ""
}

func writeError(w http.ResponseWriter, status int, code, msg string) {
	w.Header().Set("Content-Type", "text/xml")
	w.WriteHeader(status)
	fmt.Fprintf(w, `<?xml version="1.0" encoding="UTF-8"?>
<Response><Errors><Error><Code>%s</Code><Message>%s</Message></Error></Errors><RequestID>faultproxy</RequestID></Response>`, code, msg)
}

func firstElement(doc []byte, name string) string {
	d := xml.NewDecoder(bytes.NewReader(doc))
	for {
		tok, err := d.Token()
		if err != nil {
			return ""
		}
		if se, ok := tok.(xml.StartElement); ok && se.Name.Local == name {
			var s string
			if d.DecodeElement(&s, &se) == nil {
				return strings.TrimSpace(s)
			}
			return ""
		}
	}
}

// hideYoung cuts from a DescribeAddresses response the <item>s of
// addressesSet whose allocationId the proxy saw allocated less than the
// visibility delay ago. It cuts bytes, leaving the rest of the document as is.
func (p *Proxy) hideYoung(doc []byte) []byte {
	p.mu.Lock()
	delay := p.delay
	young := map[string]bool{}
	for id, at := range p.born {
		if time.Since(at) < delay {
			young[id] = true
		}
	}
	p.mu.Unlock()
	if len(young) == 0 {
		return doc
	}
	type span struct{ from, to int64 }
	var cuts []span
	d := xml.NewDecoder(bytes.NewReader(doc))
	var path []string
	var itemStart int64
	var itemID string
	for {
		before := d.InputOffset()
		tok, err := d.Token()
		if err != nil {
			break
		}
		switch t := tok.(type) {
		case xml.StartElement:
			path = append(path, t.Name.Local)
			if len(path) >= 2 && t.Name.Local == "item" && path[len(path)-2] == "addressesSet" {
				itemStart, itemID = before, ""
			}
		case xml.CharData:
			if len(path) >= 3 && path[len(path)-1] == "allocationId" && path[len(path)-2] == "item" && path[len(path)-3] == "addressesSet" {
				itemID = strings.TrimSpace(string(t))
			}
		case xml.EndElement:
			if len(path) >= 2 && t.Name.Local == "item" && path[len(path)-2] == "addressesSet" && young[itemID] {
				cuts = append(cuts, span{itemStart, d.InputOffset()})
			}
			path = path[:len(path)-1]
		}
	}
	if len(cuts) == 0 {
		return doc
	}
	var out []byte
	last := int64(0)
	for _, c := range cuts {
		out = append(out, doc[last:c.from]...)
		last = c.to
	}
	return append(out, doc[last:]...)
}
