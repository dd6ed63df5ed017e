// Package objects turns the streamed Kubernetes objects (Services,
// Namespaces, IPPools, ledger ConfigMaps) into the allocator's inputs, the
// same way on the leader and on every replica answering gRPC reads.
package objects

import (
	"cmp"
	"flag"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/ipledger/ipledger/pkg/convert"
	"github.com/ipledger/ipledger/pkg/stream/objkey"
	watcherv1 "github.com/ipledger/ipledger/proto/ipledger/watcher/v1"
	"github.com/ipledger/ipledger/services/ipam/internal/allocator"
	"github.com/ipledger/ipledger/services/ipam/internal/ledger"
)

// DefaultLBClass is the loadBalancerClass ipam serves by default.
const DefaultLBClass = "ipledger.io/lb"

// ConditionType is the Service condition ipam writes.
const ConditionType = "ipledger.io/AddressAllocated"

// PoolFinalizer keeps a deleted IPPool (Terminating) while Services hold its
// addresses; ipam removes it when the last one is released.
const PoolFinalizer = "ipledger.io/pool-protection"

// HasFinalizer reports whether obj carries the finalizer f.
func HasFinalizer(obj *watcherv1.Object, f string) bool {
	return slices.Contains(obj.GetMeta().GetFinalizers(), f)
}

// Class says which LoadBalancer Services ipam serves: those whose
// spec.loadBalancerClass is Name and, unless Required, those with none. On
// bare metal ipam is usually the only load-balancer controller, and serving
// class-less Services is what users expect; where another controller serves
// them too (a cloud provider's, MetalLB during a migration), Required keeps
// ipam to its own class so that two controllers never write one status.
type Class struct {
	Name     string
	Required bool
}

// ClassFlags registers --lb-class and --require-lb-class on fs (ipam's and
// its preflight's alike), parsed into name (DefaultLBClass when it is
// empty) and required.
func ClassFlags(fs *flag.FlagSet, name *string, required *bool) {
	if *name == "" {
		*name = DefaultLBClass
	}
	fs.StringVar(name, "lb-class", *name,
		"spec.loadBalancerClass served (type LoadBalancer Services of other classes are left alone)")
	fs.BoolVar(required, "require-lb-class", *required,
		"serve only Services whose spec.loadBalancerClass is --lb-class; by default Services without a class are served too. "+
			"Set it where another load-balancer controller (the cloud provider's, MetalLB during a migration) serves class-less Services")
}

// Serves reports whether ipam serves the Service: type LoadBalancer, not
// being deleted, of class c.Name (or of no class, unless c.Required).
func (c Class) Serves(obj *watcherv1.Object) bool {
	svc := obj.GetService()
	if svc == nil || svc.GetType() != "LoadBalancer" || obj.GetMeta().GetDeletionTimestamp() != 0 {
		return false
	}
	lbc := svc.GetLoadBalancerClass()
	return lbc == c.Name || (lbc == "" && !c.Required)
}

// Less orders Services for allocation: oldest first, then namespace/name.
// The order is deterministic so that a restart decides the same way.
func Less(a, b *watcherv1.Object) int {
	ta, tb := a.GetMeta().GetCreationTimestamp(), b.GetMeta().GetCreationTimestamp()
	if ta != tb {
		if ta < tb {
			return -1
		}
		return 1
	}
	return compareKeys(a.GetMeta().GetNamespace(), a.GetMeta().GetName(), b.GetMeta().GetNamespace(), b.GetMeta().GetName())
}

// CompareByAge is Less for Services known only by creation time
// (creationTimestamp) and key (objkey.Of): for orderings read from store
// attributes or from records that no longer hold the object.
func CompareByAge(createdA int64, keyA string, createdB int64, keyB string) int {
	return cmp.Or(cmp.Compare(createdA, createdB), strings.Compare(keyA, keyB))
}

// compareKeys compares the keys (objkey.Of) ns1+"/"+name1 and ns2+"/"+name2
// of two namespaced objects, building
// them only when one namespace is a prefix of the other (sorting 10,000
// Services built millions of keys).
func compareKeys(ns1, name1, ns2, name2 string) int {
	switch {
	case ns1 == ns2:
		return strings.Compare(name1, name2)
	case !strings.HasPrefix(ns1, ns2) && !strings.HasPrefix(ns2, ns1):
		return strings.Compare(ns1, ns2) // they differ before either ends
	}
	return strings.Compare(ns1+"/"+name1, ns2+"/"+name2)
}

