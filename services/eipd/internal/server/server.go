// Package server answers ipledger.eipd.v1.EIPService: every labelled Node
// with its Elastic IP, and every managed Elastic IP without a Node. It reads
// EC2 live (a read, so a standby answers too), the Nodes from the stream,
// and the leader's per-Node outcome from the controller's StatusBook.
package server

import (
	"cmp"
	"context"
	"slices"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/ipledger/ipledger/pkg/authz"
	eipdv1 "github.com/ipledger/ipledger/proto/ipledger/eipd/v1"
	eipdv1grpc "github.com/ipledger/ipledger/proto/ipledger/eipd/v1/eipdv1grpc"
	watcherv1 "github.com/ipledger/ipledger/proto/ipledger/watcher/v1"
	"github.com/ipledger/ipledger/services/eipd/internal/controller"
	"github.com/ipledger/ipledger/services/eipd/internal/decide"
)

// Rules is the authorization table of EIPService.
var Rules = authz.Rules{
	eipdv1grpc.EIPService_ListAddresses_FullMethodName: {Verb: "list", Resource: "addresses"},
}

// Addresses lists the managed Elastic IPs (implemented by *awsec2.Client).
type Addresses interface {
	ListManaged(ctx context.Context) ([]decide.Address, error)
}

// Nodes lists the Nodes (implemented by *stream.Store).
type Nodes interface {
	List(kind watcherv1.Kind) []*watcherv1.Object
}

// Server implements eipdv1grpc.EIPServiceServer.
type Server struct {
	eipdv1grpc.UnimplementedEIPServiceServer
	addrs  Addresses
	nodes  Nodes
	status *controller.StatusBook
	wants  func(*watcherv1.Object) bool
}

// New returns the service; wants says which Nodes should have an address
// (the controller's Wants).
func New(addrs Addresses, nodes Nodes, book *controller.StatusBook, wants func(*watcherv1.Object) bool) *Server {
	return &Server{addrs: addrs, nodes: nodes, status: book, wants: wants}
}

// ListAddresses implements EIPService.ListAddresses.
func (s *Server) ListAddresses(ctx context.Context, req *eipdv1.ListAddressesRequest) (*eipdv1.ListAddressesResponse, error) {
	if strings.TrimSpace(req.GetNode()) != req.GetNode() {
		return nil, status.Error(codes.InvalidArgument, "node: has surrounding spaces; give the Node's name exactly, or leave it empty for all")
	}
	view, err := s.addrs.ListManaged(ctx)
	if err != nil {
		return nil, status.Errorf(codes.Unavailable, "cannot list Elastic IPs from EC2 (retry later; eipd's log has the cause): %v", err)
	}
	return &eipdv1.ListAddressesResponse{Addresses: Build(view, s.nodes.List(watcherv1.Kind_KIND_NODE), s.status, s.wants, req.GetNode())}, nil
}

// Build joins EC2's view with the Nodes: one entry per Node that wants one (its
// address, or Pending/Error), one per address tagged for a Node that wants
// none (Orphaned, being given back), one per orphan. only restricts the
// answer to one Node. Entries are ordered by Node, then allocation ID.
func Build(view []decide.Address, nodes []*watcherv1.Object, book *controller.StatusBook, wants func(*watcherv1.Object) bool, only string) []*eipdv1.Address {
	byNode := map[string][]decide.Address{}
	for _, a := range view {
		byNode[a.Node] = append(byNode[a.Node], a)
	}
	var out []*eipdv1.Address
	wanted := map[string]bool{}
	for _, n := range nodes {
		name := n.GetMeta().GetName()
		if !wants(n) || (only != "" && name != only) {
			continue
		}
		wanted[name] = true
		instanceID, _ := decide.InstanceID(n.GetNode().GetProviderId())
		st, known := book.Get(name)
		addrs := byNode[name]
		if len(addrs) == 0 {
			e := &eipdv1.Address{Node: name, InstanceId: instanceID, State: controller.StatePending, Message: "no Elastic IP yet"}
			if known && st.State != controller.StateAssociated {
				e.State, e.Message = st.State, st.Message
			}
			out = append(out, e)
			continue
		}
		for _, a := range addrs {
			e := entry(a, name)
			if e.InstanceId == "" {
				e.InstanceId = instanceID
			}
			if known && st.State == controller.StateError {
				e.State, e.Message = controller.StateError, st.Message
			}
			out = append(out, e)
		}
	}
	for node, addrs := range byNode {
		if node != "" && wanted[node] {
			continue
		}
		if only != "" && node != only {
			continue
		}
		for _, a := range addrs {
			e := entry(a, node)
			e.State = controller.StateOrphaned
			if node != "" {
				e.Message = "tagged for a Node that no longer wants an Elastic IP; being given back"
			}
			out = append(out, e)
		}
	}
	slices.SortFunc(out, func(x, y *eipdv1.Address) int {
		return cmp.Or(strings.Compare(x.GetNode(), y.GetNode()), strings.Compare(x.GetAllocationId(), y.GetAllocationId()))
	})
	return out
}

func entry(a decide.Address, node string) *eipdv1.Address {
	e := &eipdv1.Address{
		Node:          node,
		PublicIp:      a.PublicIP,
		AllocationId:  a.AllocationID,
		AssociationId: a.AssociationID,
		InstanceId:    a.InstanceID,
		PrivateIp:     a.PrivateIP,
		State:         controller.StateAllocated,
	}
	if a.Associated() {
		e.State = controller.StateAssociated
	}
	return e
}
