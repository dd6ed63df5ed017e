package aggregated

import (
	"context"
	"fmt"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metainternalversion "k8s.io/apimachinery/pkg/apis/meta/internalversion"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/duration"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/apiserver/pkg/registry/rest"

	"github.com/ipledger/ipledger/pkg/ipamapi"
	ipamv1 "github.com/ipledger/ipledger/proto/ipledger/ipam/v1"
)

// Reads is the part of ipledger.ipam.v1.IPAMService the aggregated API
// answers from: ipam's own server, called in process, so that both APIs
// give the same answer from the same state.
type Reads interface {
	ListAllocations(context.Context, *ipamv1.ListAllocationsRequest) (*ipamv1.ListAllocationsResponse, error)
	ListPools(context.Context, *ipamv1.ListPoolsRequest) (*ipamv1.ListPoolsResponse, error)
	ExplainService(context.Context, *ipamv1.ExplainServiceRequest) (*ipamv1.ExplainServiceResponse, error)
}

// listPageSize is the page ListAllocations is asked for; the aggregated
// list gathers every page (kubectl's chunking is not offered: the list is
// built from ipam's memory, not from etcd).
const listPageSize = 1000

// allocations serves allocations (list, get).
type allocations struct{ reads Reads }

var (
	_ rest.Lister               = (*allocations)(nil)
	_ rest.Getter               = (*allocations)(nil)
	_ rest.Scoper               = (*allocations)(nil)
	_ rest.SingularNameProvider = (*allocations)(nil)
	_ rest.Storage              = (*allocations)(nil)
)

func (*allocations) New() runtime.Object     { return &ipamapi.Allocation{} }
func (*allocations) NewList() runtime.Object { return &ipamapi.AllocationList{} }
func (*allocations) Destroy()                {}
func (*allocations) NamespaceScoped() bool   { return true }
func (*allocations) GetSingularName() string { return "allocation" }
func (*allocations) resource() schema.GroupResource {
	return ipamapi.SchemeGroupVersion.WithResource("allocations").GroupResource()
}

func (s *allocations) List(ctx context.Context, _ *metainternalversion.ListOptions) (runtime.Object, error) {
	ns, _ := genericapirequest.NamespaceFrom(ctx)
	return s.list(ctx, ns)
}

func (s *allocations) list(ctx context.Context, namespace string) (*ipamapi.AllocationList, error) {
	list := &ipamapi.AllocationList{}
	req := &ipamv1.ListAllocationsRequest{Namespace: namespace, PageSize: listPageSize}
	for {
		resp, err := s.reads.ListAllocations(ctx, req)
		if err != nil {
			return nil, apiError(s.resource(), "", err)
		}
		for _, a := range resp.GetAllocations() {
			if item, ok := ipamapi.AllocationFrom(a); ok { // else held outside any Service: a reservation
				list.Items = append(list.Items, item)
			}
		}
		if resp.GetNextPageToken() == "" {
			return list, nil
		}
		req.PageToken = resp.GetNextPageToken()
	}
}

func (s *allocations) Get(ctx context.Context, name string, _ *metav1.GetOptions) (runtime.Object, error) {
	ns, _ := genericapirequest.NamespaceFrom(ctx)
	list, err := s.list(ctx, ns)
	if err != nil {
		return nil, err
	}
	for i := range list.Items {
		if list.Items[i].Name == name {
			return &list.Items[i], nil
		}
	}
	return nil, apierrors.NewNotFound(s.resource(), name)
}

func (s *allocations) ConvertToTable(_ context.Context, obj runtime.Object, _ runtime.Object) (*metav1.Table, error) {
	return table(obj, []metav1.TableColumnDefinition{
		{Name: "Name", Type: "string", Format: "name"},
		{Name: "IP", Type: "string"},
		{Name: "Service", Type: "string"},
		{Name: "Pool", Type: "string"},
		{Name: "Kept-Until", Type: "string"},
		{Name: "Age", Type: "date"},
	}, func(o runtime.Object) []any {
		a := o.(*ipamapi.Allocation)
		return []any{a.Name, a.IP, a.Service, a.Pool, orNone(a.KeptUntil), age(a.CreationTimestamp)}
	})
}

// pools serves pools (list, get).
type pools struct{ reads Reads }

var (
	_ rest.Lister = (*pools)(nil)
	_ rest.Getter = (*pools)(nil)
)

func (*pools) New() runtime.Object     { return &ipamapi.Pool{} }
func (*pools) NewList() runtime.Object { return &ipamapi.PoolList{} }
func (*pools) Destroy()                {}
func (*pools) NamespaceScoped() bool   { return false }
func (*pools) GetSingularName() string { return "pool" }
func (*pools) resource() schema.GroupResource {
	return ipamapi.SchemeGroupVersion.WithResource("pools").GroupResource()
}

