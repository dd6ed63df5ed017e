// Package ipamapi holds the types of api.ipledger.io/v1alpha1, the API ipam
// serves through the Kubernetes aggregation layer
// (services/ipam/internal/aggregated), and their conversions from and to
// ipledger.ipam.v1's messages, so that ipam and kubectl-ipledger agree on
// one definition.
package ipamapi

import (
	"slices"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Group is the API group ipam serves through the aggregation layer. It is
// not ipledger.io, the group of the IPPool and ExternalWorkload CRDs: a
// group is served by CRDs or by an APIService, and sharing one would make
// each version's owner a surprise. The virtual resources ipam authorizes
// against stay those of ipledger.io (authorize.go), so the ClusterRoles
// ipledger:viewer and ipledger:operator keep their meaning.
const Group = "api.ipledger.io"

// Version is the only version served; alpha until the plugin's use of it
// has been through a release.
const Version = "v1alpha1"

// SchemeGroupVersion is Group/Version.
var SchemeGroupVersion = schema.GroupVersion{Group: Group, Version: Version}

// Allocation is one address held for one Service (or kept for it after it
// went away), as ListAllocations answers. Namespaced by the Service's
// namespace; its name is the Service's name and the address
// (AllocationName), since a Service may hold two (dual-stack) and
// Services sharing a key hold the same one.
type Allocation struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// IP is the address.
	IP string `json:"ip"`
	// Service is the name of the Service, in the allocation's namespace.
	Service string `json:"service"`
	// Pool is the IPPool the address comes from.
	Pool string `json:"pool,omitempty"`
	// SharingKey is the Service's ipledger.io/sharing-key, if any.
	SharingKey string `json:"sharingKey,omitempty"`
	// AllocatedAt is when the ledger recorded the allocation (RFC 3339).
	AllocatedAt string `json:"allocatedAt,omitempty"`
	// KeptUntil is set when the Service is gone and the address is kept
	// for it until then (RFC 3339).
	KeptUntil string `json:"keptUntil,omitempty"`
}

// AllocationList is a list of Allocations.
type AllocationList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Allocation `json:"items"`
}

// FamilyUsage is a pool's usage of one address family, as ListPools counts.
type FamilyUsage struct {
	Total     string `json:"total,omitempty"`
	Used      string `json:"used,omitempty"`
	Held      string `json:"held,omitempty"`
	Available string `json:"available,omitempty"`
}

// PoolCondition is one of an IPPool's conditions as ipam sees it.
type PoolCondition struct {
	Type    string `json:"type"`
	Status  string `json:"status"`
	Reason  string `json:"reason,omitempty"`
	Message string `json:"message,omitempty"`
}

// Pool is an IPPool with what ipam knows of its use (cluster-scoped, named
// as the IPPool).
type Pool struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Addresses   []string        `json:"addresses,omitempty"`
	IPv4        *FamilyUsage    `json:"ipv4,omitempty"`
	IPv6        *FamilyUsage    `json:"ipv6,omitempty"`
	AutoAssign  bool            `json:"autoAssign"`
	Priority    int32           `json:"priority,omitempty"`
	HeldOutside int64           `json:"heldOutside,omitempty"`
	Kept        int64           `json:"kept,omitempty"`
	Conditions  []PoolCondition `json:"conditions,omitempty"`
}

// PoolList is a list of Pools.
type PoolList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Pool `json:"items"`
}

// PoolVerdict says whether one pool may serve the Service, and why not.
type PoolVerdict struct {
	Pool     string `json:"pool"`
	Eligible bool   `json:"eligible"`
	Reason   string `json:"reason,omitempty"`
	Message  string `json:"message,omitempty"`
}

// Announcement is whether one of the Service's addresses is announced.
type Announcement struct {
	IP        string `json:"ip"`
	State     string `json:"state,omitempty"`
	Announcer string `json:"announcer,omitempty"`
	Node      string `json:"node,omitempty"`
	Since     string `json:"since,omitempty"`
	Served    bool   `json:"served"`
	Message   string `json:"message,omitempty"`
}

// Explanation is ExplainService's answer for the Service of the same
// namespace and name: what `kubectl ipledger why` prints. Get only.
type Explanation struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Decision      string         `json:"decision"`
	Reason        string         `json:"reason,omitempty"`
	IPs           []string       `json:"ips,omitempty"`
	Verdicts      []PoolVerdict  `json:"verdicts,omitempty"`
	Gateway       string         `json:"gateway,omitempty"`
	Announcements []Announcement `json:"announcements,omitempty"`
}

// ExplanationList exists for the scheme's sake (explanations are not
// listed).
type ExplanationList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Explanation `json:"items"`
}

// DeepCopyObject implements runtime.Object.
func (a *Allocation) DeepCopyObject() runtime.Object {
	c := *a
	a.ObjectMeta.DeepCopyInto(&c.ObjectMeta)
	return &c
}

// DeepCopyObject implements runtime.Object.
func (l *AllocationList) DeepCopyObject() runtime.Object {
	c := *l
	l.ListMeta.DeepCopyInto(&c.ListMeta)
	c.Items = make([]Allocation, len(l.Items))
	for i := range l.Items {
		c.Items[i] = *l.Items[i].DeepCopyObject().(*Allocation)
	}
	return &c
}

// DeepCopyObject implements runtime.Object.
func (p *Pool) DeepCopyObject() runtime.Object {
	c := *p
	p.ObjectMeta.DeepCopyInto(&c.ObjectMeta)
	c.Addresses = slices.Clone(p.Addresses)
	c.Conditions = slices.Clone(p.Conditions)
	if p.IPv4 != nil {
		u := *p.IPv4
		c.IPv4 = &u
	}
	if p.IPv6 != nil {
		u := *p.IPv6
		c.IPv6 = &u
	}
	return &c
}