// Ref is the ledger's reference to a Service.
func Ref(obj *watcherv1.Object) ledger.ServiceRef {
	m := obj.GetMeta()
	return ledger.ServiceRef{Namespace: m.GetNamespace(), Name: m.GetName(), UID: m.GetUid()}
}

// StatusIPs returns the IPs in status.loadBalancer.ingress, in order,
// skipping hostnames and garbage (a person may have typed anything).
func StatusIPs(obj *watcherv1.Object) []netip.Addr {
	var out []netip.Addr
	for _, in := range obj.GetService().GetIngress() {
		if ip, err := netip.ParseAddr(in.GetIp()); err == nil && ip.Zone() == "" && !ip.Is4In6() && !slices.Contains(out, ip) {
			out = append(out, ip)
		}
	}
	return out
}

// Sharing is the sharing information of a Service with key.
func Sharing(obj *watcherv1.Object, key string) allocator.Sharing {
	svc := obj.GetService()
	sh := allocator.Sharing{Key: key, Local: svc.GetExternalTrafficPolicy() == "Local"}
	for _, p := range svc.GetPorts() {
		sh.Ports = append(sh.Ports, allocator.Port{Protocol: p.GetProtocol(), Port: p.GetPort()})
	}
	if sh.Local && svc.GetHasSelector() {
		sh.Selector = svc.GetSelector()
	}
	return sh
}

// Request builds the allocator request of a Service. The error is an
// *allocator.Error with ReasonInvalidRequest naming the field at fault.
// A Service that belongs to a Gateway (LinkedGateway) asks for what the
// Gateway's spec.addresses and its GatewayClass ask for too (JoinGateway),
// and is served by the pools serving the Gateway's namespace.
func Request(obj *watcherv1.Object, env Env) (allocator.Request, error) {
	svc := obj.GetService()
	req := allocator.Request{
		Service:       objkey.Of(obj),
		ServiceLabels: obj.GetMeta().GetLabels(),
		FamilyPolicy:  allocator.FamilyPolicy(svc.GetIpFamilyPolicy()),
	}
	var sr allocator.ServiceRequest
	err := truncated(obj)
	if err == nil {
		sr, err = allocator.ParseServiceRequest(obj.GetMeta().GetAnnotations(), svc.GetLoadBalancerIp())
	}
	tenant := obj.GetMeta().GetNamespace()
	if err == nil {
		sr, tenant, err = withGateway(obj, sr, env)
	}
	req.Namespace = tenant
	if ns, ok := env.get(watcherv1.Kind_KIND_NAMESPACE, "", tenant); ok {
		req.NamespaceLabels = ns.GetMeta().GetLabels()
		if err == nil {
			err = truncated(ns)
		}
	}
	if err != nil {
		req.Sharing = Sharing(obj, "")
		return req, err
	}
	req.RequestedIPs, req.Pool, req.PoolFrom = sr.RequestedIPs, sr.Pool, sr.PoolFrom
	req.DefaultPool, req.DefaultPoolFrom = sr.DefaultPool, sr.DefaultPoolFrom
	req.Sharing = Sharing(obj, sr.SharingKey)
	req.Sharing.CrossNamespace = sr.CrossNamespace
	for _, f := range svc.GetIpFamilies() {
		fam, err := allocator.ParseFamily(f)
		if err != nil {
			return req, &allocator.Error{Reason: allocator.ReasonInvalidRequest, Message: "spec." + err.Error()}
		}
		req.Families = append(req.Families, fam)
	}
	return req, nil
}

