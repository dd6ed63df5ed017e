package aggregated

import (
	"context"
	"fmt"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/apiserver/pkg/registry/rest"

	"github.com/ipledger/ipledger/pkg/authz"
	"github.com/ipledger/ipledger/pkg/ipamapi"
	ipamv1 "github.com/ipledger/ipledger/proto/ipledger/ipam/v1"
)

// Queries is the part of IPAMService that the create-only questions
// (poolpreviews, historyqueries, localhistoryqueries) ask.
type Queries interface {
	PreviewPool(context.Context, *ipamv1.PreviewPoolRequest) (*ipamv1.PreviewPoolResponse, error)
	AddressHistory(context.Context, *ipamv1.AddressHistoryRequest) (*ipamv1.AddressHistoryResponse, error)
}

var (
	poolPreviewsResource   = ipamapi.SchemeGroupVersion.WithResource("poolpreviews").GroupResource()
	historyQueriesResource = ipamapi.SchemeGroupVersion.WithResource("historyqueries").GroupResource()
)

// poolPreviews serves poolpreviews: create only, nothing stored, the
// answer of PreviewPool in status.
type poolPreviews struct{ ipam Queries }

var _ rest.Creater = (*poolPreviews)(nil)

func (*poolPreviews) New() runtime.Object     { return &ipamapi.PoolPreview{} }
func (*poolPreviews) Destroy()                {}
func (*poolPreviews) NamespaceScoped() bool   { return false }
func (*poolPreviews) GetSingularName() string { return "poolpreview" }

func (s *poolPreviews) Create(ctx context.Context, obj runtime.Object, _ rest.ValidateObjectFunc, _ *metav1.CreateOptions) (runtime.Object, error) {
	p := obj.(*ipamapi.PoolPreview)
	resp, err := s.ipam.PreviewPool(ctx, &ipamv1.PreviewPoolRequest{Manifest: []byte(p.Spec.Manifest), Delete: p.Spec.Delete})
	if err != nil {
		return nil, apiError(poolPreviewsResource, p.Name, err)
	}
	out := p.DeepCopyObject().(*ipamapi.PoolPreview)
	out.Status = resp
	return out, nil
}

// historyQueries serves historyqueries (cluster-scoped) and, local,
// localhistoryqueries (namespaced): create only, the page of
// AddressHistory in status. The caller sees what the gRPC method shows
// it: every entry when allowed `get history.ipledger.io` cluster-wide,
// else only the namespaces where it is allowed, asked of authz (the
// delegated SubjectAccessReviews) for the user of the request.
type historyQueries struct {
	ipam  Queries
	authz authorizer.Authorizer
	local bool
}

var _ rest.Creater = (*historyQueries)(nil)

func (h *historyQueries) New() runtime.Object {
	if h.local {
		return &ipamapi.LocalHistoryQuery{}
	}
	return &ipamapi.HistoryQuery{}
}
func (*historyQueries) Destroy()                {}
func (h *historyQueries) NamespaceScoped() bool { return h.local }
func (h *historyQueries) GetSingularName() string {
	if h.local {
		return "localhistoryquery"
	}
	return "historyquery"
}

// historyRule is the gRPC AddressHistory's rule (server.Rules).
var historyRule = authz.Rule{Verb: "get", Resource: "history", Namespaced: true}

// allowed asks authz whether the request's user may get history in
// namespace ("" cluster-wide).
func (h *historyQueries) allowed(ctx context.Context, namespace string) (bool, error) {
	u, ok := genericapirequest.UserFrom(ctx)
	if !ok {
		return false, nil
	}
	d, _, err := h.authz.Authorize(ctx, authorizer.AttributesRecord{
		User: u, Verb: historyRule.Verb, APIGroup: authz.Group, APIVersion: "*", Resource: historyRule.Resource,
		Namespace: namespace, ResourceRequest: true,
	})
	if err != nil {
		return false, status.Errorf(codes.Unavailable, "cannot review access with the Kubernetes API server: %v", err)
	}
	return d == authorizer.DecisionAllow, nil
}

func (h *historyQueries) Create(ctx context.Context, obj runtime.Object, _ rest.ValidateObjectFunc, _ *metav1.CreateOptions) (runtime.Object, error) {
	var q *ipamapi.HistoryQuery
	if h.local {
		q = (*ipamapi.HistoryQuery)(obj.(*ipamapi.LocalHistoryQuery))
	} else {
		q = obj.(*ipamapi.HistoryQuery)
	}
	req := q.Spec.Request()
	var scoped context.Context
	if h.local {
		ns, _ := genericapirequest.NamespaceFrom(ctx)
		if svc := q.Spec.Service; svc != nil && svc.Namespace != "" && svc.Namespace != ns {
			return nil, apierrors.NewBadRequest(fmt.Sprintf("spec.service.namespace: %q is not the namespace of the localhistoryquery (%q); "+
				"leave it empty or ask in namespace %q", svc.Namespace, ns, svc.Namespace))
		}
		if req.Service != nil {
			req.Service.Namespace = ns
		}
		ok, err := h.allowed(ctx, ns)
		if err != nil {
			return nil, apiError(historyQueriesResource, "", err)
		}
		if !ok {
			// As the gRPC method refuses a caller naming a namespace it may not read.
			return nil, apierrors.NewForbidden(historyQueriesResource, "", fmt.Errorf(
				"may not get history.%s in namespace %s: bind a Role there granting apiGroups [%s], resources [history], verbs [get]",
				authz.Group, ns, authz.Group))
		}
		// Only this namespace's entries, even for a caller allowed more.
		scoped = authz.WithNamespaceAccess(ctx, false, func(_ context.Context, n string) (bool, error) { return n == ns, nil })
	} else {
		all, err := h.allowed(ctx, "")
		if err != nil {
			return nil, apiError(historyQueriesResource, "", err)
		}
		scoped = authz.WithNamespaceAccess(ctx, all, h.allowed)
	}
	resp, err := h.ipam.AddressHistory(scoped, req)
	if err != nil {
		return nil, apiError(historyQueriesResource, "", err)
	}
	if h.local {
		out := obj.DeepCopyObject().(*ipamapi.LocalHistoryQuery)
		out.Status = resp
		return out, nil
	}
	out := obj.DeepCopyObject().(*ipamapi.HistoryQuery)
	out.Status = resp
	return out, nil
}
