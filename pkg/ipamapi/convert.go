package ipamapi

import (
	"net/netip"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	ipamv1 "github.com/ipledger/ipledger/proto/ipledger/ipam/v1"
)

// AllocationName is the object name of ip held for service: the Service's
// name and the address, with an IPv6 address's colons as dashes so that
// the name is a DNS subdomain ("web.192.0.2.7", "web.fd00--7").
func AllocationName(service, ip string) string {
	return service + "." + strings.ReplaceAll(ip, ":", "-")
}

// ReservationName is the object name of a reservation of ip: the address,
// with an IPv6 address's colons as dashes (a DNS subdomain either way).
func ReservationName(ip netip.Addr) string { return strings.ReplaceAll(ip.String(), ":", "-") }

// typeMeta is the apiVersion and kind of kind.
func typeMeta(kind string) metav1.TypeMeta {
	return metav1.TypeMeta{APIVersion: SchemeGroupVersion.String(), Kind: kind}
}

// timestamp parses ipam's RFC 3339 times (zero when absent or malformed).
func timestamp(s string) metav1.Time {
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return metav1.Time{}
	}
	return metav1.NewTime(t)
}

// AllocationFrom is a (Service-held or kept) allocation as an Allocation;
// ok is false for an entry with no Service (a reservation).
func AllocationFrom(a *ipamv1.Allocation) (out Allocation, ok bool) {
	svc := a.GetService()
	if svc == nil {
		return Allocation{}, false
	}
	return Allocation{
		TypeMeta: typeMeta("Allocation"),
		ObjectMeta: metav1.ObjectMeta{
			Namespace: svc.GetNamespace(), Name: AllocationName(svc.GetName(), a.GetIp()),
			CreationTimestamp: timestamp(a.GetAllocatedAt()),
		},
		IP: a.GetIp(), Service: svc.GetName(), Pool: a.GetPool(), SharingKey: a.GetSharingKey(),
		AllocatedAt: a.GetAllocatedAt(), KeptUntil: a.GetKeptUntil(),
	}, true
}

// Proto is the Allocation as ListAllocations answers it.
func (a *Allocation) Proto() *ipamv1.Allocation {
	return &ipamv1.Allocation{
		Ip: a.IP, Pool: a.Pool, Service: &ipamv1.ServiceRef{Namespace: a.Namespace, Name: a.Service},
		SharingKey: a.SharingKey, AllocatedAt: a.AllocatedAt, KeptUntil: a.KeptUntil,
	}
}

// PoolFrom is ListPools' pool as a Pool.
func PoolFrom(p *ipamv1.Pool) Pool {
	out := Pool{
		TypeMeta:   typeMeta("Pool"),
		ObjectMeta: metav1.ObjectMeta{Name: p.GetName()},
		Addresses:  p.GetAddresses(), AutoAssign: p.GetAutoAssign(), Priority: p.GetPriority(),
		HeldOutside: p.GetHeldOutside(), Kept: p.GetKept(),
		IPv4: usageFrom(p.GetIpv4()), IPv6: usageFrom(p.GetIpv6()),
	}
	for _, c := range p.GetConditions() {
		out.Conditions = append(out.Conditions, PoolCondition{Type: c.GetType(), Status: c.GetStatus(), Reason: c.GetReason(), Message: c.GetMessage()})
	}
	return out
}

// Proto is the Pool as ListPools answers it.
func (p *Pool) Proto() *ipamv1.Pool {
	out := &ipamv1.Pool{
		Name: p.Name, Addresses: p.Addresses, AutoAssign: p.AutoAssign, Priority: p.Priority,
		HeldOutside: p.HeldOutside, Kept: p.Kept, Ipv4: p.IPv4.proto(), Ipv6: p.IPv6.proto(),
	}
	for _, c := range p.Conditions {
		out.Conditions = append(out.Conditions, &ipamv1.PoolCondition{Type: c.Type, Status: c.Status, Reason: c.Reason, Message: c.Message})
	}
	return out
}

func usageFrom(u *ipamv1.FamilyUsage) *FamilyUsage {
	if u == nil {
		return nil
	}
	return &FamilyUsage{Total: u.GetTotal(), Used: u.GetUsed(), Held: u.GetHeld(), Available: u.GetAvailable()}
}

func (u *FamilyUsage) proto() *ipamv1.FamilyUsage {
	if u == nil {
		return nil
	}
	return &ipamv1.FamilyUsage{Total: u.Total, Used: u.Used, Held: u.Held, Available: u.Available}
}

// ExplanationFrom is ExplainService's answer for namespace/name.
func ExplanationFrom(namespace, name string, r *ipamv1.ExplainServiceResponse) *Explanation {
	e := &Explanation{
		TypeMeta:   typeMeta("Explanation"),
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name},
		Decision:   r.GetDecision(), Reason: r.GetReason(), IPs: r.GetIps(), Gateway: r.GetGateway(),
	}
	for _, v := range r.GetVerdicts() {
		e.Verdicts = append(e.Verdicts, PoolVerdict{Pool: v.GetPool(), Eligible: v.GetEligible(), Reason: v.GetReason(), Message: v.GetMessage()})
	}
	for _, a := range r.GetAnnouncements() {
		e.Announcements = append(e.Announcements, Announcement{IP: a.GetIp(), State: a.GetState(), Announcer: a.GetAnnouncer(),
			Node: a.GetNode(), Since: a.GetSince(), Served: a.GetServed(), Message: a.GetMessage()})
	}
	return e
}

// Proto is the Explanation as ExplainService answers it.
func (e *Explanation) Proto() *ipamv1.ExplainServiceResponse {
	out := &ipamv1.ExplainServiceResponse{Decision: e.Decision, Reason: e.Reason, Ips: e.IPs, Gateway: e.Gateway}
	for _, v := range e.Verdicts {
		out.Verdicts = append(out.Verdicts, &ipamv1.PoolVerdict{Pool: v.Pool, Eligible: v.Eligible, Reason: v.Reason, Message: v.Message})
	}
	for _, a := range e.Announcements {
		out.Announcements = append(out.Announcements, &ipamv1.Announcement{Ip: a.IP, State: a.State, Announcer: a.Announcer,
			Node: a.Node, Since: a.Since, Served: a.Served, Message: a.Message})
	}
	return out
}

// ReservationFrom is ipam's reservation as a Reservation.
func ReservationFrom(r *ipamv1.Reservation) *Reservation {
	out := &Reservation{TypeMeta: typeMeta("Reservation"), IP: r.GetIp(), OwnerNote: r.GetOwnerNote(), CreatedAt: r.GetCreatedAt()}
	if ip, err := netip.ParseAddr(r.GetIp()); err == nil {
		out.Name = ReservationName(ip)
	}
	out.CreationTimestamp = timestamp(r.GetCreatedAt())
	if fs := r.GetForService(); fs != nil {
		out.ForService = &ServiceRef{Namespace: fs.GetNamespace(), Name: fs.GetName()}
	}
	return out
}

// Proto is the Reservation as ipam answers it.
func (r *Reservation) Proto() *ipamv1.Reservation {
	out := &ipamv1.Reservation{Ip: r.IP, OwnerNote: r.OwnerNote, CreatedAt: r.CreatedAt}
	if r.ForService != nil {
		out.ForService = &ipamv1.ServiceRef{Namespace: r.ForService.Namespace, Name: r.ForService.Name}
	}
	return out
}
