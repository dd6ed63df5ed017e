package connect

import (
	"errors"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

func TestUseAggregated(t *testing.T) {
	for _, tc := range []struct {
		name   string
		f      Flags
		method string
		want   bool
	}{
		{"auto read", Flags{API: APIAuto}, "ListAllocations", true},
		{"auto reserve", Flags{API: APIAuto}, "ReserveAddress", true},
		{"auto history", Flags{API: APIAuto}, "AddressHistory", true},
		{"auto preview", Flags{API: APIAuto}, "PreviewPool", true},
		{"auto GetAllocation: not served", Flags{API: APIAuto}, "GetAllocation", false},
		{"auto with an address", Flags{API: APIAuto, Address: "127.0.0.1:9443"}, "ListPools", false},
		{"auto with a token", Flags{API: APIAuto, TokenFile: "t"}, "ListPools", false},
		{"auto with a ServiceAccount", Flags{API: APIAuto, ServiceAccount: "alice"}, "ListPools", false},
		{"grpc", Flags{API: APIGRPC}, "ListPools", false},
		{"aggregated despite a token", Flags{API: APIAggregated, TokenFile: "t"}, "ExplainService", true},
	} {
		if got := UseAggregated(tc.f, tc.method); got != tc.want {
			t.Errorf("%s: UseAggregated = %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestGRPCErrorKeepsTheMessage(t *testing.T) {
	gr := schema.GroupResource{Group: "api.ipledger.io", Resource: "allocations"}
	for _, tc := range []struct {
		err  error
		code codes.Code
	}{
		{apierrors.NewForbidden(gr, "", errors.New("ipam also needs list allocations.ipledger.io")), codes.PermissionDenied},
		{apierrors.NewNotFound(gr, "x"), codes.NotFound},
		{apierrors.NewBadRequest("ip: bad"), codes.InvalidArgument},
		{apierrors.NewConflict(gr, "x", errors.New("in use")), codes.FailedPrecondition},
		{apierrors.NewServiceUnavailable("not the leader"), codes.Unavailable},
		{errors.New("dial tcp: refused"), codes.Unavailable},
	} {
		got := grpcError(tc.err)
		if status.Code(got) != tc.code || status.Convert(got).Message() == "" {
			t.Errorf("%v -> %v, want %s", tc.err, got, tc.code)
		}
	}
	if m := status.Convert(grpcError(apierrors.NewForbidden(gr, "", errors.New("ipam also needs list allocations.ipledger.io")))).Message(); m == "" ||
		!strings.Contains(m, "ipam also needs list allocations.ipledger.io") {
		t.Errorf("forbidden message lost: %q", m)
	}
}
