package aggregated

import (
	"context"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"

	"github.com/ipledger/ipledger/pkg/ipamapi"
)

func TestGrantFor(t *testing.T) {
	for _, tc := range []struct {
		verb, resource, sub string
		want                string // "" = not served
	}{
		{"list", "allocations", "", "list allocations.ipledger.io"},
		{"get", "allocations", "", "get allocations.ipledger.io"},
		{"watch", "allocations", "", ""},
		{"create", "allocations", "", ""},
		{"list", "pools", "", "list allocations.ipledger.io"},
		{"get", "pools", "", "list allocations.ipledger.io"},
		{"get", "explanations", "", "get allocations.ipledger.io"},
		{"list", "explanations", "", ""},
		{"get", "allocations", "status", ""},
		{"get", "reservations", "", "get allocations.ipledger.io"},
		{"create", "reservations", "", "create reservations.ipledger.io"},
		{"delete", "reservations", "", "delete reservations.ipledger.io"},
		{"patch", "reservations", "", "create reservations.ipledger.io"},
		{"list", "reservations", "", ""},
		{"create", "poolpreviews", "", "get allocations.ipledger.io"},
		{"get", "poolpreviews", "", ""},
		{"create", "historyqueries", "", "get history.ipledger.io"},
		{"create", "localhistoryqueries", "", "get history.ipledger.io"},
		{"list", "historyqueries", "", ""},
		{"get", "secrets", "", ""},
	} {
		g, ok := GrantFor(tc.verb, tc.resource, tc.sub)
		got := ""
		if ok {
			got = g.String()
		}
		if got != tc.want {
			t.Errorf("GrantFor(%s, %s, %q) = %q, want %q", tc.verb, tc.resource, tc.sub, got, tc.want)
		}
	}
}

// recorder answers allow when the attributes are allowed and records them.
type recorder struct {
	allowed func(authorizer.Attributes) bool
	seen    []authorizer.Attributes
}

func (r *recorder) Authorize(_ context.Context, a authorizer.Attributes) (authorizer.Decision, string, error) {
	r.seen = append(r.seen, a)
	if r.allowed(a) {
		return authorizer.DecisionAllow, "", nil
	}
	return authorizer.DecisionNoOpinion, "RBAC: no rule", nil
}

func TestTranslatingAsksIPAMsGrant(t *testing.T) {
	alice := &user.DefaultInfo{Name: "alice"}
	rec := &recorder{allowed: func(a authorizer.Attributes) bool {
		return a.GetAPIGroup() == "ipledger.io" && a.GetResource() == "allocations" && a.GetVerb() == "list"
	}}
	tr := translating{next: authorizer.AuthorizerFunc(rec.Authorize)}

	d, _, err := tr.Authorize(context.Background(), authorizer.AttributesRecord{User: alice, Verb: "list", APIGroup: ipamapi.Group, Resource: "pools", ResourceRequest: true})
	if d != authorizer.DecisionAllow || err != nil {
		t.Fatalf("list pools: %v %v", d, err)
	}
	if a := rec.seen[0]; a.GetAPIGroup() != "ipledger.io" || a.GetNamespace() != "" || a.GetUser().GetName() != "alice" {
		t.Errorf("asked %+v, want list allocations.ipledger.io cluster-wide for alice", a)
	}

	d, reason, _ := tr.Authorize(context.Background(), authorizer.AttributesRecord{User: alice, Verb: "get", APIGroup: ipamapi.Group, Resource: "explanations", Namespace: "shop", Name: "web", ResourceRequest: true})
	if d == authorizer.DecisionAllow || !strings.Contains(reason, "get allocations.ipledger.io cluster-wide, which ClusterRole ipledger:viewer grants") ||
		!strings.Contains(reason, "--user=alice") {
		t.Errorf("get explanation without the grant: %v %q", d, reason)
	}

	d, reason, _ = tr.Authorize(context.Background(), authorizer.AttributesRecord{User: alice, Verb: "delete", APIGroup: ipamapi.Group, Resource: "pools", ResourceRequest: true})
	if d != authorizer.DecisionDeny || !strings.Contains(reason, "does not serve delete on pools.api.ipledger.io") {
		t.Errorf("delete pools: %v %q", d, reason)
	}

	// Discovery and other groups go to the delegate unchanged.
	rec.seen = nil
	_, _, _ = tr.Authorize(context.Background(), authorizer.AttributesRecord{User: alice, Verb: "get", Path: "/apis", ResourceRequest: false})
	if len(rec.seen) != 1 || rec.seen[0].GetPath() != "/apis" {
		t.Errorf("discovery was not delegated as is: %+v", rec.seen)
	}
}

func TestAPIErrorKeepsIPAMsMessage(t *testing.T) {
	gr := ipamapi.SchemeGroupVersion.WithResource("explanations").GroupResource()
	for _, tc := range []struct {
		code  codes.Code
		check func(error) bool
	}{
		{codes.NotFound, apierrors.IsNotFound},
		{codes.InvalidArgument, apierrors.IsBadRequest},
		{codes.Unavailable, apierrors.IsServiceUnavailable},
		{codes.FailedPrecondition, apierrors.IsConflict},
		{codes.PermissionDenied, apierrors.IsForbidden},
		{codes.Internal, apierrors.IsInternalError},
	} {
		err := apiError(gr, "web", status.Error(tc.code, "Service shop/web: the message"))
		if !tc.check(err) || !strings.Contains(err.Error(), "Service shop/web: the message") {
			t.Errorf("%s: %v", tc.code, err)
		}
	}
}
