// Package authz authenticates and authorizes gRPC callers with Kubernetes:
// a caller sends a bearer token (a ServiceAccount token projected with the
// audience of the server it calls, e.g. WatcherAudience), the server checks
// it with a TokenReview for the audiences it accepts and asks a
// SubjectAccessReview whether that user may use
// the RPC's virtual resource of API group ipledger.io. Both answers are
// cached briefly, keyed by a digest of the token; tokens are never logged or
// kept in clear.
package authz

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"golang.org/x/sync/singleflight"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/ipledger/ipledger/pkg/parallel"
)

// Group is the API group of ipledger's virtual resources.
const Group = "ipledger.io"

// The audiences of ipledger's gRPC servers: a caller projects its token for
// the one server it calls, and each server accepts only its own (and, for
// one release, LegacyAudience), so a token seen by the watcher cannot be
// replayed to ipam or eipd. The kube-apiserver refuses tokens whose
// audiences miss its own (--api-audiences), so none of them can be replayed
// against the Kubernetes API either.
const (
	WatcherAudience = "ipledger.io/watcher"
	IPAMAudience    = "ipledger.io/ipam"
	EIPDAudience    = "ipledger.io/eipd"
	// LegacyAudience is the one audience every server accepted before
	// per-server audiences. Servers still accept it for one release, so that
	// during a rolling upgrade an old client's token keeps working at a new
	// server; nothing issues it any more.
	LegacyAudience = "ipledger.io/grpc"
)

// Audience is LegacyAudience.
//
// Deprecated: project a token for the server it is sent to (WatcherAudience,
// IPAMAudience, EIPDAudience).
const Audience = LegacyAudience

// ServerAudiences are the audiences a server whose own audience is own
// accepts by default: own and, for one release, LegacyAudience.
func ServerAudiences(own string) []string { return []string{own, LegacyAudience} }

// Cache lifetimes. Allowed answers live a little longer than refusals so a
// freshly granted ClusterRole takes effect quickly; both are short so a
// revoked grant or a deleted ServiceAccount stops working soon.
const (
	DefaultAllowTTL = 10 * time.Second
	DefaultDenyTTL  = 3 * time.Second
	// maxCacheEntries bounds the memory of the cached answers for tokens
	// that authenticated; maxRefusedEntries, apart, those of refused tokens,
	// so that a flood of distinct made-up tokens evicts only its own kind
	// and never the answers of the callers that are authorized.
	maxCacheEntries   = 4096
	maxRefusedEntries = 4096
	// DefaultMaxPendingReviews bounds the TokenReviews and
	// SubjectAccessReviews waiting for an answer (or for the review
	// client's rate limiter) at once; one more is refused at once with
	// UNAVAILABLE instead of queueing a goroutine and a stream per
	// made-up token.
	DefaultMaxPendingReviews = 64
	// reviewTimeout bounds one TokenReview or SubjectAccessReview.
	reviewTimeout = 10 * time.Second
)

// Rule is the SubjectAccessReview one RPC needs: verb on resource of group
// ipledger.io (cluster-wide).
type Rule struct {
	Verb, Resource string
	// Namespaced: a caller not allowed cluster-wide is let through, and the
	// method answers only with what AllowedIn allows it, namespace by
	// namespace.
	Namespaced bool
}

// Rules maps full method names ("/ipledger.ipam.v1.IPAMService/ListPools")
// to their rule. A method missing from the table is denied, except the
// grpc.health.v1 and reflection services, which are open to everyone.
type Rules map[string]Rule

// openPrefixes are the services any caller may use without a token.
var openPrefixes = []string{
	"/grpc.health.v1.Health/",
	"/grpc.reflection.v1.ServerReflection/",
	"/grpc.reflection.v1alpha.ServerReflection/",
}

// IsOpen reports whether fullMethod needs no credentials.
func IsOpen(fullMethod string) bool {
	for _, p := range openPrefixes {
		if strings.HasPrefix(fullMethod, p) {
			return true
		}
	}
	return false
}

// Authorizer authenticates and authorizes calls. It is safe for concurrent use.
type Authorizer struct {
	client    kubernetes.Interface
	rules     Rules
	log       *slog.Logger
	audiences []string

	allowTTL, denyTTL time.Duration
	now               func() time.Time

	flight  singleflight.Group
	pending *parallel.Limit // a slot per review in flight (DefaultMaxPendingReviews)
	mu      sync.Mutex
	users   map[string]userEntry   // token digest -> TokenReview answer, authenticated
	refused map[string]userEntry   // token digest -> TokenReview answer, refused
	access  map[string]accessEntry // token digest + rule -> SubjectAccessReview answer
}

