// Package announce decides, for each address ipam gave a Service, whether an
// announcer covers it and from which node, from what the announcers publish:
// MetalLB's IPAddressPools, L2/BGPAdvertisements and ServiceL2/BGPStatuses,
// Cilium's L2 announcement Leases, kube-vip's kube-vip.io/vipHost annotation
// (docs/reachability.md#is-it-announced). It only decides: the objects come
// from the stream, and the tracker (package announced) and ExplainService
// show the verdicts.
package announce

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"time"

	watcherv1 "github.com/ipledger/ipledger/proto/ipledger/watcher/v1"
	"github.com/ipledger/ipledger/services/ipam/internal/allocator"
	"github.com/ipledger/ipledger/services/ipam/internal/objects"
)

// State is whether an address is announced.
type State int

// The states of a Verdict.
const (
	// NoAnnouncer: no announcer ipledger reads says anything about the
	// address (none installed, or one ipledger cannot see, such as BGP
	// from a router's own configuration).
	NoAnnouncer State = iota
	// Announced: an announcer reports announcing it.
	Announced
	// NotAnnounced: an announcer is configured near it but does not
	// announce it; the Verdict's Message says what is missing.
	NotAnnounced
)

func (s State) String() string {
	switch s {
	case Announced:
		return "Announced"
	case NotAnnounced:
		return "NotAnnounced"
	default:
		return "NoAnnouncer"
	}
}

// Announcer names, as shown to people.
const (
	MetalLBL2  = "MetalLB L2"
	MetalLBBGP = "MetalLB BGP"
	CiliumL2   = "Cilium L2"
	KubeVIP    = "kube-vip"
)

// Verdict is what is known of one address's announcement.
type Verdict struct {
	IP    netip.Addr
	State State
	// Announcer is who announces it (Announced) or who should
	// (NotAnnounced): one of the Announcer names.
	Announcer string
	// Node announces it (Announced; empty when the announcer does not say).
	Node string
	// Since is when Node began to (zero when unknown).
	Since time.Time
	// Served: an announcer is known to serve the address (a MetalLB
	// IPAddressPool holds it or overlaps its IPPool, a Cilium Lease names
	// its Service): a NotAnnounced verdict is then a fault worth an alert.
	// Where none is known (BGP from routers' own configuration), nobody is
	// alerted.
	Served bool
	// Message says it in words, naming the objects and the fix.
	Message string
}

// Identity tells one announcing apart from another, in words: the
// announcer, the node and when it began. A change of it while announced is
// a failover (or, on one node, a restart of the speaker). Empty when not
// announced.
func (v Verdict) Identity() string {
	if v.State != Announced {
		return ""
	}
	return v.Announcer + " from node " + v.Node + " since " + v.Since.UTC().Format(time.RFC3339)
}

// String is the verdict as `kubectl ipledger why` shows it.
func (v Verdict) String() string {
	return v.IP.String() + ": " + v.Message
}

// World is what the announcers publish, parsed once for many Services.
type World struct {
	pools       []metalPool
	l2, bgp     []advertisement
	l2Status    map[string][]status // by Service "namespace/name"
	bgpStatus   map[string][]status
	ciliumLease map[string]Lease // by Lease name
	ipledger    []*allocator.Pool
	metalLB     bool // any MetalLB object at all
}

type metalPool struct {
	name, namespace string
	labels          map[string]string
	pool            *allocator.Pool // nil when its addresses do not parse
	err             error
}

type advertisement struct {
	name, namespace string
	pools           []string
	poolSelectors   []allocator.Selector
	svcSelectors    []allocator.Selector
}

type status struct {
	name, node string
	since      time.Time
	peers      []string
}

// Lease is a coordination.k8s.io Lease, as Cilium's L2 announcer holds one
// per Service.
type Lease struct {
	Namespace, Name string
	// Holder is spec.holderIdentity: the node announcing ("" when released).
	Holder string
	// Acquired is spec.acquireTime; Renewed spec.renewTime; Duration
	// spec.leaseDurationSeconds.
	Acquired, Renewed time.Time
	Duration          time.Duration
}

// CiliumLeasePrefix starts the name of the Lease Cilium's L2 announcer
// holds for each Service it announces: cilium-l2announce-<namespace>-<name>,
// in the agent's namespace, held by the node's name (read in
// cilium/cilium pkg/l2announcer/l2announcer.go, newLeaseLock).
const CiliumLeasePrefix = "cilium-l2announce-"

// LeaseOf reads a streamed Lease (KIND_CILIUM_L2_ANNOUNCEMENT_LEASE).
func LeaseOf(obj *watcherv1.Object) Lease {
	m, l := obj.GetMeta(), obj.GetLease()
	return Lease{Namespace: m.GetNamespace(), Name: m.GetName(), Holder: l.GetHolderIdentity(),
		Acquired: unixNano(l.GetAcquireTime()), Renewed: unixNano(l.GetRenewTime()),
		Duration: time.Duration(l.GetLeaseDurationSeconds()) * time.Second}
}