// truncated refuses what the watcher could not carry whole (docs/sizing.md):
// a request annotation longer than convert.MaxAnnotationBytes, which reaches
// ipam as its marker, or the labels, larger than convert.MaxLabelBytes, of a
// Service or of the Namespace whose pools serve it, which pools' selectors
// could then not be matched against. The error names the annotation or the
// object and the limit.
func truncated(obj *watcherv1.Object) error {
	m := obj.GetMeta()
	if obj.GetKind() == watcherv1.Kind_KIND_SERVICE {
		for _, k := range allocator.RequestAnnotations() {
			if n, ok := convert.ParseTruncated(m.GetAnnotations()[k]); ok {
				return &allocator.Error{Reason: allocator.ReasonInvalidRequest, Message: fmt.Sprintf(
					"annotation %s is %d bytes, longer than the %d bytes ipledger reads of an annotation: shorten it", k, n, convert.MaxAnnotationBytes)}
			}
		}
	}
	if n, ok := convert.LabelsTruncated(m.GetLabels()); ok {
		what := "the Service's labels are"
		if obj.GetKind() == watcherv1.Kind_KIND_NAMESPACE {
			what = fmt.Sprintf("the labels of Namespace %s are", m.GetName())
		}
		return &allocator.Error{Reason: allocator.ReasonInvalidRequest, Message: fmt.Sprintf(
			"%s %d bytes, more than the %d bytes ipledger reads of an object's labels, so no pool's selector can be matched against them: remove labels",
			what, n, convert.MaxLabelBytes)}
	}
	return nil
}

// withGateway joins into sr what the Gateway the Service belongs to asks
// for, and returns the namespace whose pools serve the Service and whose
// quotas it counts against: the Gateway's, once a link to another namespace
// is verified (verifyCrossNamespace), else its own. A Service serving a
// Gateway of another namespace shares no
// address: sharing keys join Services of one namespace, and that namespace
// (the Gateway controller's) holds every tenant's Gateway Services.
func withGateway(obj *watcherv1.Object, sr allocator.ServiceRequest, env Env) (allocator.ServiceRequest, string, error) {
	ns := obj.GetMeta().GetNamespace()
	link, ok, err := LinkedGateway(obj, env.GatewayServiceNamespaces)
	if err != nil || !ok {
		return sr, ns, err
	}
	if link.CrossNamespace(ns) {
		if err := verifyCrossNamespace(link, env); err != nil {
			return sr, ns, err
		}
	}
	if link.CrossNamespace(ns) && sr.SharingKey != "" {
		return sr, link.Namespace, &allocator.Error{Reason: allocator.ReasonInvalidRequest, Message: fmt.Sprintf(
			"the Service serves Gateway %s of another namespace, so it cannot share its address (%s): remove the annotation",
			link.Key(), allocator.AnnotationAllowSharedIP)}
	}
	gr, found, err := gatewayRequest(link, env)
	switch {
	case err != nil:
		return sr, link.Namespace, err
	case !found && link.Via == viaOwner:
		// An owner reference says the Gateway exists (or did, and the
		// garbage collector takes the Service soon): its Service was made
		// for it, and the stream brings it.
		return sr, link.Namespace, &allocator.Error{Reason: allocator.ReasonGatewayNotSeen, Message: fmt.Sprintf(
			"the Service is owned by Gateway %s, which ipam does not see yet; it waits for the Gateway's addresses (is the Gateway API installed, and the watcher allowed to list Gateways?)",
			link.Key())}
	case !found:
		return sr, link.Namespace, nil // labels only: served as any other Service
	}
	sr, err = allocator.JoinGateway(sr, gr)
	return sr, link.Namespace, err
}

// Getter finds a streamed object: a stream.Store is one, an Index another.
type Getter interface {
	Get(kind watcherv1.Kind, namespace, name string) (*watcherv1.Object, bool)
}

// Env is what a Service's request depends on besides the Service: the
// labels of the Namespace whose pools serve it, and the Gateway it belongs
// to with that Gateway's GatewayClass.
type Env struct {
	// Objects finds the streamed Namespaces, Gateways and GatewayClasses;
	// nil finds none.
	Objects Getter
	// GatewayServiceNamespaces are the namespaces whose Services may belong
	// to a Gateway of another namespace by label (LinkedGateway).
	GatewayServiceNamespaces []string
}

// Memo returns a Getter that asks g for each object once and remembers
// the answer: the Env of one decision (a pass, a term's rebuild, one gRPC
// call), in which thousands of Services of a namespace ask for the same
// Namespace, each a decode of the stream's bytes without it. It sees no
// change made after its first answer, so it must not outlive the decision.
func Memo(g Getter) Getter {
	return &memo{g: g, seen: map[memoKey]memoEntry{}}
}