// DeepCopyObject implements runtime.Object.
func (l *PoolList) DeepCopyObject() runtime.Object {
	c := *l
	l.ListMeta.DeepCopyInto(&c.ListMeta)
	c.Items = make([]Pool, len(l.Items))
	for i := range l.Items {
		c.Items[i] = *l.Items[i].DeepCopyObject().(*Pool)
	}
	return &c
}

// DeepCopyObject implements runtime.Object.
func (e *Explanation) DeepCopyObject() runtime.Object {
	c := *e
	e.ObjectMeta.DeepCopyInto(&c.ObjectMeta)
	c.IPs = slices.Clone(e.IPs)
	c.Verdicts = slices.Clone(e.Verdicts)
	c.Announcements = slices.Clone(e.Announcements)
	return &c
}

// DeepCopyObject implements runtime.Object.
func (l *ExplanationList) DeepCopyObject() runtime.Object {
	c := *l
	l.ListMeta.DeepCopyInto(&c.ListMeta)
	c.Items = make([]Explanation, len(l.Items))
	for i := range l.Items {
		c.Items[i] = *l.Items[i].DeepCopyObject().(*Explanation)
	}
	return &c
}

// NewScheme registers the types under Group/Version and, as the same Go
// types, under the internal version the generic API server converts
// through (there is nothing to convert: one version, no storage), plus what
// the generic API server needs of meta/v1.
func NewScheme() *runtime.Scheme {
	s := runtime.NewScheme()
	types := []runtime.Object{&Allocation{}, &AllocationList{}, &Pool{}, &PoolList{}, &Explanation{}, &ExplanationList{}, &Reservation{}, &ReservationList{},
		&PoolPreview{}, &HistoryQuery{}, &LocalHistoryQuery{}}
	s.AddKnownTypes(SchemeGroupVersion, types...)
	s.AddKnownTypes(schema.GroupVersion{Group: Group, Version: runtime.APIVersionInternal}, types...)
	metav1.AddToGroupVersion(s, SchemeGroupVersion)
	metav1.AddToGroupVersion(s, schema.GroupVersion{Version: "v1"})
	s.AddUnversionedTypes(schema.GroupVersion{Version: "v1"},
		&metav1.Status{}, &metav1.APIVersions{}, &metav1.APIGroupList{}, &metav1.APIGroup{}, &metav1.APIResourceList{})
	return s
}

// ServiceRef names a Service.
type ServiceRef struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
}

// Reservation holds an address outside any Service (cluster-scoped; its
// name is the address, ReservationName). Created and deleted by people
// with ipledger:operator; each is attributed to its author in ipam's log,
// its Events and the address history.
type Reservation struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// IP is the address (derived from the name when left empty).
	IP string `json:"ip,omitempty"`
	// OwnerNote says who holds the address and why. Required.
	OwnerNote string `json:"ownerNote"`
	// ForService, when set, is the one Service that may take the address.
	ForService *ServiceRef `json:"forService,omitempty"`
	// CreatedAt is when ipam recorded it (RFC 3339).
	CreatedAt string `json:"createdAt,omitempty"`
}

// ReservationList exists for the scheme's sake (reservations are read one
// by one).
type ReservationList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Reservation `json:"items"`
}

// DeepCopyObject implements runtime.Object.
func (r *Reservation) DeepCopyObject() runtime.Object {
	c := *r
	r.ObjectMeta.DeepCopyInto(&c.ObjectMeta)
	if r.ForService != nil {
		f := *r.ForService
		c.ForService = &f
	}
	return &c
}

// DeepCopyObject implements runtime.Object.
func (l *ReservationList) DeepCopyObject() runtime.Object {
	c := *l
	l.ListMeta.DeepCopyInto(&c.ListMeta)
	c.Items = make([]Reservation, len(l.Items))
	for i := range l.Items {
		c.Items[i] = *l.Items[i].DeepCopyObject().(*Reservation)
	}
	return &c
}

// modelPrefix names the OpenAPI models of the types (OpenAPIModelName):
// the same name in the scheme's GroupVersionKind extensions and in the
// published definitions, which kubectl matches to validate what it sends.
const modelPrefix = "io.ipledger.api.v1alpha1."

// OpenAPIModelName implements util.OpenAPIModelNamer.
func (Allocation) OpenAPIModelName() string { return modelPrefix + "Allocation" }

// OpenAPIModelName implements util.OpenAPIModelNamer.
func (AllocationList) OpenAPIModelName() string { return modelPrefix + "AllocationList" }

// OpenAPIModelName implements util.OpenAPIModelNamer.
func (Pool) OpenAPIModelName() string { return modelPrefix + "Pool" }

// OpenAPIModelName implements util.OpenAPIModelNamer.
func (PoolList) OpenAPIModelName() string { return modelPrefix + "PoolList" }

// OpenAPIModelName implements util.OpenAPIModelNamer.
func (Explanation) OpenAPIModelName() string { return modelPrefix + "Explanation" }

// OpenAPIModelName implements util.OpenAPIModelNamer.
func (ExplanationList) OpenAPIModelName() string { return modelPrefix + "ExplanationList" }

// OpenAPIModelName implements util.OpenAPIModelNamer.
func (Reservation) OpenAPIModelName() string { return modelPrefix + "Reservation" }

// OpenAPIModelName implements util.OpenAPIModelNamer.
func (ReservationList) OpenAPIModelName() string { return modelPrefix + "ReservationList" }
