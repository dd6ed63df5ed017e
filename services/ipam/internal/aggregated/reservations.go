package aggregated

import (
	"context"
	"fmt"
	"net/netip"
	"strings"

	authenticationv1 "k8s.io/api/authentication/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/apiserver/pkg/registry/rest"

	"github.com/ipledger/ipledger/pkg/authz"
	"github.com/ipledger/ipledger/pkg/ipamapi"
	ipamv1 "github.com/ipledger/ipledger/proto/ipledger/ipam/v1"
	"github.com/ipledger/ipledger/services/ipam/internal/server"
)

// Writes is the part of IPAMService that reservations use.
type Writes interface {
	GetAllocation(context.Context, *ipamv1.GetAllocationRequest) (*ipamv1.GetAllocationResponse, error)
	ReserveAddress(context.Context, *ipamv1.ReserveAddressRequest) (*ipamv1.ReserveAddressResponse, error)
	ReleaseReservation(context.Context, *ipamv1.ReleaseReservationRequest) (*ipamv1.ReleaseReservationResponse, error)
}

// IPAM is what the aggregated API asks of ipam (its IPAMService server).
type IPAM interface {
	Reads
	Writes
	Queries
}

// notLeaderRetryAfter is the Retry-After of a reservation sent to a
// standby: the kube-apiserver picks an endpoint of the Service at random,
// and client-go (kubectl) retries a 503 carrying Retry-After (up to 10
// times), so the request reaches the leader without the standby forwarding
// it.
const notLeaderRetryAfter = 1

// reservationIP parses an ipamapi.ReservationName.
func reservationIP(name string) (netip.Addr, error) {
	ip, err := netip.ParseAddr(strings.ReplaceAll(name, "-", ":"))
	if err != nil || ipamapi.ReservationName(ip) != name {
		return netip.Addr{}, fmt.Errorf("metadata.name: %q is not an address in the form of a reservation's name "+
			"(an IPv4 address as is, e.g. 192.0.2.7; an IPv6 address with '-' for ':', e.g. fd00--7)", name)
	}
	return ip, nil
}

var reservationsResource = ipamapi.SchemeGroupVersion.WithResource("reservations").GroupResource()

// reservations serves reservations (create, get, delete).
type reservations struct{ ipam Writes }

var (
	_ rest.Creater         = (*reservations)(nil)
	_ rest.Getter          = (*reservations)(nil)
	_ rest.GracefulDeleter = (*reservations)(nil)
	_ rest.Updater         = (*reservations)(nil)
)

func (*reservations) New() runtime.Object     { return &ipamapi.Reservation{} }
func (*reservations) Destroy()                {}
func (*reservations) NamespaceScoped() bool   { return false }
func (*reservations) GetSingularName() string { return "reservation" }

// asCaller carries the person the kube-apiserver authenticated as ipam's
// caller, to whom ipam attributes the write (its log, Events and history).
func asCaller(ctx context.Context) context.Context {
	u, ok := genericapirequest.UserFrom(ctx)
	if !ok {
		return ctx
	}
	extra := map[string]authenticationv1.ExtraValue{}
	for k, v := range u.GetExtra() {
		extra[k] = v
	}
	return authz.WithUser(ctx, authenticationv1.UserInfo{Username: u.GetName(), UID: u.GetUID(), Groups: u.GetGroups(), Extra: extra})
}

func (s *reservations) Create(ctx context.Context, obj runtime.Object, validate rest.ValidateObjectFunc, _ *metav1.CreateOptions) (runtime.Object, error) {
	r := obj.(*ipamapi.Reservation)
	ip, err := reservationIP(r.Name)
	if err != nil {
		return nil, apierrors.NewBadRequest(err.Error())
	}
	if r.IP != "" && r.IP != ip.String() {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("ip: %q is not the address of metadata.name %q (%s); leave ip empty or make them agree", r.IP, r.Name, ip))
	}
	if validate != nil {
		if err := validate(ctx, obj); err != nil {
			return nil, err
		}
	}
	req := &ipamv1.ReserveAddressRequest{Ip: ip.String(), OwnerNote: r.OwnerNote}
	if r.ForService != nil {
		req.ForService = &ipamv1.ServiceRef{Namespace: r.ForService.Namespace, Name: r.ForService.Name}
	}
	resp, err := s.ipam.ReserveAddress(asCaller(ctx), req)
	if err != nil {
		return nil, writeError(r.Name, err)
	}
	return ipamapi.ReservationFrom(resp.GetReservation()), nil
}

