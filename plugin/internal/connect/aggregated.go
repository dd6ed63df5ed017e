package connect

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"slices"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/rest"

	"github.com/ipledger/ipledger/pkg/ipamapi"
	ipamv1 "github.com/ipledger/ipledger/proto/ipledger/ipam/v1"
	ipamv1grpc "github.com/ipledger/ipledger/proto/ipledger/ipam/v1/ipamv1grpc"
)

// The values of --api.
const (
	APIAuto       = "auto"
	APIAggregated = "aggregated"
	APIGRPC       = "grpc"
)

// aggregatedResources are the IPAMService methods the aggregated API
// (api.ipledger.io, components/aggregated-api) answers, and the resource
// each needs; the other (GetAllocation) goes over gRPC.
var aggregatedResources = map[string]string{
	"ListAllocations": "allocations", "ListPools": "pools", "ExplainService": "explanations",
	"ReserveAddress": "reservations", "ReleaseReservation": "reservations",
	"PreviewPool": "poolpreviews", "AddressHistory": "historyqueries",
}

// AggregatedMethods are the methods of aggregatedResources, sorted.
var AggregatedMethods = slices.Sorted(maps.Keys(aggregatedResources))

// UseAggregated says whether a call of method tries the aggregated API:
// --api=aggregated, or auto without the flags that choose gRPC (an
// address, a token, a ServiceAccount).
func UseAggregated(f Flags, method string) bool {
	if !slices.Contains(AggregatedMethods, method) {
		return false
	}
	switch f.API {
	case APIAggregated:
		return true
	case APIGRPC:
		return false
	}
	return f.Address == "" && f.TokenFile == "" && f.ServiceAccount == ""
}

// DialAggregated returns a Conn whose IPAM calls go to the aggregated API
// with the kubeconfig's own credentials, the person's; ok is false when
// the cluster does not serve api.ipledger.io/v1alpha1 (no APIService, or
// ipam not Ready) or, an older ipam, not the resource method needs, for
// the caller to use gRPC instead.
func DialAggregated(kube genericclioptions.RESTClientGetter, method string) (*Conn, bool, error) {
	cfg, err := kube.ToRESTConfig()
	if err != nil {
		return nil, false, fmt.Errorf("kubeconfig: %w", err)
	}
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return nil, false, fmt.Errorf("kubeconfig: %w", err)
	}
	rl, err := dc.ServerResourcesForGroupVersion(ipamapi.SchemeGroupVersion.String())
	if err != nil || !slices.ContainsFunc(rl.APIResources, func(r metav1.APIResource) bool { return r.Name == aggregatedResources[method] }) {
		return nil, false, nil
	}
	c := rest.CopyConfig(cfg)
	c.GroupVersion = &ipamapi.SchemeGroupVersion
	c.APIPath = "/apis"
	c.NegotiatedSerializer = serializer.NewCodecFactory(ipamapi.NewScheme()).WithoutConversion()
	rc, err := rest.RESTClientFor(c)
	if err != nil {
		return nil, false, fmt.Errorf("kubeconfig: %w", err)
	}
	return &Conn{IPAM: &aggregatedIPAM{rc: rc}}, true, nil
}

// aggregatedIPAM answers AggregatedMethods from api.ipledger.io and turns
// its objects back into IPAMService's messages, so that every command
// prints what it printed from gRPC. Other methods are never called on it
// (UseAggregated).
type aggregatedIPAM struct {
	ipamv1grpc.IPAMServiceClient // nil: the methods the aggregated API does not serve
	rc                           *rest.RESTClient
}

func (a *aggregatedIPAM) ListAllocations(ctx context.Context, req *ipamv1.ListAllocationsRequest, _ ...grpc.CallOption) (*ipamv1.ListAllocationsResponse, error) {
	var list ipamapi.AllocationList
	if err := a.rc.Get().Namespace(req.GetNamespace()).Resource("allocations").Do(ctx).Into(&list); err != nil {
		return nil, grpcError(err)
	}
	out := &ipamv1.ListAllocationsResponse{}
	for i := range list.Items {
		if req.GetPool() == "" || list.Items[i].Pool == req.GetPool() {
			out.Allocations = append(out.Allocations, list.Items[i].Proto())
		}
	}
	return out, nil
}

func (a *aggregatedIPAM) ListPools(ctx context.Context, _ *ipamv1.ListPoolsRequest, _ ...grpc.CallOption) (*ipamv1.ListPoolsResponse, error) {
	var list ipamapi.PoolList
	if err := a.rc.Get().Resource("pools").Do(ctx).Into(&list); err != nil {
		return nil, grpcError(err)
	}
	out := &ipamv1.ListPoolsResponse{}
	for i := range list.Items {
		out.Pools = append(out.Pools, list.Items[i].Proto())
	}
	return out, nil
}

func (a *aggregatedIPAM) ExplainService(ctx context.Context, req *ipamv1.ExplainServiceRequest, _ ...grpc.CallOption) (*ipamv1.ExplainServiceResponse, error) {
	var e ipamapi.Explanation
	svc := req.GetService()
	if err := a.rc.Get().Namespace(svc.GetNamespace()).Resource("explanations").Name(svc.GetName()).Do(ctx).Into(&e); err != nil {
		return nil, grpcError(err)
	}
	return e.Proto(), nil
}

