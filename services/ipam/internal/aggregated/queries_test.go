package aggregated

import (
	"context"
	"slices"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"

	"github.com/ipledger/ipledger/pkg/authz"
	"github.com/ipledger/ipledger/pkg/ipamapi"
	ipamv1 "github.com/ipledger/ipledger/proto/ipledger/ipam/v1"
)

// scopedHistory answers AddressHistory as ipam's server does with a
// caller's scope: every entry when allowed everywhere, else those of the
// namespaces authz.ContextAllowedIn allows (none for a reservation for no
// Service).
type scopedHistory struct{}

func (scopedHistory) PreviewPool(context.Context, *ipamv1.PreviewPoolRequest) (*ipamv1.PreviewPoolResponse, error) {
	return &ipamv1.PreviewPoolResponse{Pool: "blue", Change: "Create"}, nil
}

func (scopedHistory) AddressHistory(ctx context.Context, _ *ipamv1.AddressHistoryRequest) (*ipamv1.AddressHistoryResponse, error) {
	resp := &ipamv1.AddressHistoryResponse{}
	for _, ns := range []string{"shop", "bank", ""} {
		if !authz.AllowedEverywhere(ctx) {
			if ok, err := authz.ContextAllowedIn(ctx, ns); err != nil || !ok {
				continue
			}
		}
		e := &ipamv1.HistoryEntry{Ip: "192.0.2.1", Action: "granted"}
		if ns != "" {
			e.Service = &ipamv1.ServiceRef{Namespace: ns, Name: "web"}
		}
		resp.Entries = append(resp.Entries, e)
	}
	return resp, nil
}

func namespacesOf(resp *ipamv1.AddressHistoryResponse) []string {
	var out []string
	for _, e := range resp.GetEntries() {
		out = append(out, e.GetService().GetNamespace())
	}
	return out
}

func TestHistoryQueriesShowWhatTheUserMayGet(t *testing.T) {
	// alice may get history in shop only; root everywhere.
	rec := &recorder{allowed: func(a authorizer.Attributes) bool {
		return a.GetAPIGroup() == authz.Group && a.GetResource() == "history" && a.GetVerb() == "get" &&
			(a.GetUser().GetName() == "root" || a.GetNamespace() == "shop")
	}}
	as := func(name, ns string) context.Context {
		ctx := genericapirequest.WithUser(context.Background(), &user.DefaultInfo{Name: name})
		return genericapirequest.WithNamespace(ctx, ns)
	}
	cluster := &historyQueries{ipam: scopedHistory{}, authz: authorizer.AuthorizerFunc(rec.Authorize)}
	local := &historyQueries{ipam: scopedHistory{}, authz: authorizer.AuthorizerFunc(rec.Authorize), local: true}

	for _, tc := range []struct {
		name      string
		ctx       context.Context
		s         *historyQueries
		want      []string
		forbidden bool
	}{
		{"alice, cluster-wide: her namespace only", as("alice", ""), cluster, []string{"shop"}, false},
		{"root, cluster-wide: everything", as("root", ""), cluster, []string{"shop", "bank", ""}, false},
		{"alice in shop", as("alice", "shop"), local, []string{"shop"}, false},
		{"alice in bank: refused", as("alice", "bank"), local, nil, true},
		{"root in bank: bank only", as("root", "bank"), local, []string{"bank"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			obj, err := tc.s.Create(tc.ctx, tc.s.New(), nil, nil)
			if tc.forbidden {
				if !apierrors.IsForbidden(err) {
					t.Fatalf("err = %v, want Forbidden", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var resp *ipamv1.AddressHistoryResponse
			switch q := obj.(type) {
			case *ipamapi.HistoryQuery:
				resp = q.Status
			case *ipamapi.LocalHistoryQuery:
				resp = q.Status
			}
			if got := namespacesOf(resp); !slices.Equal(got, tc.want) {
				t.Errorf("namespaces seen %q, want %q", got, tc.want)
			}
		})
	}
}

func TestLocalHistoryQueryRefusesAnotherNamespacesService(t *testing.T) {
	rec := &recorder{allowed: func(authorizer.Attributes) bool { return true }}
	local := &historyQueries{ipam: scopedHistory{}, authz: authorizer.AuthorizerFunc(rec.Authorize), local: true}
	ctx := genericapirequest.WithNamespace(genericapirequest.WithUser(context.Background(), &user.DefaultInfo{Name: "alice"}), "shop")
	q := &ipamapi.LocalHistoryQuery{Spec: ipamapi.HistoryQuerySpec{Service: &ipamapi.ServiceRef{Namespace: "bank", Name: "api"}}}
	if _, err := local.Create(ctx, q, nil, nil); !apierrors.IsBadRequest(err) {
		t.Fatalf("err = %v, want BadRequest", err)
	}
	// A Service named without its namespace is the query's namespace's.
	var asked *ipamv1.AddressHistoryRequest
	local.ipam = recordingHistory{&asked}
	q = &ipamapi.LocalHistoryQuery{Spec: ipamapi.HistoryQuerySpec{Service: &ipamapi.ServiceRef{Name: "web"}}}
	if _, err := local.Create(ctx, q, nil, nil); err != nil {
		t.Fatal(err)
	}
	if got := asked.GetService(); got.GetNamespace() != "shop" || got.GetName() != "web" {
		t.Errorf("asked ipam for %v, want shop/web", got)
	}
}

type recordingHistory struct {
	req **ipamv1.AddressHistoryRequest
}

func (recordingHistory) PreviewPool(context.Context, *ipamv1.PreviewPoolRequest) (*ipamv1.PreviewPoolResponse, error) {
	return nil, nil
}

func (r recordingHistory) AddressHistory(_ context.Context, req *ipamv1.AddressHistoryRequest) (*ipamv1.AddressHistoryResponse, error) {
	*r.req = req
	return &ipamv1.AddressHistoryResponse{}, nil
}
