// Package quorum is ipledger's one way of asking the API server, rather
// than the watcher's stream, whether an object still exists before giving
// back what the stream says is gone: ipam confirms a Service is gone
// before it releases the Service's addresses, eipd reads a Node before it
// touches the Node's Elastic IP. A GET with an empty resourceVersion is a
// quorum read from etcd, never older than any watcher replica's view,
// however far behind the replica serving the view is.
package quorum

import (
	"context"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ipledger/ipledger/pkg/parallel"
)

// Getter reads one object by key: a typed client's Get
// (client.CoreV1().Nodes().Get), or a closure that splits "namespace/name".
type Getter[T metav1.Object] func(ctx context.Context, key string, opts metav1.GetOptions) (T, error)

// Answer is what the API server said of one object.
type Answer[T metav1.Object] struct {
	// Object is the object as stored; the zero T when it does not exist or
	// the read failed.
	Object T
	// Exists is false when the API server answered NotFound.
	Exists bool
	// Err is why the API server could not answer; nothing may be given
	// back on it (the caller retries later).
	Err error
}

// Gone says the API server confirmed the object is gone or being deleted.
func (a Answer[T]) Gone() bool {
	return a.Err == nil && (!a.Exists || a.Object.GetDeletionTimestamp() != nil)
}

// Get reads key with a quorum read; NotFound is an answer, not an error.
func Get[T metav1.Object](ctx context.Context, get Getter[T], key string) Answer[T] {
	obj, err := get(ctx, key, metav1.GetOptions{}) // empty resourceVersion: a quorum read
	switch {
	case apierrors.IsNotFound(err):
		return Answer[T]{}
	case err != nil:
		return Answer[T]{Err: err}
	}
	return Answer[T]{Object: obj, Exists: true}
}

// GetAll reads every key, at most limit at a time; the answers are in the
// order of keys.
func GetAll[T metav1.Object](ctx context.Context, get Getter[T], keys []string, limit int) []Answer[T] {
	out := make([]Answer[T], len(keys))
	parallel.Each(len(keys), limit, func(i int) { out[i] = Get(ctx, get, keys[i]) })
	return out
}