type memoKey struct {
	kind            watcherv1.Kind
	namespace, name string
}

type memoEntry struct {
	obj *watcherv1.Object
	ok  bool
}

type memo struct {
	g    Getter
	mu   sync.Mutex
	seen map[memoKey]memoEntry
}

func (m *memo) Get(kind watcherv1.Kind, namespace, name string) (*watcherv1.Object, bool) {
	k := memoKey{kind, namespace, name}
	m.mu.Lock()
	defer m.mu.Unlock()
	e, found := m.seen[k]
	if !found {
		e.obj, e.ok = m.g.Get(kind, namespace, name)
		m.seen[k] = e
	}
	return e.obj, e.ok
}

func (e Env) get(kind watcherv1.Kind, namespace, name string) (*watcherv1.Object, bool) {
	if e.Objects == nil {
		return nil, false
	}
	return e.Objects.Get(kind, namespace, name)
}

// Index is a Getter over objects in memory (a preview read from the API
// server, a test).
type Index map[watcherv1.Kind]map[string]*watcherv1.Object

// NewIndex indexes objs by kind and key.
func NewIndex(objs ...*watcherv1.Object) Index {
	ix := Index{}
	ix.Add(objs...)
	return ix
}

// Add indexes objs, replacing those of the same kind and key.
func (ix Index) Add(objs ...*watcherv1.Object) {
	for _, o := range objs {
		if ix[o.GetKind()] == nil {
			ix[o.GetKind()] = map[string]*watcherv1.Object{}
		}
		ix[o.GetKind()][objkey.Of(o)] = o
	}
}

// Get finds the object of kind at namespace/name.
func (ix Index) Get(kind watcherv1.Kind, namespace, name string) (*watcherv1.Object, bool) {
	o, ok := ix[kind][objkey.Join(namespace, name)]
	return o, ok
}

// PoolSpec converts a streamed IPPool.
func PoolSpec(obj *watcherv1.Object) allocator.PoolSpec {
	p := obj.GetIpPool()
	a := p.GetAllocation()
	spec := allocator.PoolSpec{
		Addresses:                slices.Clone(p.GetAddresses()),
		AutoAssign:               p.GetAutoAssign(),
		AvoidBuggyIPs:            p.GetAvoidBuggyIps(),
		Exclude:                  slices.Clone(p.GetExclude()),
		SkipFirstLastIPs:         p.GetSkipFirstLastIps(),
		Priority:                 a.GetPriority(),
		Namespaces:               slices.Clone(a.GetNamespaces()),
		MaxAddressesPerNamespace: int(a.GetMaxAddressesPerNamespace()),
		CreatedAt:                time.Unix(0, obj.GetMeta().GetCreationTimestamp()),
		Terminating:              obj.GetMeta().GetDeletionTimestamp() != 0,
	}
	if a != nil && a.KeepReleasedSeconds != nil {
		d := time.Duration(a.GetKeepReleasedSeconds()) * time.Second
		spec.KeepReleased = &d
	}
	for _, s := range a.GetNamespaceSelectors() {
		spec.NamespaceSelectors = append(spec.NamespaceSelectors, Selector(s))
	}
	for _, s := range a.GetServiceSelectors() {
		spec.ServiceSelectors = append(spec.ServiceSelectors, Selector(s))
	}
	return spec
}

// Selector converts a streamed label selector to the allocator's.
func Selector(s *watcherv1.LabelSelector) allocator.Selector {
	out := allocator.Selector{MatchLabels: s.GetMatchLabels()}
	for _, e := range s.GetMatchExpressions() {
		out.MatchExpressions = append(out.MatchExpressions, allocator.SelectorRequirement{
			Key: e.GetKey(), Operator: allocator.SelectorOperator(e.GetOperator()), Values: slices.Clone(e.GetValues()),
		})
	}
	return out
}

// PoolSet parses IPPools and remembers each one's last valid spec, so that
// an edit ipam refuses (it got past the CRD's validation, or the CRD is
// older) never takes effect: the pool keeps serving as it last parsed, and is
// reported Invalid. A PoolSet lives as long as the process; a pool first seen
// invalid serves nothing (the Services holding its addresses keep them,
// held outside their pool). Safe for concurrent use.
type PoolSet struct {
	// KeepReleased is the grace period of the pools that set none
	// (spec.allocation.keepReleasedSeconds): how long an address a Service
	// released stays kept for it (ipam's --keep-released-addresses).
	KeepReleased time.Duration

	mu        sync.Mutex
	lastValid map[string]validPool // by pool name
}