type userEntry struct {
	user    authenticationv1.UserInfo
	ok      bool
	reason  string
	expires time.Time
}

type accessEntry struct {
	allowed bool
	reason  string
	expires time.Time
}

// New returns an Authorizer that reviews tokens and access with client
// (which needs create on tokenreviews and subjectaccessreviews).
func New(client kubernetes.Interface, rules Rules, log *slog.Logger) *Authorizer {
	if log == nil {
		log = slog.Default()
	}
	copied := make(Rules, len(rules))
	for m, r := range rules {
		copied[m] = r
	}
	return &Authorizer{
		client:    client,
		rules:     copied,
		log:       log,
		audiences: []string{Audience},
		allowTTL:  DefaultAllowTTL,
		denyTTL:   DefaultDenyTTL,
		now:       time.Now,
		pending:   parallel.NewLimit(DefaultMaxPendingReviews),
		users:     map[string]userEntry{},
		refused:   map[string]userEntry{},
		access:    map[string]accessEntry{},
	}
}

// SetMaxPendingReviews overrides how many reviews may wait for the API
// server at once (default DefaultMaxPendingReviews); beyond it a call that
// needs a review is refused with UNAVAILABLE. Call before serving.
func (a *Authorizer) SetMaxPendingReviews(n int) {
	if n > 0 {
		a.pending = parallel.NewLimit(n)
	}
}

// errTooManyReviews refuses a call whose review would wait behind
// MaxPendingReviews others: under a flood of made-up tokens, callers with
// valid tokens are mostly answered from the cache, and a refused client
// retries.
var errTooManyReviews = status.Error(codes.Unavailable,
	"the server is reviewing too many tokens at once with the Kubernetes API server; retry with backoff")

// SetAudiences overrides the audiences a token must carry one of (default
// Audience). Call before serving.
func (a *Authorizer) SetAudiences(audiences ...string) {
	a.audiences = append([]string(nil), audiences...)
}

// SetCacheTTLs overrides how long allowed and refused answers are cached
// (zero disables caching of that kind). Call before serving.
func (a *Authorizer) SetCacheTTLs(allow, deny time.Duration) {
	a.allowTTL, a.denyTTL = allow, deny
}

type userKey struct{}

// WithUser returns ctx carrying user as the authenticated caller, for a
// caller authenticated elsewhere (the aggregated API, where the
// kube-apiserver authenticated the person): what UserFrom returns, and what
// ipam's writes are attributed to.
func WithUser(ctx context.Context, user authenticationv1.UserInfo) context.Context {
	return context.WithValue(ctx, userKey{}, user)
}

// UserFrom returns the authenticated caller stored in ctx by Authenticate.
func UserFrom(ctx context.Context) (authenticationv1.UserInfo, bool) {
	u, ok := ctx.Value(userKey{}).(authenticationv1.UserInfo)
	return u, ok
}

// Authenticate is a go-grpc-middleware auth.AuthFunc: it authenticates and
// authorizes the call named by grpc.Method(ctx) and returns ctx carrying the
// caller (see UserFrom), or a gRPC status error: Unauthenticated without or
// with a bad token, PermissionDenied naming the missing verb and resource,
// Unavailable when the API server cannot answer.
func (a *Authorizer) Authenticate(ctx context.Context) (context.Context, error) {
	method, ok := grpc.Method(ctx)
	if !ok {
		return nil, status.Error(codes.Internal, "authz: no gRPC method in context")
	}
	return a.Authorize(ctx, method)
}

