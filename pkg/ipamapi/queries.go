package ipamapi

import (
	"google.golang.org/protobuf/proto"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	ipamv1 "github.com/ipledger/ipledger/proto/ipledger/ipam/v1"
)

// PoolPreview is a create-only question, as a SubjectAccessReview is:
// POST spec (an IPPool manifest, or its deletion), get PreviewPool's
// answer in status. Nothing is stored; cluster-scoped, unnamed.
type PoolPreview struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec PoolPreviewSpec `json:"spec"`
	// Status is PreviewPoolResponse, field for field (its JSON names are
	// the proto's).
	Status *ipamv1.PreviewPoolResponse `json:"status,omitempty"`
}

// PoolPreviewSpec is PreviewPoolRequest.
type PoolPreviewSpec struct {
	// Manifest is one IPPool in YAML or JSON, as `kubectl apply -f` takes it.
	Manifest string `json:"manifest"`
	// Delete previews deleting the pool the manifest names.
	Delete bool `json:"delete,omitempty"`
}

// HistoryQuery is a create-only question: POST spec (AddressHistory's
// filters and page), get the page in status. Cluster-scoped, it answers
// every namespace the caller may `get history.ipledger.io` in;
// LocalHistoryQuery, namespaced, answers only its namespace.
type HistoryQuery struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec HistoryQuerySpec `json:"spec"`
	// Status is AddressHistoryResponse (its JSON names are the proto's).
	Status *ipamv1.AddressHistoryResponse `json:"status,omitempty"`
}

// LocalHistoryQuery is HistoryQuery within one namespace: the entries of
// that namespace's Services only, for a person granted `get
// history.ipledger.io` there by a RoleBinding.
type LocalHistoryQuery HistoryQuery

// HistoryQuerySpec is AddressHistoryRequest.
type HistoryQuerySpec struct {
	IP string `json:"ip,omitempty"`
	// Service keeps only one Service's entries.
	Service *ServiceRef `json:"service,omitempty"`
	Pool    string      `json:"pool,omitempty"`
	// Since: RFC 3339, or a date (its midnight UTC).
	Since     string `json:"since,omitempty"`
	PageSize  int32  `json:"pageSize,omitempty"`
	PageToken string `json:"pageToken,omitempty"`
}

// Request is the spec as AddressHistory's request.
func (s HistoryQuerySpec) Request() *ipamv1.AddressHistoryRequest {
	r := &ipamv1.AddressHistoryRequest{Ip: s.IP, Pool: s.Pool, Since: s.Since, PageSize: s.PageSize, PageToken: s.PageToken}
	if s.Service != nil {
		r.Service = &ipamv1.ServiceRef{Namespace: s.Service.Namespace, Name: s.Service.Name}
	}
	return r
}

// HistoryQuerySpecFrom is the request as a spec.
func HistoryQuerySpecFrom(r *ipamv1.AddressHistoryRequest) HistoryQuerySpec {
	s := HistoryQuerySpec{IP: r.GetIp(), Pool: r.GetPool(), Since: r.GetSince(), PageSize: r.GetPageSize(), PageToken: r.GetPageToken()}
	if svc := r.GetService(); svc != nil {
		s.Service = &ServiceRef{Namespace: svc.GetNamespace(), Name: svc.GetName()}
	}
	return s
}

// DeepCopyObject implements runtime.Object.
func (p *PoolPreview) DeepCopyObject() runtime.Object {
	c := *p
	p.ObjectMeta.DeepCopyInto(&c.ObjectMeta)
	if p.Status != nil {
		c.Status = proto.Clone(p.Status).(*ipamv1.PreviewPoolResponse)
	}
	return &c
}

// DeepCopyObject implements runtime.Object.
func (q *HistoryQuery) DeepCopyObject() runtime.Object {
	c := *q
	q.ObjectMeta.DeepCopyInto(&c.ObjectMeta)
	if q.Spec.Service != nil {
		s := *q.Spec.Service
		c.Spec.Service = &s
	}
	if q.Status != nil {
		c.Status = proto.Clone(q.Status).(*ipamv1.AddressHistoryResponse)
	}
	return &c
}

// DeepCopyObject implements runtime.Object.
func (q *LocalHistoryQuery) DeepCopyObject() runtime.Object {
	c := LocalHistoryQuery(*(*HistoryQuery)(q).DeepCopyObject().(*HistoryQuery))
	return &c
}

// OpenAPIModelName implements util.OpenAPIModelNamer.
func (PoolPreview) OpenAPIModelName() string { return modelPrefix + "PoolPreview" }

// OpenAPIModelName implements util.OpenAPIModelNamer.
func (HistoryQuery) OpenAPIModelName() string { return modelPrefix + "HistoryQuery" }

// OpenAPIModelName implements util.OpenAPIModelNamer.
func (LocalHistoryQuery) OpenAPIModelName() string { return modelPrefix + "LocalHistoryQuery" }