func (s *pools) List(ctx context.Context, _ *metainternalversion.ListOptions) (runtime.Object, error) {
	resp, err := s.reads.ListPools(ctx, &ipamv1.ListPoolsRequest{})
	if err != nil {
		return nil, apiError(s.resource(), "", err)
	}
	list := &ipamapi.PoolList{}
	for _, p := range resp.GetPools() {
		list.Items = append(list.Items, ipamapi.PoolFrom(p))
	}
	return list, nil
}

func (s *pools) Get(ctx context.Context, name string, _ *metav1.GetOptions) (runtime.Object, error) {
	obj, err := s.List(ctx, nil)
	if err != nil {
		return nil, err
	}
	for _, p := range obj.(*ipamapi.PoolList).Items {
		if p.Name == name {
			return &p, nil
		}
	}
	return nil, apierrors.NewNotFound(s.resource(), name)
}

func (s *pools) ConvertToTable(_ context.Context, obj runtime.Object, _ runtime.Object) (*metav1.Table, error) {
	return table(obj, []metav1.TableColumnDefinition{
		{Name: "Name", Type: "string", Format: "name"},
		{Name: "Addresses", Type: "string"},
		{Name: "IPv4-Used", Type: "string"},
		{Name: "IPv4-Available", Type: "string"},
		{Name: "Auto-Assign", Type: "boolean"},
		{Name: "Ready", Type: "string"},
	}, func(o runtime.Object) []any {
		p := o.(*ipamapi.Pool)
		used, avail := "<none>", "<none>"
		if p.IPv4 != nil {
			used, avail = p.IPv4.Used+"/"+p.IPv4.Total, p.IPv4.Available
		}
		ready := "Unknown"
		for _, c := range p.Conditions {
			if c.Type == "Ready" {
				ready = c.Status
			}
		}
		return []any{p.Name, strings.Join(p.Addresses, ","), used, avail, p.AutoAssign, ready}
	})
}

// explanations serves explanations (get only: one per Service, computed on
// demand).
type explanations struct{ reads Reads }

var _ rest.Getter = (*explanations)(nil)

func (*explanations) New() runtime.Object     { return &ipamapi.Explanation{} }
func (*explanations) Destroy()                {}
func (*explanations) NamespaceScoped() bool   { return true }
func (*explanations) GetSingularName() string { return "explanation" }

func (s *explanations) Get(ctx context.Context, name string, _ *metav1.GetOptions) (runtime.Object, error) {
	ns, _ := genericapirequest.NamespaceFrom(ctx)
	resp, err := s.reads.ExplainService(ctx, &ipamv1.ExplainServiceRequest{Service: &ipamv1.ServiceRef{Namespace: ns, Name: name}})
	if err != nil {
		return nil, apiError(ipamapi.SchemeGroupVersion.WithResource("explanations").GroupResource(), name, err)
	}
	return ipamapi.ExplanationFrom(ns, name, resp), nil
}

// apiError turns ipam's gRPC status into the Kubernetes status kubectl
// prints, keeping ipam's message (which names the object and the fix).
func apiError(gr schema.GroupResource, name string, err error) error {
	st, ok := status.FromError(err)
	if !ok {
		return apierrors.NewInternalError(err)
	}
	msg := st.Message()
	switch st.Code() {
	case codes.NotFound:
		e := apierrors.NewNotFound(gr, name)
		e.ErrStatus.Message = msg
		return e
	case codes.InvalidArgument:
		return apierrors.NewBadRequest(msg)
	case codes.PermissionDenied:
		return apierrors.NewForbidden(gr, name, fmt.Errorf("%s", msg))
	case codes.FailedPrecondition, codes.AlreadyExists, codes.Aborted:
		return apierrors.NewConflict(gr, name, fmt.Errorf("%s", msg))
	case codes.Unavailable:
		return apierrors.NewServiceUnavailable(msg)
	case codes.ResourceExhausted:
		return apierrors.NewTooManyRequests(msg, 1)
	case codes.DeadlineExceeded, codes.Canceled:
		return apierrors.NewTimeoutError(msg, 1)
	default:
		return apierrors.NewInternalError(err)
	}
}

// table renders obj (one object or a list) with columns and cells.
func table(obj runtime.Object, columns []metav1.TableColumnDefinition, cells func(runtime.Object) []any) (*metav1.Table, error) {
	t := &metav1.Table{ColumnDefinitions: columns}
	add := func(o runtime.Object) {
		t.Rows = append(t.Rows, metav1.TableRow{Cells: cells(o), Object: runtime.RawExtension{Object: o}})
	}
	if meta.IsListType(obj) {
		if err := meta.EachListItem(obj, func(o runtime.Object) error { add(o); return nil }); err != nil {
			return nil, err
		}
		return t, nil
	}
	add(obj)
	return t, nil
}

func orNone(s string) string {
	if s == "" {
		return "<none>"
	}
	return s
}

func age(t metav1.Time) string {
	if t.IsZero() {
		return "<unknown>"
	}
	return duration.HumanDuration(time.Since(t.Time))
}

func statusMessage(err error) string {
	if st, ok := status.FromError(err); ok {
		return st.Message()
	}
	return err.Error()
}