type validPool struct {
	uid  string
	spec allocator.PoolSpec
}

// Parse parses every streamed IPPool, sorted by name. A pool that does not
// parse is in invalid with the error naming the field; when its last valid
// spec (same UID) is known, that spec is in pools instead, with the current
// deletion state.
func (s *PoolSet) Parse(objs []*watcherv1.Object) (pools []*allocator.Pool, invalid map[string]error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.lastValid == nil {
		s.lastValid = map[string]validPool{}
	}
	invalid = map[string]error{}
	seen := map[string]bool{}
	for _, o := range sortedByName(objs) {
		name, uid := o.GetMeta().GetName(), o.GetMeta().GetUid()
		seen[name] = true
		spec := PoolSpec(o)
		if spec.KeepReleased == nil {
			d := s.KeepReleased
			spec.KeepReleased = &d
		}
		p, err := allocator.ParsePool(name, spec)
		if err == nil {
			s.lastValid[name] = validPool{uid: uid, spec: spec}
			pools = append(pools, p)
			continue
		}
		invalid[name] = err
		last, ok := s.lastValid[name]
		if !ok || last.uid != uid {
			continue
		}
		last.spec.Terminating = spec.Terminating
		if p, err := allocator.ParsePool(name, last.spec); err == nil {
			pools = append(pools, p)
		}
	}
	for name := range s.lastValid {
		if !seen[name] {
			delete(s.lastValid, name)
		}
	}
	return pools, invalid
}

// Clone returns a PoolSet remembering what s remembers now, so that a
// caller can parse IPPools that are not stored (a preview) without s ever
// taking them for a pool's last valid spec.
func (s *PoolSet) Clone() *PoolSet {
	s.mu.Lock()
	defer s.mu.Unlock()
	// A remembered spec is replaced, never changed in place: sharing its
	// slices is safe.
	return &PoolSet{KeepReleased: s.KeepReleased, lastValid: maps.Clone(s.lastValid)}
}

func sortedByName(objs []*watcherv1.Object) []*watcherv1.Object {
	objs = slices.Clone(objs)
	slices.SortFunc(objs, func(a, b *watcherv1.Object) int { return strings.Compare(a.GetMeta().GetName(), b.GetMeta().GetName()) })
	return objs
}

// LedgerData collects the data of streamed ledger ConfigMaps in namespace.
func LedgerData(objs []*watcherv1.Object, namespace string) map[string]map[string]string {
	out := map[string]map[string]string{}
	for _, o := range objs {
		if o.GetMeta().GetNamespace() == namespace {
			out[o.GetMeta().GetName()] = o.GetConfigMap().GetData()
		}
	}
	return out
}

// IPs returns the IPs of allocations.
func IPs(allocs []ledger.Allocation) []netip.Addr {
	out := make([]netip.Addr, 0, len(allocs))
	for _, a := range allocs {
		out = append(out, a.IP)
	}
	return out
}

// AllocatorReservation converts a ledger reservation.
func AllocatorReservation(r ledger.Reservation) allocator.Reservation {
	out := allocator.Reservation{IP: r.IP, Note: r.Note, CreatedAt: r.CreatedAt}
	if r.ForService != nil {
		out.ForService = r.ForService.Key()
	}
	out.SharingKey, out.Kept = r.Kept()
	out.Tenant = r.KeptTenant()
	return out
}

// KeptReservation is the ledger's record of an address the allocator keeps
// for the Service that released it (allocator.KeepOnRelease); uid is the
// UID that Service had.
func KeptReservation(r allocator.Reservation, uid string) ledger.Reservation {
	ns, name, _ := strings.Cut(r.ForService, "/")
	return ledger.Reservation{IP: r.IP, Note: ledger.KeptNoteFor(r.SharingKey, r.Tenant), CreatedAt: r.CreatedAt.UTC().Truncate(time.Second),
		ForService: &ledger.ServiceRef{Namespace: ns, Name: name, UID: uid}}
}
