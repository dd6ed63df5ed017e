// Package stream is the client of ipledger.watcher.v1.WatcherService that every
// ipledger consumer reads the cluster through. It keeps a read-only indexed store
// of the objects the watcher streams, reconnects and resumes across watcher
// replicas, and delivers add/update/delete events (with the old object) to
// handlers that can be registered and removed at any time.
package stream

import (
	"context"
	"errors"
	"flag"
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"

	watcherv1 "github.com/ipledger/ipledger/proto/ipledger/watcher/v1"
)

// Config says which watcher to dial and what to stream from it.
type Config struct {
	// Target is "dns:///host:port", "static:///a:1,b:2" or "host:port".
	Target        string
	Kinds         []watcherv1.Kind
	Namespaces    []string
	LabelSelector string
	// TokenFile is a bearer token file (a projected ServiceAccount token), re-read
	// on rotation; "" sends no token.
	TokenFile string
	// Plaintext disables TLS.
	Plaintext bool
	CAFile    string
}

// Flags registers the connection flags; Kinds, Namespaces and LabelSelector are
// chosen by the program, not the operator.
func (c *Config) Flags(fs *flag.FlagSet) {
	fs.StringVar(&c.Target, "watcher-addr", c.Target, "gRPC target of the watcher: dns:///host:port, static:///a:1,b:2 or host:port")
	fs.StringVar(&c.TokenFile, "watcher-token-file", c.TokenFile, "bearer token file sent to the watcher (re-read when it changes); empty sends none")
	fs.BoolVar(&c.Plaintext, "watcher-plaintext", c.Plaintext, "dial the watcher without TLS")
	fs.StringVar(&c.CAFile, "watcher-ca-file", c.CAFile, "CA bundle that verifies the watcher's certificate; empty uses the system pool")
}

// Handler receives the events of the store. Objects are shared: never mutate them.
type Handler interface {
	OnAdd(obj *watcherv1.Object)
	OnUpdate(oldObj, newObj *watcherv1.Object)
	OnDelete(obj *watcherv1.Object)
}

// HandlerFuncs adapts functions to Handler; nil functions are skipped.
type HandlerFuncs struct {
	AddFunc    func(*watcherv1.Object)
	UpdateFunc func(old, new *watcherv1.Object)
	DeleteFunc func(*watcherv1.Object)
}

// OnAdd calls AddFunc if set.
func (h HandlerFuncs) OnAdd(obj *watcherv1.Object) {
	if h.AddFunc != nil {
		h.AddFunc(obj)
	}
}

// OnUpdate calls UpdateFunc if set.
func (h HandlerFuncs) OnUpdate(oldObj, newObj *watcherv1.Object) {
	if h.UpdateFunc != nil {
		h.UpdateFunc(oldObj, newObj)
	}
}

// OnDelete calls DeleteFunc if set.
func (h HandlerFuncs) OnDelete(obj *watcherv1.Object) {
	if h.DeleteFunc != nil {
		h.DeleteFunc(obj)
	}
}

// Registration identifies a handler added with AddHandler.
type Registration struct{ id uint64 }

// Client streams from the watcher into a Store. One per process.
type Client struct{ store *Store }

// New validates cfg and builds a Client; it does not dial until Run.
func New(cfg Config, log *slog.Logger, reg prometheus.Registerer) (*Client, error) {
	return nil, errors.New("stream: not implemented yet")
}

// Run connects, takes the snapshot, applies deltas and reconnects with backoff until ctx ends.
func (c *Client) Run(ctx context.Context) error { return errors.New("stream: not implemented yet") }

// WaitForSync blocks until the first SYNCED has been applied or ctx ends.
func (c *Client) WaitForSync(ctx context.Context) error { return errors.New("stream: not implemented yet") }

// Store returns the read-only store.
func (c *Client) Store() *Store { return c.store }

// AddHandler replays every cached object to h as OnAdd, then delivers live events.
func (c *Client) AddHandler(h Handler) Registration { return Registration{} }

// RemoveHandler stops delivering events to the handler; idempotent.
func (c *Client) RemoveHandler(r Registration) {}

// Store is the read-only, indexed view of the streamed objects.
type Store struct{}

// Get returns the object of kind with that namespace and name.
func (s *Store) Get(kind watcherv1.Kind, namespace, name string) (*watcherv1.Object, bool) {
	return nil, false
}

// List returns every object of kind.
func (s *Store) List(kind watcherv1.Kind) []*watcherv1.Object { return nil }

// ListNamespace returns the objects of kind in namespace.
func (s *Store) ListNamespace(kind watcherv1.Kind, namespace string) []*watcherv1.Object { return nil }

// AddIndex adds a custom index on kind; call before Run.
func (s *Store) AddIndex(kind watcherv1.Kind, name string, fn func(*watcherv1.Object) []string) {}

// ByIndex returns the objects of kind whose index name yields value.
func (s *Store) ByIndex(kind watcherv1.Kind, name, value string) []*watcherv1.Object { return nil }

// Key returns "namespace/name", or "name" for a cluster-scoped object.
func Key(obj *watcherv1.Object) string {
	if ns := obj.GetMeta().GetNamespace(); ns != "" {
		return ns + "/" + obj.GetMeta().GetName()
	}
	return obj.GetMeta().GetName()
}
