package server

import (
	"context"
	"errors"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	eipdv1 "github.com/ipledger/ipledger/proto/ipledger/eipd/v1"
	watcherv1 "github.com/ipledger/ipledger/proto/ipledger/watcher/v1"
	"github.com/ipledger/ipledger/services/eipd/internal/controller"
	"github.com/ipledger/ipledger/services/eipd/internal/decide"
)

func node(name string, want bool) *watcherv1.Object {
	labels := map[string]string{}
	if want {
		labels[controller.LabelAutoAssign] = "true"
	}
	return &watcherv1.Object{Kind: watcherv1.Kind_KIND_NODE,
		Meta: &watcherv1.ObjectMeta{Name: name, Labels: labels},
		Body: &watcherv1.Object_Node{Node: &watcherv1.Node{ProviderId: "aws:///z/i-0" + name[len(name)-1:]}}}
}

// wants is the controller's rule with the legacy label accepted, as by default.
func wants(n *watcherv1.Object) bool {
	return decide.NodeOptIn(n.GetMeta().GetLabels(), true) != decide.NoOptIn
}

type fakeAddrs struct {
	view []decide.Address
	err  error
}

func (f fakeAddrs) ListManaged(context.Context) ([]decide.Address, error) { return f.view, f.err }

type fakeNodes []*watcherv1.Object

func (f fakeNodes) List(watcherv1.Kind) []*watcherv1.Object { return f }

func TestListAddresses(t *testing.T) {
	view := []decide.Address{
		{AllocationID: "e-1", PublicIP: "1.1.1.1", Node: "n1", AssociationID: "as-1", NetworkInterfaceID: "eni-1", PrivateIP: "10.0.0.1"},
		{AllocationID: "e-2", PublicIP: "1.1.1.2", Node: "n2"},
		{AllocationID: "e-3", PublicIP: "1.1.1.3"},
		{AllocationID: "e-4", PublicIP: "1.1.1.4", Node: "gone"},
	}
	nodes := fakeNodes{node("n1", true), node("n2", true), node("n3", true), node("n4", false)}
	book := controller.NewStatusBook()
	book.Set("n3", controller.StateError, "instance has no primary network interface")
	s := New(fakeAddrs{view: view}, nodes, book, wants)

	resp, err := s.ListAddresses(context.Background(), &eipdv1.ListAddressesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	type row struct{ node, alloc, state string }
	want := []row{
		{"", "e-3", controller.StateOrphaned},
		{"gone", "e-4", controller.StateOrphaned},
		{"n1", "e-1", controller.StateAssociated},
		{"n2", "e-2", controller.StateAllocated},
		{"n3", "", controller.StateError},
	}
	got := resp.GetAddresses()
	if len(got) != len(want) {
		t.Fatalf("got %d entries %v, want %d", len(got), got, len(want))
	}
	for i, w := range want {
		g := got[i]
		if g.GetNode() != w.node || g.GetAllocationId() != w.alloc || g.GetState() != w.state {
			t.Errorf("entry %d = %s/%s/%s, want %s/%s/%s", i, g.GetNode(), g.GetAllocationId(), g.GetState(), w.node, w.alloc, w.state)
		}
	}
	if got[2].GetInstanceId() != "i-01" || got[2].GetPrivateIp() != "10.0.0.1" || got[2].GetAssociationId() != "as-1" {
		t.Errorf("n1 entry = %v, want instance from providerID and association details", got[2])
	}
	if got[4].GetMessage() == "" {
		t.Error("error entry without a message")
	}

	one, err := s.ListAddresses(context.Background(), &eipdv1.ListAddressesRequest{Node: "n2"})
	if err != nil || len(one.GetAddresses()) != 1 || one.GetAddresses()[0].GetAllocationId() != "e-2" {
		t.Fatalf("node filter: %v, %v", one, err)
	}
}

func TestListAddressesErrors(t *testing.T) {
	s := New(fakeAddrs{err: errors.New("throttled")}, fakeNodes{}, controller.NewStatusBook(), wants)
	if _, err := s.ListAddresses(context.Background(), &eipdv1.ListAddressesRequest{}); status.Code(err) != codes.Unavailable {
		t.Errorf("EC2 failure: %v, want Unavailable", err)
	}
	if _, err := s.ListAddresses(context.Background(), &eipdv1.ListAddressesRequest{Node: " n1"}); status.Code(err) != codes.InvalidArgument {
		t.Errorf("bad node: %v, want InvalidArgument", err)
	}
}