// Authorize checks the bearer token in ctx's incoming metadata for
// fullMethod; see Authenticate.
func (a *Authorizer) Authorize(ctx context.Context, fullMethod string) (context.Context, error) {
	if IsOpen(fullMethod) {
		return ctx, nil
	}
	token, err := bearerToken(ctx)
	if err != nil {
		return nil, err
	}
	digest := tokenDigest(token)
	user, err := a.review(ctx, digest, token)
	if err != nil {
		return nil, err
	}
	ctx = context.WithValue(ctx, userKey{}, user)
	rule, ok := a.rules[fullMethod]
	if !ok {
		a.log.Warn("Denied a method missing from the authorization table", "method", fullMethod, "user", user.Username)
		return nil, status.Errorf(codes.PermissionDenied,
			"method %s has no authorization rule on this server; it is denied to everyone", fullMethod)
	}
	if rule.Namespaced {
		// Allowed cluster-wide, or answered with what the namespaces it
		// may read allow (AllowedIn): never refused outright.
		e, err := a.accessIn(ctx, digest, user, rule, "")
		if err != nil {
			return nil, err
		}
		return context.WithValue(ctx, scopeKey{}, scope{digest: digest, user: user, rule: rule, all: e.allowed}), nil
	}
	if err := a.checkAccess(ctx, digest, user, rule); err != nil {
		return nil, err
	}
	return ctx, nil
}

func bearerToken(ctx context.Context) (string, error) {
	vals := metadata.ValueFromIncomingContext(ctx, "authorization")
	if len(vals) == 0 {
		return "", status.Error(codes.Unauthenticated,
			"missing bearer token: send metadata \"authorization: Bearer <Kubernetes ServiceAccount token>\"")
	}
	scheme, token, found := strings.Cut(vals[0], " ")
	token = strings.TrimSpace(token)
	if !found || !strings.EqualFold(scheme, "bearer") || token == "" {
		return "", status.Error(codes.Unauthenticated,
			"malformed authorization metadata: want \"Bearer <Kubernetes ServiceAccount token>\"")
	}
	return token, nil
}

// tokenDigest names a token in caches and logs without revealing it.
func tokenDigest(token string) string {
	sum := sha256.Sum256([]byte(token))
	return hex.EncodeToString(sum[:])
}

// reviewOnce answers from cached, or else asks review (under its own
// timeout, in a bounded review slot) once for every concurrent caller of
// key: the one shape of the TokenReview and the SubjectAccessReview.
func reviewOnce[E any](a *Authorizer, ctx context.Context, key string, cached func() (E, bool), review func(ctx context.Context) (E, error)) (E, error) {
	if e, ok := cached(); ok {
		return e, nil
	}
	v, err, _ := a.flight.Do(key, func() (any, error) {
		if e, ok := cached(); ok {
			return e, nil
		}
		if !a.pending.TryAcquire() {
			return nil, errTooManyReviews
		}
		defer a.pending.Release()
		rctx, cancel := reviewContext(ctx)
		defer cancel()
		return review(rctx)
	})
	if err != nil {
		var zero E
		return zero, err
	}
	return v.(E), nil
}

// review authenticates token with a (cached) TokenReview.
func (a *Authorizer) review(ctx context.Context, digest, token string) (authenticationv1.UserInfo, error) {
	e, err := reviewOnce(a, ctx, "tr/"+digest, func() (userEntry, bool) { return a.cachedUser(digest) }, func(rctx context.Context) (userEntry, error) {
		tr, err := a.client.AuthenticationV1().TokenReviews().Create(rctx,
			&authenticationv1.TokenReview{Spec: authenticationv1.TokenReviewSpec{Token: token, Audiences: a.audiences}}, metav1.CreateOptions{})
		if err != nil {
			return userEntry{}, err
		}
		e := userEntry{user: tr.Status.User, ok: tr.Status.Authenticated, reason: tr.Status.Error}
		if e.ok && !intersects(tr.Status.Audiences, a.audiences) {
			// An authenticator that ignores audiences answers with none (or
			// the API server's): the token is not proven to be meant for us.
			e = userEntry{reason: fmt.Sprintf("the token's audiences %q include none of %q", tr.Status.Audiences, a.audiences)}
		}
		a.storeUser(digest, e)
		return e, nil
	})
	if errors.Is(err, errTooManyReviews) {
		return authenticationv1.UserInfo{}, err
	}
	if err != nil {
		a.log.Error("TokenReview failed", "tokenDigest", digest[:12], "err", err)
		return authenticationv1.UserInfo{}, status.Errorf(codes.Unavailable, "cannot review the bearer token with the Kubernetes API server: %v", err)
	}
	return a.userResult(e)
}

func intersects(got, want []string) bool {
	for _, g := range got {
		for _, w := range want {
			if g == w {
				return true
			}
		}
	}
	return false
}

// reviewContext detaches a review from the one caller that triggered it:
// concurrent callers with the same token share its answer, so one caller
// giving up must not fail the others.
func reviewContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), reviewTimeout)
}

