package aggregated

import (
	"context"
	"fmt"

	"k8s.io/apiserver/pkg/authorization/authorizer"

	"github.com/ipledger/ipledger/pkg/authz"
	"github.com/ipledger/ipledger/pkg/ipamapi"
)

// Grant is what ipam asks the Kubernetes authorizer (a
// SubjectAccessReview) before serving a request of the aggregated API:
// the same virtual resources of ipledger.io, and the same verbs, as the
// gRPC API's authz.Rules, so that one ClusterRole (ipledger:viewer,
// ipledger:operator) grants both APIs.
type Grant struct {
	Verb, Resource string
	// Role is the ClusterRole that grants it, named in the refusal.
	Role string
	// Scoped: not checked before the request is served: the resource
	// answers with what the caller may see namespace by namespace, as the
	// gRPC API's Namespaced rules do (historyqueries: AddressHistory).
	Scoped bool
}

func (g Grant) String() string { return fmt.Sprintf("%s %s.%s", g.Verb, g.Resource, authz.Group) }

// GrantFor is the grant a request of the aggregated API needs; ok is false
// for a verb or resource the API does not serve. Pure: the table the
// authorizer, the docs' grants table and the tests read.
//
// Every read is authorized cluster-wide, as ListAllocations and
// ExplainService are today: what ipam knows of one namespace's Services is
// not namespaced in the ledger (a kept address, a pool's usage).
func GrantFor(verb, resource, subresource string) (Grant, bool) {
	if subresource != "" {
		return Grant{}, false
	}
	read := verb == "get" || verb == "list"
	switch {
	case resource == "allocations" && read:
		return Grant{Verb: verb, Resource: "allocations", Role: "ipledger:viewer"}, true
	case resource == "pools" && read:
		// ListPools: list allocations, for a pool as for all.
		return Grant{Verb: "list", Resource: "allocations", Role: "ipledger:viewer"}, true
	case resource == "explanations" && verb == "get":
		return Grant{Verb: "get", Resource: "allocations", Role: "ipledger:viewer"}, true
	case resource == "reservations" && verb == "get":
		// GetAllocation answers it.
		return Grant{Verb: "get", Resource: "allocations", Role: "ipledger:viewer"}, true
	case resource == "reservations" && (verb == "create" || verb == "delete"):
		return Grant{Verb: verb, Resource: "reservations", Role: "ipledger:operator"}, true
	case resource == "poolpreviews" && verb == "create":
		// PreviewPool: nothing is written, the viewer's get suffices.
		return Grant{Verb: "get", Resource: "allocations", Role: "ipledger:viewer"}, true
	case (resource == "historyqueries" || resource == "localhistoryqueries") && verb == "create":
		// AddressHistory: get history, cluster-wide or per namespace.
		return Grant{Verb: "get", Resource: "history", Role: "ipledger:viewer", Scoped: true}, true
	case resource == "reservations" && (verb == "patch" || verb == "update"):
		// kubectl apply of an unchanged reservation; any change is refused.
		return Grant{Verb: "create", Resource: "reservations", Role: "ipledger:operator"}, true
	}
	return Grant{}, false
}

// translating authorizes the aggregated API's resource requests by their
// Grant through next (the delegated SubjectAccessReview authorizer) and
// leaves every other request (discovery, OpenAPI, health) to next as it is.
type translating struct{ next authorizer.Authorizer }

func (t translating) Authorize(ctx context.Context, a authorizer.Attributes) (authorizer.Decision, string, error) {
	if !a.IsResourceRequest() || a.GetAPIGroup() != ipamapi.Group {
		return t.next.Authorize(ctx, a)
	}
	g, ok := GrantFor(a.GetVerb(), a.GetResource(), a.GetSubresource())
	if !ok {
		return authorizer.DecisionDeny, fmt.Sprintf("ipam does not serve %s on %s", a.GetVerb(), resourceName(a)), nil
	}
	if g.Scoped {
		return authorizer.DecisionAllow, "answered with what the caller may see, namespace by namespace", nil
	}
	decision, reason, err := t.next.Authorize(ctx, authorizer.AttributesRecord{
		User: a.GetUser(), Verb: g.Verb, APIGroup: authz.Group, APIVersion: "*", Resource: g.Resource,
		ResourceRequest: true,
	})
	if decision == authorizer.DecisionAllow {
		return decision, reason, err
	}
	msg := fmt.Sprintf("ipam also needs %s cluster-wide, which ClusterRole %s grants "+
		"(kubectl create clusterrolebinding NAME --clusterrole=%s --user=%s)", g, g.Role, g.Role, a.GetUser().GetName())
	if reason != "" {
		msg += ": " + reason
	}
	return authorizer.DecisionDeny, msg, err
}

func resourceName(a authorizer.Attributes) string {
	if a.GetSubresource() != "" {
		return a.GetResource() + "/" + a.GetSubresource() + "." + a.GetAPIGroup()
	}
	return a.GetResource() + "." + a.GetAPIGroup()
}