func (a *aggregatedIPAM) ReserveAddress(ctx context.Context, req *ipamv1.ReserveAddressRequest, _ ...grpc.CallOption) (*ipamv1.ReserveAddressResponse, error) {
	ip, err := netip.ParseAddr(req.GetIp())
	if err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "ip: %q is not an IP address", req.GetIp())
	}
	r := &ipamapi.Reservation{ObjectMeta: metav1.ObjectMeta{Name: ipamapi.ReservationName(ip)}, IP: ip.String(), OwnerNote: req.GetOwnerNote()}
	if fs := req.GetForService(); fs != nil {
		r.ForService = &ipamapi.ServiceRef{Namespace: fs.GetNamespace(), Name: fs.GetName()}
	}
	var out ipamapi.Reservation
	if err := a.rc.Post().Resource("reservations").Body(r).Do(ctx).Into(&out); err != nil {
		return nil, grpcError(err)
	}
	return &ipamv1.ReserveAddressResponse{Reservation: out.Proto()}, nil
}

func (a *aggregatedIPAM) ReleaseReservation(ctx context.Context, req *ipamv1.ReleaseReservationRequest, _ ...grpc.CallOption) (*ipamv1.ReleaseReservationResponse, error) {
	ip, err := netip.ParseAddr(req.GetIp())
	if err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "ip: %q is not an IP address", req.GetIp())
	}
	var out ipamapi.Reservation
	if err := a.rc.Delete().Resource("reservations").Name(ipamapi.ReservationName(ip)).Do(ctx).Into(&out); err != nil {
		return nil, grpcError(err)
	}
	return &ipamv1.ReleaseReservationResponse{Reservation: out.Proto()}, nil
}

func (a *aggregatedIPAM) PreviewPool(ctx context.Context, req *ipamv1.PreviewPoolRequest, _ ...grpc.CallOption) (*ipamv1.PreviewPoolResponse, error) {
	p := &ipamapi.PoolPreview{Spec: ipamapi.PoolPreviewSpec{Manifest: string(req.GetManifest()), Delete: req.GetDelete()}}
	var out ipamapi.PoolPreview
	if err := a.rc.Post().Resource("poolpreviews").Body(p).Do(ctx).Into(&out); err != nil {
		return nil, grpcError(err)
	}
	if out.Status == nil {
		return nil, status.Error(codes.Internal, "poolpreviews.api.ipledger.io answered without a status")
	}
	return out.Status, nil
}

// AddressHistory asks historyqueries (every namespace the person may get
// history in) or, for one Service, localhistoryqueries in its namespace
// (enough for a person whose grant is a RoleBinding there).
func (a *aggregatedIPAM) AddressHistory(ctx context.Context, req *ipamv1.AddressHistoryRequest, _ ...grpc.CallOption) (*ipamv1.AddressHistoryResponse, error) {
	spec := ipamapi.HistoryQuerySpecFrom(req)
	var resp *ipamv1.AddressHistoryResponse
	if ns := req.GetService().GetNamespace(); ns != "" {
		var out ipamapi.LocalHistoryQuery
		if err := a.rc.Post().Namespace(ns).Resource("localhistoryqueries").Body(&ipamapi.LocalHistoryQuery{Spec: spec}).Do(ctx).Into(&out); err != nil {
			return nil, grpcError(err)
		}
		resp = out.Status
	} else {
		var out ipamapi.HistoryQuery
		if err := a.rc.Post().Resource("historyqueries").Body(&ipamapi.HistoryQuery{Spec: spec}).Do(ctx).Into(&out); err != nil {
			return nil, grpcError(err)
		}
		resp = out.Status
	}
	if resp == nil {
		return nil, status.Error(codes.Internal, "historyqueries.api.ipledger.io answered without a status")
	}
	return resp, nil
}

// grpcError turns the API server's status into the gRPC status the
// commands and diagnose.Explain understand, keeping its message (which
// names the missing grant, or ipam's field and fix).
func grpcError(err error) error {
	var se apierrors.APIStatus
	if !errors.As(err, &se) {
		return status.Error(codes.Unavailable, err.Error())
	}
	msg := se.Status().Message
	switch {
	case apierrors.IsForbidden(err):
		return status.Error(codes.PermissionDenied, msg)
	case apierrors.IsUnauthorized(err):
		return status.Error(codes.Unauthenticated, msg)
	case apierrors.IsNotFound(err):
		return status.Error(codes.NotFound, msg)
	case apierrors.IsBadRequest(err), apierrors.IsInvalid(err):
		return status.Error(codes.InvalidArgument, msg)
	case apierrors.IsConflict(err), apierrors.IsAlreadyExists(err):
		return status.Error(codes.FailedPrecondition, msg)
	case apierrors.IsTooManyRequests(err):
		return status.Error(codes.ResourceExhausted, msg)
	case apierrors.IsTimeout(err), apierrors.IsServerTimeout(err):
		return status.Error(codes.DeadlineExceeded, msg)
	case apierrors.IsServiceUnavailable(err):
		return status.Error(codes.Unavailable, msg)
	}
	return status.Error(codes.Internal, msg)
}

// AggregatedGroupVersion is the aggregated API's group and version.
var AggregatedGroupVersion = ipamapi.SchemeGroupVersion.String()