func unixNano(ns int64) time.Time {
	if ns == 0 {
		return time.Time{}
	}
	return time.Unix(0, ns).UTC()
}

// expires is when a held Lease lapses unless renewed; ok is false when it
// is not held or never lapses.
func (l Lease) expires() (at time.Time, ok bool) {
	if l.Holder == "" || l.Duration <= 0 || l.Renewed.IsZero() {
		return time.Time{}, false
	}
	return l.Renewed.Add(l.Duration), true
}

// NextExpiry is the first moment after now at which a held Cilium Lease
// lapses unless renewed: a verdict read from it changes then without any
// object changing. ok is false when none will.
func (w *World) NextExpiry(now time.Time) (at time.Time, ok bool) {
	for _, l := range w.ciliumLease {
		if e, held := l.expires(); held && e.After(now) && (!ok || e.Before(at)) {
			at, ok = e, true
		}
	}
	return at, ok
}

// CiliumLeaseServices are the Services ("namespace/name") a Lease of
// Cilium's L2 announcer may be for: Cilium joins namespace and name with a
// dash, and both may hold dashes, so every split is one.
func CiliumLeaseServices(leaseName string) []string {
	rest, ok := strings.CutPrefix(leaseName, CiliumLeasePrefix)
	if !ok {
		return nil
	}
	var keys []string
	for i := range len(rest) {
		if rest[i] == '-' && i > 0 && i < len(rest)-1 {
			keys = append(keys, rest[:i]+"/"+rest[i+1:])
		}
	}
	return keys
}

// KubeVIPHostAnnotation is where kube-vip (Services mode) records on a
// Service the node that holds its address ("The host that has the VIP").
const KubeVIPHostAnnotation = "kube-vip.io/vipHost"

// NewWorld parses MetalLB's objects (any of its five stream kinds, in any
// order) and Cilium's L2 announcement Leases; ipledger's IPPools tell
// whether MetalLB serves an address none of its pools holds (it serves
// others of the same IPPool: a pool is missing). An IPAddressPool whose
// addresses do not parse covers nothing and is named in the verdicts of
// addresses no other pool covers.
func NewWorld(metalLB []*watcherv1.Object, leases []Lease, ipledgerPools []*allocator.Pool) *World {
	w := &World{l2Status: map[string][]status{}, bgpStatus: map[string][]status{}, ciliumLease: map[string]Lease{}, ipledger: ipledgerPools}
	for _, o := range metalLB {
		w.metalLB = true
		m := o.GetMeta()
		switch o.GetKind() {
		case watcherv1.Kind_KIND_METALLB_IP_ADDRESS_POOL:
			p := metalPool{name: m.GetName(), namespace: m.GetNamespace(), labels: m.GetLabels()}
			p.pool, p.err = allocator.ParsePool(p.name, allocator.PoolSpec{Addresses: o.GetMetallbIpAddressPool().GetAddresses()})
			w.pools = append(w.pools, p)
		case watcherv1.Kind_KIND_METALLB_L2_ADVERTISEMENT, watcherv1.Kind_KIND_METALLB_BGP_ADVERTISEMENT:
			a := o.GetMetallbAdvertisement()
			adv := advertisement{name: m.GetName(), namespace: m.GetNamespace(), pools: a.GetIpAddressPools()}
			for _, s := range a.GetIpAddressPoolSelectors() {
				adv.poolSelectors = append(adv.poolSelectors, objects.Selector(s))
			}
			for _, s := range a.GetServiceSelectors() {
				adv.svcSelectors = append(adv.svcSelectors, objects.Selector(s))
			}
			if o.GetKind() == watcherv1.Kind_KIND_METALLB_L2_ADVERTISEMENT {
				w.l2 = append(w.l2, adv)
			} else {
				w.bgp = append(w.bgp, adv)
			}
		case watcherv1.Kind_KIND_METALLB_SERVICE_L2_STATUS, watcherv1.Kind_KIND_METALLB_SERVICE_BGP_STATUS:
			s := o.GetMetallbServiceStatus()
			st := status{name: m.GetName(), node: s.GetNode(), since: time.Unix(0, m.GetCreationTimestamp()).UTC(), peers: s.GetPeers()}
			key := s.GetServiceNamespace() + "/" + s.GetServiceName()
			if o.GetKind() == watcherv1.Kind_KIND_METALLB_SERVICE_L2_STATUS {
				w.l2Status[key] = append(w.l2Status[key], st)
			} else {
				w.bgpStatus[key] = append(w.bgpStatus[key], st)
			}
		}
	}
	for _, l := range leases {
		if strings.HasPrefix(l.Name, CiliumLeasePrefix) {
			w.ciliumLease[l.Name] = l
		}
	}
	return w
}