func (s *reservations) Get(ctx context.Context, name string, _ *metav1.GetOptions) (runtime.Object, error) {
	ip, err := reservationIP(name)
	if err != nil {
		return nil, apierrors.NewBadRequest(err.Error())
	}
	resp, err := s.ipam.GetAllocation(ctx, &ipamv1.GetAllocationRequest{Selector: &ipamv1.GetAllocationRequest_Ip{Ip: ip.String()}})
	if err != nil {
		return nil, apiError(reservationsResource, name, err)
	}
	if resp.GetReservation() == nil {
		return nil, apierrors.NewNotFound(reservationsResource, name)
	}
	return ipamapi.ReservationFrom(resp.GetReservation()), nil
}

func (s *reservations) Delete(ctx context.Context, name string, validate rest.ValidateObjectFunc, _ *metav1.DeleteOptions) (runtime.Object, bool, error) {
	ip, err := reservationIP(name)
	if err != nil {
		return nil, false, apierrors.NewBadRequest(err.Error())
	}
	if validate != nil {
		if err := validate(ctx, &ipamapi.Reservation{ObjectMeta: metav1.ObjectMeta{Name: name}, IP: ip.String()}); err != nil {
			return nil, false, err
		}
	}
	resp, err := s.ipam.ReleaseReservation(asCaller(ctx), &ipamv1.ReleaseReservationRequest{Ip: ip.String()})
	if err != nil {
		return nil, false, writeError(name, err)
	}
	return ipamapi.ReservationFrom(resp.GetReservation()), true, nil
}

// Update accepts a reservation unchanged (so that `kubectl apply` of the
// manifest that created it succeeds) and refuses any change of what ipam
// records: a reservation is released and made again, never edited, so the
// address history says who held it with which note. Without update,
// kubectl finds no PATCH for Reservation in the OpenAPI and validates
// what it creates as a CRD, which a person may not look up.
func (s *reservations) Update(ctx context.Context, name string, objInfo rest.UpdatedObjectInfo, _ rest.ValidateObjectFunc,
	_ rest.ValidateObjectUpdateFunc, _ bool, _ *metav1.UpdateOptions) (runtime.Object, bool, error) {
	cur, err := s.Get(ctx, name, nil)
	if err != nil {
		return nil, false, err
	}
	obj, err := objInfo.UpdatedObject(ctx, cur)
	if err != nil {
		return nil, false, err
	}
	old, upd := cur.(*ipamapi.Reservation), obj.(*ipamapi.Reservation)
	sameFor := (old.ForService == nil) == (upd.ForService == nil) && (old.ForService == nil || *old.ForService == *upd.ForService)
	if upd.OwnerNote != old.OwnerNote || !sameFor || (upd.IP != "" && upd.IP != old.IP) {
		return nil, false, apierrors.NewConflict(reservationsResource, name, fmt.Errorf(
			"a reservation is not changed in place (ownerNote %q, forService as reserved); delete it and create it again", old.OwnerNote))
	}
	return cur, false, nil
}

// writeError is apiError, but a standby's refusal is 503 with Retry-After
// (notLeaderRetryAfter) for the client to try again.
func writeError(name string, err error) error {
	if server.IsNotLeader(err) {
		st := apierrors.NewServiceUnavailable(fmt.Sprintf("%s; retry (another replica is the leader)", statusMessage(err)))
		st.ErrStatus.Details = &metav1.StatusDetails{Group: ipamapi.Group, Kind: "reservations", Name: name, RetryAfterSeconds: notLeaderRetryAfter}
		return st
	}
	return apiError(reservationsResource, name, err)
}