func (a *Authorizer) userResult(e userEntry) (authenticationv1.UserInfo, error) {
	if !e.ok {
		reason := e.reason
		if reason == "" {
			reason = "token not authenticated"
		}
		aud := strings.Join(a.audiences, ",")
		return authenticationv1.UserInfo{}, status.Errorf(codes.Unauthenticated,
			"bearer token rejected for audience %s (%s): send a current ServiceAccount token projected with audience %s "+
				"(`kubectl create token <serviceaccount> --audience %s`); tokens for the Kubernetes API are refused", aud, reason, aud, aud)
	}
	return e.user, nil
}

func (a *Authorizer) cachedUser(digest string) (userEntry, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	// A digest is in one map at a time (storeUser moves it), but look in
	// both for a live answer: an expired entry in one never hides the
	// other's.
	for _, m := range []map[string]userEntry{a.users, a.refused} {
		if e, ok := m[digest]; ok && a.now().Before(e.expires) {
			return e, true
		}
	}
	return userEntry{}, false
}

func (a *Authorizer) cachedAccess(key string) (accessEntry, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	e, ok := a.access[key]
	if !ok || !a.now().Before(e.expires) {
		return accessEntry{}, false
	}
	return e, true
}

// storeUser caches a TokenReview answer: an authenticated token for
// allowTTL, a refused one (a made-up token repeated, an expired one) for
// denyTTL in a map of its own, so that refused tokens never evict the
// answers of authenticated callers.
func (a *Authorizer) storeUser(digest string, e userEntry) {
	ttl, m, limit := a.allowTTL, &a.users, maxCacheEntries
	if !e.ok {
		ttl, m, limit = a.denyTTL, &a.refused, maxRefusedEntries
	}
	if ttl <= 0 {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	// The token's last answer is the only one: a revoked token leaves the
	// allowed map, a token that came good leaves the refused one.
	delete(a.users, digest)
	delete(a.refused, digest)
	e.expires = a.now().Add(ttl)
	(*m)[digest] = e
	if len(*m) > limit {
		*m = evictExpired(*m, a.now(), limit)
	}
}

// storeAccess caches a SubjectAccessReview answer (of an authenticated
// token: the number of these is bounded by the callers with valid tokens
// times the rules).
func (a *Authorizer) storeAccess(key string, e accessEntry) {
	ttl := a.denyTTL
	if e.allowed {
		ttl = a.allowTTL
	}
	if ttl <= 0 {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	e.expires = a.now().Add(ttl)
	a.access[key] = e
	if len(a.access) > maxCacheEntries {
		a.access = evictExpired(a.access, a.now(), maxCacheEntries)
	}
}

// evictExpired drops m's expired entries, or all of them when that is not
// enough to bring it to limit.
func evictExpired[E interface{ expiry() time.Time }](m map[string]E, now time.Time, limit int) map[string]E {
	for k, e := range m {
		if !now.Before(e.expiry()) {
			delete(m, k)
		}
	}
	if len(m) > limit {
		return map[string]E{}
	}
	return m
}

func (e userEntry) expiry() time.Time   { return e.expires }
func (e accessEntry) expiry() time.Time { return e.expires }

// checkAccess asks (through the cache) whether user may use rule.
func (a *Authorizer) checkAccess(ctx context.Context, digest string, user authenticationv1.UserInfo, rule Rule) error {
	e, err := a.accessIn(ctx, digest, user, rule, "")
	if err != nil {
		return err
	}
	if !e.allowed {
		a.log.Info("Denied a call", "user", user.Username, "verb", rule.Verb, "resource", rule.Resource+"."+Group)
		return status.Errorf(codes.PermissionDenied,
			"user %q may not %s %s.%s: bind a (Cluster)Role granting apiGroups [%s], resources [%s], verbs [%s]",
			user.Username, rule.Verb, rule.Resource, Group, Group, rule.Resource, rule.Verb)
	}
	return nil
}

// accessIn asks (through the cache) whether user may use rule in namespace
// ("" cluster-wide).
func (a *Authorizer) accessIn(ctx context.Context, digest string, user authenticationv1.UserInfo, rule Rule, namespace string) (accessEntry, error) {
	key := digest + "/" + rule.Verb + "/" + rule.Resource + "/" + namespace
	e, err := reviewOnce(a, ctx, "sar/"+key, func() (accessEntry, bool) { return a.cachedAccess(key) }, func(rctx context.Context) (accessEntry, error) {
		review := accessReview(user, rule)
		review.Spec.ResourceAttributes.Namespace = namespace
		sar, err := a.client.AuthorizationV1().SubjectAccessReviews().Create(rctx, review, metav1.CreateOptions{})
		if err != nil {
			return accessEntry{}, err
		}
		e := accessEntry{allowed: sar.Status.Allowed && !sar.Status.Denied, reason: sar.Status.Reason}
		if sar.Status.EvaluationError != "" && e.reason == "" {
			e.reason = sar.Status.EvaluationError
		}
		a.storeAccess(key, e)
		return e, nil
	})
	if errors.Is(err, errTooManyReviews) {
		return accessEntry{}, err
	}
	if err != nil {
		a.log.Error("SubjectAccessReview failed", "user", user.Username, "verb", rule.Verb, "resource", rule.Resource, "namespace", namespace, "err", err)
		return accessEntry{}, status.Errorf(codes.Unavailable, "cannot review access with the Kubernetes API server: %v", err)
	}
	return e, nil
}

// scopeKey carries, for a Namespaced rule's call, what AllowedIn needs.
type scopeKey struct{}

type scope struct {
	digest string
	user   authenticationv1.UserInfo
	rule   Rule
	all    bool // allowed cluster-wide
	// in, when set (WithNamespaceAccess), answers AllowedIn in place of
	// the Authorizer's own SubjectAccessReviews.
	in func(ctx context.Context, namespace string) (bool, error)
}

// WithNamespaceAccess returns ctx carrying, for the call of a Namespaced
// rule by a caller authorized elsewhere (the aggregated API, where ipam
// reviews the person the kube-apiserver authenticated), what
// AllowedEverywhere and AllowedIn answer: all when allowed cluster-wide,
// else in, asked namespace by namespace.
func WithNamespaceAccess(ctx context.Context, all bool, in func(ctx context.Context, namespace string) (bool, error)) context.Context {
	return context.WithValue(ctx, scopeKey{}, scope{all: all, in: in})
}

// ContextAllowedIn is AllowedIn for a server without an Authorizer: a
// call WithNamespaceAccess scoped is answered by its in, any other is
// allowed.
func ContextAllowedIn(ctx context.Context, namespace string) (bool, error) {
	return (*Authorizer)(nil).AllowedIn(ctx, namespace)
}

// AllowedIn reports whether the caller of ctx, a call of a Namespaced
// rule, may use it in namespace: allowed cluster-wide, or by a namespaced
// SubjectAccessReview (a RoleBinding in that namespace). A call that went
// through no Authorizer (a server without credentials checks) is allowed.
func (a *Authorizer) AllowedIn(ctx context.Context, namespace string) (bool, error) {
	sc, ok := ctx.Value(scopeKey{}).(scope)
	if !ok || sc.all {
		return true, nil
	}
	if namespace == "" {
		return false, nil
	}
	if sc.in != nil {
		return sc.in(ctx, namespace)
	}
	if a == nil {
		return false, nil
	}
	e, err := a.accessIn(ctx, sc.digest, sc.user, sc.rule, namespace)
	return e.allowed, err
}

// AllowedEverywhere reports whether the caller of ctx may use its
// Namespaced rule cluster-wide (see AllowedIn).
func AllowedEverywhere(ctx context.Context) bool {
	sc, ok := ctx.Value(scopeKey{}).(scope)
	return !ok || sc.all
}

func accessReview(user authenticationv1.UserInfo, rule Rule) *authorizationv1.SubjectAccessReview {
	var extra map[string]authorizationv1.ExtraValue
	if len(user.Extra) > 0 {
		extra = make(map[string]authorizationv1.ExtraValue, len(user.Extra))
		for k, v := range user.Extra {
			extra[k] = authorizationv1.ExtraValue(v)
		}
	}
	return &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
		User:   user.Username,
		UID:    user.UID,
		Groups: user.Groups,
		Extra:  extra,
		ResourceAttributes: &authorizationv1.ResourceAttributes{
			Group:    Group,
			Verb:     rule.Verb,
			Resource: rule.Resource,
		},
	}}
}

// String describes a rule as RBAC would: "list allocations.ipledger.io".
func (r Rule) String() string { return fmt.Sprintf("%s %s.%s", r.Verb, r.Resource, Group) }