// Service is what the verdicts of one Service read of it.
type Service struct {
	Namespace, Name string
	Labels          map[string]string
	// IPs are the addresses ipam gave it (its status).
	IPs []netip.Addr
	// KubeVIPHost is its kube-vip.io/vipHost annotation.
	KubeVIPHost string
}

// ServiceOf reads a streamed Service.
func ServiceOf(obj *watcherv1.Object) Service {
	m := obj.GetMeta()
	return Service{Namespace: m.GetNamespace(), Name: m.GetName(), Labels: m.GetLabels(), IPs: objects.StatusIPs(obj),
		KubeVIPHost: m.GetAnnotations()[KubeVIPHostAnnotation]}
}

// Decide gives one verdict per address of svc, at now (Cilium's Leases
// expire). Evidence of an announcement wins over configuration: a speaker
// that reports announcing is believed. The order of the checks: MetalLB
// (its pools decide whether it serves the address), Cilium's Lease,
// kube-vip's annotation.
func (w *World) Decide(svc Service, now time.Time) []Verdict {
	out := make([]Verdict, 0, len(svc.IPs))
	for _, ip := range svc.IPs {
		out = append(out, w.decide(svc, ip, now))
	}
	return out
}

func (w *World) decide(svc Service, ip netip.Addr, now time.Time) Verdict {
	key := svc.Namespace + "/" + svc.Name
	if v, ok := w.metalLBVerdict(svc, key, ip); ok {
		return v
	}
	// Cilium joins namespace and name with a dash, so two Services can
	// share a Lease name (a-b/c and a/b-c); it shares it as well.
	if l, ok := w.ciliumLease[CiliumLeasePrefix+svc.Namespace+"-"+svc.Name]; ok {
		return ciliumVerdict(l, ip, now)
	}
	if svc.KubeVIPHost != "" {
		return Verdict{IP: ip, State: Announced, Announcer: KubeVIP, Node: svc.KubeVIPHost,
			Message: fmt.Sprintf("announced by kube-vip from node %s (the Service's %s annotation)", svc.KubeVIPHost, KubeVIPHostAnnotation)}
	}
	v := Verdict{IP: ip, State: NoAnnouncer, Message: "no announcer found: neither MetalLB, Cilium's L2 announcements nor kube-vip says it announces this address (a BGP announcer ipledger cannot see, such as routes configured on the routers, is not reported)"}
	if !w.metalLB {
		return v
	}
	missing := "MetalLB IPAddressPool missing for " + ip.String() + " (MetalLB announces only addresses of its pools: create one covering ipledger's IPPool with autoAssign: false, as `kubectl ipledger announce metallb` prints)"
	if bad := w.unparsedPools(); bad != "" {
		missing += "; " + bad
	}
	if pool, theirs := w.overlapping(ip); theirs != "" {
		v.State, v.Announcer, v.Served = NotAnnounced, MetalLBL2, true
		v.Message = fmt.Sprintf("not announced: %s; MetalLB IPAddressPool %s holds other addresses of IPPool %s", missing, theirs, pool)
		return v
	}
	v.Message = "no announcer found: " + missing
	return v
}

// overlapping names the ipledger IPPool holding ip and a MetalLB
// IPAddressPool sharing addresses with it (theirs is empty when none does).
func (w *World) overlapping(ip netip.Addr) (pool, theirs string) {
	for _, p := range w.ipledger {
		if !p.Contains(ip) {
			continue
		}
		for _, m := range w.pools {
			if m.pool != nil && m.pool.Overlaps(p) {
				return p.Name(), m.namespace + "/" + m.name
			}
		}
		return p.Name(), ""
	}
	return "", ""
}

