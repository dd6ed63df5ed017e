package grpcserver

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	middleware "github.com/grpc-ecosystem/go-grpc-middleware/v2"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/ipledger/ipledger/pkg/authz"
	"github.com/ipledger/ipledger/pkg/parallel"
)

// DefaultMaxStreamsPerIdentity bounds the streams one caller may hold open
// on one server. A client process holds one Watch stream, plus briefly a
// second while the server has not yet noticed that a broken connection is
// gone (keepalive: up to 40 s), so this leaves room for a Deployment of a
// few replicas sharing one ServiceAccount, and stops a runaway or hostile
// client long before it costs the watcher a snapshot per stream.
const DefaultMaxStreamsPerIdentity = 16

// streamGuard is the auth stage of the stream chain. It authenticates and
// authorizes a stream as the unary chain does a call; then it refuses a
// stream beyond the caller's MaxStreamsPerIdentity with RESOURCE_EXHAUSTED,
// and re-authorizes an admitted stream every AuthCacheTTL for as long as it
// lasts, ending it with the refusal (UNAUTHENTICATED or PERMISSION_DENIED)
// once the caller's token or grant is gone: an expired token, a deleted
// ServiceAccount or a deleted RoleBinding ends the stream within twice
// AuthCacheTTL (a review at each tick may still be answered from the cache).
type streamGuard struct {
	authorizer *authz.Authorizer
	interval   time.Duration
	max        int
	log        *slog.Logger
	ended      *prometheus.CounterVec
	overLimit  prometheus.Counter
	// openSlots holds a slot per open-method stream (health Watch,
	// reflection): they need no token, so nothing else bounds them.
	openSlots     *parallel.Limit
	overOpenLimit prometheus.Counter

	mu   sync.Mutex
	open map[string]int // streams held open, by user name
}

// revoked is the cause with which a stream's context is cancelled when a
// re-authorization refuses it.
type revoked struct{ err error }

func (r revoked) Error() string { return r.err.Error() }

func (g *streamGuard) intercept(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	ctx, err := g.authorizer.Authorize(ss.Context(), info.FullMethod)
	if err != nil {
		return err
	}
	wrapped := middleware.WrapServerStream(ss)
	user, ok := authz.UserFrom(ctx)
	if !ok { // an open method (health, reflection): no identity to count or re-check
		if !g.openSlots.TryAcquire() {
			g.overOpenLimit.Inc()
			return status.Errorf(codes.ResourceExhausted,
				"this server already serves %d streams of methods open without a token (health Watch, reflection), its limit (--grpc-max-open-streams): retry later",
				g.openSlots.Size())
		}
		defer g.openSlots.Release()
		wrapped.WrappedContext = ctx
		return handler(srv, wrapped)
	}
	if !g.acquire(user.Username) {
		g.overLimit.Inc()
		g.log.Warn("Refused a stream over the per-identity limit", "user", user.Username, "method", info.FullMethod, "limit", g.max)
		return status.Errorf(codes.ResourceExhausted,
			"user %q already holds %d open streams on this server, its limit (--grpc-max-streams-per-identity): close one, or raise the limit",
			user.Username, g.max)
	}
	defer g.release(user.Username)

	ctx, end := context.WithCancelCause(ctx)
	defer end(nil)
	go g.reauthorize(ctx, end, info.FullMethod, user.Username)
	wrapped.WrappedContext = ctx
	err = handler(srv, wrapped)
	// A handler sees only its context ending; the refusal is the status.
	if r := (revoked{}); errors.As(context.Cause(ctx), &r) {
		return r.err
	}
	return err
}

// reauthorize re-checks the stream's token and grant every interval until
// ctx ends; a refusal ends the stream. When the API server cannot answer the
// stream is kept: an outage of the API server must not cut every subscriber
// off, and the next tick checks again.
func (g *streamGuard) reauthorize(ctx context.Context, end context.CancelCauseFunc, method, user string) {
	tick := time.NewTicker(g.interval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		_, err := g.authorizer.Authorize(ctx, method)
		switch code := status.Code(err); code {
		case codes.OK:
		case codes.Unauthenticated, codes.PermissionDenied:
			g.ended.WithLabelValues(code.String()).Inc()
			g.log.Warn("Ending a stream whose caller is no longer authorized", "user", user, "method", method,
				"code", code.String(), "err", status.Convert(err).Message())
			end(revoked{err})
			return
		default:
			if ctx.Err() == nil {
				g.log.Warn("Could not re-authorize a stream; keeping it until the API server answers", "user", user, "method", method, "err", err)
			}
		}
	}
}

func (g *streamGuard) acquire(user string) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.open[user] >= g.max {
		return false
	}
	g.open[user]++
	return true
}

func (g *streamGuard) release(user string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.open[user]--; g.open[user] <= 0 {
		delete(g.open, user)
	}
}