// metalLBVerdict decides by MetalLB's objects; ok is false when no MetalLB
// IPAddressPool holds ip.
func (w *World) metalLBVerdict(svc Service, key string, ip netip.Addr) (Verdict, bool) {
	var pool *metalPool
	for i := range w.pools {
		if p := &w.pools[i]; p.pool != nil && p.pool.Contains(ip) {
			pool = p
			break
		}
	}
	if pool == nil {
		return Verdict{}, false
	}
	v := Verdict{IP: ip, Served: true}
	l2 := w.covering(w.l2, pool, svc)
	bgp := w.covering(w.bgp, pool, svc)
	if st, ok := newest(w.l2Status[key]); ok && len(l2) > 0 {
		v.State, v.Announcer, v.Node, v.Since = Announced, MetalLBL2, st.node, st.since
		v.Message = fmt.Sprintf("announced by MetalLB L2 from node %s since %s (ServiceL2Status %s/%s; L2Advertisement %s)",
			st.node, st.since.Format(time.RFC3339), pool.namespace, st.name, strings.Join(l2, ", "))
		return v, true
	}
	if st, ok := newest(w.bgpStatus[key]); ok && len(bgp) > 0 {
		v.State, v.Announcer, v.Node, v.Since = Announced, MetalLBBGP, st.node, st.since
		v.Message = fmt.Sprintf("announced by MetalLB BGP from node %s since %s to peers %s (ServiceBGPStatus %s/%s; BGPAdvertisement %s)",
			st.node, st.since.Format(time.RFC3339), strings.Join(st.peers, ", "), pool.namespace, st.name, strings.Join(bgp, ", "))
		return v, true
	}
	v.State = NotAnnounced
	switch {
	case len(l2) == 0 && len(bgp) == 0:
		v.Announcer = MetalLBL2
		v.Message = fmt.Sprintf("not announced: no L2Advertisement or BGPAdvertisement in %s covers MetalLB IPAddressPool %s for this Service "+
			"(an advertisement covers a pool by spec.ipAddressPools, spec.ipAddressPoolSelectors, or neither set; and the Service by spec.serviceSelectors)",
			pool.namespace, pool.name)
	case len(l2) > 0:
		v.Announcer = MetalLBL2
		v.Message = fmt.Sprintf("not announced: L2Advertisement %s covers MetalLB IPAddressPool %s, but no speaker reports announcing it (no ServiceL2Status "+
			"for %s): is a speaker running on a node its spec.nodeSelectors allow, with the interfaces it names? See the Service's Events from metallb-speaker",
			strings.Join(l2, ", "), pool.name, key)
	default:
		v.Announcer = MetalLBBGP
		v.Message = fmt.Sprintf("not announced: BGPAdvertisement %s covers MetalLB IPAddressPool %s, but no speaker reports advertising it (no ServiceBGPStatus "+
			"for %s): are the speakers' BGP sessions up?", strings.Join(bgp, ", "), pool.name, key)
	}
	return v, true
}

// covering names the advertisements of the pool's namespace that cover
// the pool and the Service, as MetalLB's speaker selects them.
func (w *World) covering(ads []advertisement, pool *metalPool, svc Service) []string {
	var names []string
	for _, a := range ads {
		if a.namespace != pool.namespace || !a.coversPool(pool) || !matchesAny(a.svcSelectors, svc.Labels) {
			continue
		}
		names = append(names, a.name)
	}
	slices.Sort(names)
	return names
}

func (a advertisement) coversPool(p *metalPool) bool {
	if len(a.pools) == 0 && len(a.poolSelectors) == 0 {
		return true
	}
	if slices.Contains(a.pools, p.name) {
		return true
	}
	for _, s := range a.poolSelectors {
		if s.Matches(p.labels) {
			return true
		}
	}
	return false
}

// matchesAny: an empty list matches everything (MetalLB's serviceSelectors).
func matchesAny(sels []allocator.Selector, labels map[string]string) bool {
	if len(sels) == 0 {
		return true
	}
	for _, s := range sels {
		if s.Matches(labels) {
			return true
		}
	}
	return false
}

// newest is the status created last: while a failover settles, the old
// node's status may linger a moment beside the new one's.
func newest(ss []status) (status, bool) {
	if len(ss) == 0 {
		return status{}, false
	}
	best := ss[0]
	for _, s := range ss[1:] {
		if s.since.After(best.since) || (s.since.Equal(best.since) && s.name > best.name) {
			best = s
		}
	}
	return best, true
}

func (w *World) unparsedPools() string {
	var bad []string
	for _, p := range w.pools {
		if p.err != nil {
			bad = append(bad, fmt.Sprintf("IPAddressPool %s/%s does not parse: %v", p.namespace, p.name, p.err))
		}
	}
	return strings.Join(bad, "; ")
}

func ciliumVerdict(l Lease, ip netip.Addr, now time.Time) Verdict {
	v := Verdict{IP: ip, Announcer: CiliumL2, Served: true}
	e, held := l.expires()
	if l.Holder == "" || (held && !now.Before(e)) {
		v.State = NotAnnounced
		v.Message = fmt.Sprintf("not announced: Cilium's L2 announcement Lease %s/%s has no live holder (released, or not renewed since %s): "+
			"does a CiliumL2AnnouncementPolicy select the Service and a node whose agent runs?", l.Namespace, l.Name, l.Renewed.Format(time.RFC3339))
		return v
	}
	v.State, v.Node, v.Since = Announced, l.Holder, l.Acquired
	v.Message = fmt.Sprintf("announced by Cilium L2 from node %s since %s (Lease %s/%s)", l.Holder, l.Acquired.Format(time.RFC3339), l.Namespace, l.Name)
	return v
}
