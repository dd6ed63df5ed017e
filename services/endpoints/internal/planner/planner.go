// Package planner decides which EndpointSlices a Service that selects
// ExternalWorkloads should have, and which writes turn the slices that exist
// into those. It is plain Go over API types: no clients, no clocks, no
// randomness, so the same inputs always give the same plan.
//
// Packing follows the upstream EndpointSlice reconciler
// (k8s.io/endpointslice, reconcileByPortMapping): endpoints that did not
// change stay in the slice they are in, slices that must be written anyway
// are filled first, then the unchanged slice that fits the rest most closely,
// and only then new slices are created; a create that coincides with a delete
// of the same address type becomes an update of that slice. The upstream
// Reconciler itself is not reused because it issues the writes through a
// clientset and packs in random map order; this package only plans them.
package planner

import (
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	watcherv1 "github.com/ipledger/ipledger/proto/ipledger/watcher/v1"
)

const (
	// ManagedBy is the value of endpointslice.kubernetes.io/managed-by on
	// every slice this controller owns; slices with any other value are never
	// touched.
	ManagedBy = "endpoints.ipledger.io"
	// DefaultMaxEndpointsPerSlice matches the upstream controller's default.
	DefaultMaxEndpointsPerSlice = 100
	// WorkloadKind and WorkloadAPIVersion name the target of every endpoint.
	WorkloadKind       = "ExternalWorkload"
	WorkloadAPIVersion = "ipledger.io/v1alpha1"
	// ConditionReady is the ExternalWorkload condition that makes an endpoint ready.
	ConditionReady = "Ready"
)

// Input is everything one plan needs.
type Input struct {
	// Service is the Service (kind KIND_SERVICE) to plan for.
	Service *watcherv1.Object
	// Workloads are candidate ExternalWorkloads; those in another namespace or
	// not matching the selector are ignored, so passing the whole namespace is fine.
	Workloads []*watcherv1.Object
	// Existing are the slices currently labelled with the Service's name.
	// Slices managed by anyone else are ignored, whatever their labels say.
	Existing []*discoveryv1.EndpointSlice
	// MaxEndpointsPerSlice caps each slice; <= 0 means DefaultMaxEndpointsPerSlice.
	MaxEndpointsPerSlice int
	// TriggerTime is when the earliest change this plan reacts to happened; it
	// is written as endpoints.kubernetes.io/last-change-trigger-time on every
	// slice the plan creates or updates. Zero leaves the annotation out.
	TriggerTime time.Time
	// TakenNames are slice names known to exist although Existing does not
	// show them (a create that found the name taken): new slices avoid them.
	TakenNames []string
	// Refuse says, in a sentence, why an address may not enter a slice
	// although the API server would take it (the cluster's own networks,
	// package clusternet), or "" to admit it. Nil admits every address the
	// API server takes.
	Refuse func(netip.Addr) string
}

// Plan is the set of writes that makes the slices match the desired state.
type Plan struct {
	// Create are new slices with Name set (names are deterministic, so a
	// create repeated from a stale view fails with AlreadyExists instead of
	// making a duplicate).
	Create []*discoveryv1.EndpointSlice
	// Update are modified copies of existing slices, ResourceVersion kept
	// for compare-and-swap.
	Update []*discoveryv1.EndpointSlice
	// Delete are existing slices to remove.
	Delete []*discoveryv1.EndpointSlice
	// Endpoints is the number of endpoints the Service should have in all.
	Endpoints int
	// Skipped lists workloads that match the selector but got no endpoint,
	// each with the reason.
	Skipped []Skipped
}

// Skipped is a selected workload left out of every slice.
type Skipped struct {
	Workload string
	Reason   string
}

// Writes is the number of API writes the plan needs.
func (p Plan) Writes() int { return len(p.Create) + len(p.Update) + len(p.Delete) }

// Selects reports whether the Service wants slices at all: it has a non-empty
// selector and is not of type ExternalName.
func Selects(svc *watcherv1.Service) bool {
	return svc != nil && svc.GetType() != string(corev1.ServiceTypeExternalName) && len(svc.GetSelector()) > 0
}

// SelectorMatches reports whether the Service selects an object with these
// labels (both in the same namespace is the caller's check).
func SelectorMatches(svc *watcherv1.Service, objLabels map[string]string) bool {
	return Selects(svc) && SelectorMatchesLabels(svc.GetSelector(), objLabels)
}

// SelectorMatchesLabels is labels.SelectorFromSet(sel).Matches without
// building a selector: every term must be among the labels. (An empty
// selector matches everything; Selects says whether a Service selects.)
func SelectorMatchesLabels(sel, objLabels map[string]string) bool {
	for k, v := range sel {
		if lv, ok := objLabels[k]; !ok || lv != v {
			return false
		}
	}
	return true
}

// Compute plans the writes for in. It never returns a write to a slice that
// is not managed by ManagedBy.
func Compute(in Input) Plan {
	maxPer := in.MaxEndpointsPerSlice
	if maxPer <= 0 {
		maxPer = DefaultMaxEndpointsPerSlice
	}
	meta, svc := in.Service.GetMeta(), in.Service.GetService()
	p := &planning{
		meta:    meta,
		svc:     svc,
		maxPer:  maxPer,
		trigger: in.TriggerTime,
		taken:   map[string]bool{},
		labels:  sliceLabels(meta, svc),
	}
	for _, n := range in.TakenNames {
		p.taken[n] = true
	}

	// Our slices for this Service, sorted so the plan does not depend on the
	// order the store returned them in.
	var ours []*discoveryv1.EndpointSlice
	for _, s := range in.Existing {
		if s.Labels[discoveryv1.LabelManagedBy] != ManagedBy ||
			s.Labels[discoveryv1.LabelServiceName] != meta.GetName() || s.Namespace != meta.GetNamespace() {
			continue
		}
		p.taken[s.Name] = true
		ours = append(ours, s)
	}
	slices.SortFunc(ours, func(a, b *discoveryv1.EndpointSlice) int { return cmp.Compare(a.Name, b.Name) })

	var plan Plan
	desired := map[discoveryv1.AddressType]map[string]*group{}
	if Selects(svc) {
		desired, plan.Endpoints, plan.Skipped = desiredGroups(meta, svc, in.Workloads, in.Refuse)
	}

	// Slices of an old Service with the same name, and slices of address
	// types the Service no longer has, go.
	byType := map[discoveryv1.AddressType][]*discoveryv1.EndpointSlice{}
	for _, s := range ours {
		if _, ok := desired[s.AddressType]; !ok || !ownedBy(s, meta.GetUid()) {
			p.delete = append(p.delete, s)
			continue
		}
		byType[s.AddressType] = append(byType[s.AddressType], s)
	}
	for _, at := range sortedKeys(desired) {
		p.reconcileAddressType(at, desired[at], byType[at])
	}
	p.finalize()

	plan.Create, plan.Update, plan.Delete = p.create, p.update, p.delete
	if meta.GetDeletionTimestamp() != 0 {
		// Like upstream: creating slices for a Service being deleted races
		// the garbage collector.
		plan.Create = nil
	}
	return plan
}

// group is the desired endpoints of one address type and one port set.
type group struct {
	ports     []discoveryv1.EndpointPort
	endpoints map[string]discoveryv1.Endpoint // by endpointKey
}

func desiredGroups(meta *watcherv1.ObjectMeta, svc *watcherv1.Service, workloads []*watcherv1.Object, refuse func(netip.Addr) string) (map[discoveryv1.AddressType]map[string]*group, int, []Skipped) {
	families := AddressTypes(svc)
	out := map[discoveryv1.AddressType]map[string]*group{}
	for _, f := range families {
		out[f] = map[string]*group{}
	}
	total := 0
	var skipped []Skipped
	sel := svc.GetSelector()
	for _, w := range workloads {
		wm, ew := w.GetMeta(), w.GetExternalWorkload()
		if ew == nil || wm.GetNamespace() != meta.GetNamespace() || !SelectorMatchesLabels(sel, wm.GetLabels()) {
			continue
		}
		ports, missing := endpointPorts(svc, ew)
		if len(svc.GetPorts()) > 0 && len(ports) == 0 {
			skipped = append(skipped, Skipped{Workload: wm.GetName(), Reason: "serves none of the Service's target ports: " + strings.Join(missing, ", ")})
			continue
		}
		pk := portKey(ports)
		placed := false
		var refused []string
		for _, f := range families {
			addr, ok, why := workloadAddress(ew, f, refuse)
			if why != "" {
				refused = append(refused, why)
			}
			if !ok {
				continue
			}
			g := out[f][pk]
			if g == nil {
				g = &group{ports: ports, endpoints: map[string]discoveryv1.Endpoint{}}
				out[f][pk] = g
			}
			ep := workloadEndpoint(wm, ew, addr)
			g.endpoints[endpointKey(&ep)] = ep
			total++
			placed = true
		}
		switch {
		case placed:
		case len(refused) > 0:
			skipped = append(skipped, Skipped{Workload: wm.GetName(), Reason: "has no address an EndpointSlice may hold: " + strings.Join(refused, ", ")})
		default:
			skipped = append(skipped, Skipped{Workload: wm.GetName(), Reason: "has no address of the Service's IP families"})
		}
	}
	return out, total, skipped
}

// AddressTypes returns the address types the Service's slices have: its
// ipFamilies, else the families of its cluster IPs, else IPv4 (as upstream).
func AddressTypes(svc *watcherv1.Service) []discoveryv1.AddressType {
	var out []discoveryv1.AddressType
	add := func(t discoveryv1.AddressType) {
		if !slices.Contains(out, t) {
			out = append(out, t)
		}
	}
	for _, f := range svc.GetIpFamilies() {
		switch f {
		case string(corev1.IPv4Protocol):
			add(discoveryv1.AddressTypeIPv4)
		case string(corev1.IPv6Protocol):
			add(discoveryv1.AddressTypeIPv6)
		}
	}
	if len(out) == 0 {
		for _, ip := range svc.GetClusterIps() {
			if a, err := netip.ParseAddr(ip); err == nil {
				add(addressType(a))
			}
		}
	}
	if len(out) == 0 {
		add(discoveryv1.AddressTypeIPv4)
	}
	return out
}

func addressType(a netip.Addr) discoveryv1.AddressType {
	if a.Unmap().Is4() {
		return discoveryv1.AddressTypeIPv4
	}
	return discoveryv1.AddressTypeIPv6
}

// AddressRefused says why the API server refuses a as an EndpointSlice
// address (k8s.io/kubernetes validation.ValidateEndpointIP: unspecified,
// loopback, link-local, link-local multicast), or "" when it takes it.
// Such an address would make the whole slice, and with it every endpoint
// of the Service, fail to write; it is also never probed (it is the
// leader's own host, or a cloud metadata service).
func AddressRefused(a netip.Addr) string {
	a = a.Unmap()
	switch {
	case a.IsUnspecified():
		return "unspecified"
	case a.IsLoopback():
		return "loopback"
	case a.IsLinkLocalUnicast():
		return "link-local"
	case a.IsLinkLocalMulticast():
		return "link-local multicast"
	}
	return ""
}

// workloadAddress is the workload's address of type t; refused says why an
// address of that type cannot be used.
func workloadAddress(ew *watcherv1.ExternalWorkload, t discoveryv1.AddressType, refuse func(netip.Addr) string) (addr string, ok bool, refused string) {
	for _, ip := range ew.GetWorkloadIps() {
		a, err := netip.ParseAddr(ip)
		if err != nil || addressType(a) != t {
			continue
		}
		if why := AddressRefused(a); why != "" {
			return "", false, ip + " is " + why
		}
		if refuse != nil {
			if why := refuse(a); why != "" {
				return "", false, why
			}
		}
		// Canonical form, so what the API server stores compares equal
		// to what the next plan computes.
		return a.Unmap().String(), true, ""
	}
	return "", false, ""
}

// endpointPorts resolves the Service's target ports on one workload. A
// named targetPort resolves to the workload port with that name and
// protocol; a workload without it is left out of that port (missing names it).
func endpointPorts(svc *watcherv1.Service, ew *watcherv1.ExternalWorkload) (ports []discoveryv1.EndpointPort, missing []string) {
	for _, sp := range svc.GetPorts() {
		proto := protocol(sp.GetProtocol())
		var num int32
		switch {
		case sp.GetTargetPortName() != "":
			for _, wp := range ew.GetPorts() {
				if wp.GetName() == sp.GetTargetPortName() && protocol(wp.GetProtocol()) == proto {
					num = wp.GetPort()
					break
				}
			}
			if num == 0 {
				missing = append(missing, sp.GetTargetPortName()+"/"+string(proto))
				continue
			}
		case sp.GetTargetPortNumber() != 0:
			num = sp.GetTargetPortNumber()
		default:
			num = sp.GetPort()
		}
		ep := discoveryv1.EndpointPort{Name: ptr(sp.GetName()), Protocol: ptr(proto), Port: ptr(num)}
		if sp.GetAppProtocol() != "" {
			ep.AppProtocol = ptr(sp.GetAppProtocol())
		}
		ports = append(ports, ep)
	}
	return ports, missing
}

func protocol(p string) corev1.Protocol {
	if p == "" {
		return corev1.ProtocolTCP
	}
	return corev1.Protocol(p)
}

// workloadEndpoint is the endpoint of one workload address. Conditions
// follow the workload's Ready condition; a workload being deleted is
// terminating and never ready, like a terminating Pod.
func workloadEndpoint(wm *watcherv1.ObjectMeta, ew *watcherv1.ExternalWorkload, addr string) discoveryv1.Endpoint {
	ready := WorkloadReady(ew)
	terminating := wm.GetDeletionTimestamp() != 0
	ep := discoveryv1.Endpoint{
		Addresses: []string{addr},
		Conditions: discoveryv1.EndpointConditions{
			Ready:       ptr(ready && !terminating),
			Serving:     ptr(ready),
			Terminating: ptr(terminating),
		},
		TargetRef: &corev1.ObjectReference{
			APIVersion: WorkloadAPIVersion,
			Kind:       WorkloadKind,
			Namespace:  wm.GetNamespace(),
			Name:       wm.GetName(),
			UID:        types.UID(wm.GetUid()),
		},
	}
	if z := wm.GetLabels()[corev1.LabelTopologyZone]; z != "" {
		ep.Zone = ptr(z)
	}
	return ep
}

// WorkloadReady reports whether the workload is ready: its Ready condition
// is True, or it has no Ready condition and no readiness probe (like a Pod
// without a readiness probe, a workload nobody checks is ready). A workload
// with a probe and no condition yet is not ready until the probe passes.
func WorkloadReady(ew *watcherv1.ExternalWorkload) bool {
	for _, c := range ew.GetConditions() {
		if c.GetType() == ConditionReady {
			return c.GetStatus() == string(metav1.ConditionTrue)
		}
	}
	return ew.GetReadinessProbe() == nil
}

// endpointKey identifies an endpoint across plans, as upstream's hash does:
// its addresses and target. Conditions and zone may change in place.
func endpointKey(ep *discoveryv1.Endpoint) string {
	addrs := slices.Clone(ep.Addresses)
	slices.Sort(addrs)
	var ns, name string
	if ep.TargetRef != nil {
		ns, name = ep.TargetRef.Namespace, ep.TargetRef.Name
	}
	return ns + "/" + name + "/" + strings.Join(addrs, ",")
}

// endpointEqual compares every field this controller writes and the stream
// carries back, so an unchanged endpoint never causes a write.
func endpointEqual(a, b *discoveryv1.Endpoint) bool {
	if !slices.Equal(a.Addresses, b.Addresses) ||
		boolOf(a.Conditions.Ready) != boolOf(b.Conditions.Ready) ||
		boolOf(a.Conditions.Serving) != boolOf(b.Conditions.Serving) ||
		boolOf(a.Conditions.Terminating) != boolOf(b.Conditions.Terminating) ||
		strOf(a.Zone) != strOf(b.Zone) || strOf(a.Hostname) != strOf(b.Hostname) ||
		(a.TargetRef == nil) != (b.TargetRef == nil) {
		return false
	}
	if a.TargetRef != nil {
		ra, rb := a.TargetRef, b.TargetRef
		if ra.Kind != rb.Kind || ra.Namespace != rb.Namespace || ra.Name != rb.Name || ra.UID != rb.UID {
			return false
		}
	}
	return true
}

// portKey identifies a port set regardless of order.
func portKey(ports []discoveryv1.EndpointPort) string {
	keys := make([]string, 0, len(ports))
	for _, p := range ports {
		keys = append(keys, fmt.Sprintf("%s/%s/%d/%s", strOf(p.Name), protocolOf(p.Protocol), int32Of(p.Port), strOf(p.AppProtocol)))
	}
	slices.Sort(keys)
	return strings.Join(keys, ";")
}

func protocolOf(p *corev1.Protocol) corev1.Protocol {
	if p == nil {
		return corev1.ProtocolTCP
	}
	return *p
}

// sliceLabels are the labels every slice of the Service carries: the
// Service's own labels (minus the reserved ones) plus ours, like upstream.
func sliceLabels(meta *watcherv1.ObjectMeta, svc *watcherv1.Service) map[string]string {
	out := map[string]string{}
	for k, v := range meta.GetLabels() {
		if isReservedLabel(k) {
			continue
		}
		out[k] = v
	}
	if !serviceIPSet(svc) {
		out[corev1.IsHeadlessService] = ""
	}
	out[discoveryv1.LabelServiceName] = meta.GetName()
	out[discoveryv1.LabelManagedBy] = ManagedBy
	return out
}

func isReservedLabel(k string) bool {
	return k == discoveryv1.LabelServiceName || k == discoveryv1.LabelManagedBy || k == corev1.IsHeadlessService
}

func serviceIPSet(svc *watcherv1.Service) bool {
	ips := svc.GetClusterIps()
	return len(ips) > 0 && ips[0] != "" && ips[0] != corev1.ClusterIPNone
}

func ownedBy(s *discoveryv1.EndpointSlice, uid string) bool {
	for _, o := range s.OwnerReferences {
		if o.Controller != nil && *o.Controller && o.Kind == "Service" && o.APIVersion == "v1" {
			return string(o.UID) == uid
		}
	}
	return false
}

// planning is the state of one Compute call.
type planning struct {
	meta    *watcherv1.ObjectMeta
	svc     *watcherv1.Service
	maxPer  int
	trigger time.Time
	taken   map[string]bool
	labels  map[string]string

	create, update, delete []*discoveryv1.EndpointSlice
}

func (p *planning) reconcileAddressType(at discoveryv1.AddressType, groups map[string]*group, existing []*discoveryv1.EndpointSlice) {
	existingByPorts := map[string][]*discoveryv1.EndpointSlice{}
	for _, s := range existing {
		k := portKey(s.Ports)
		existingByPorts[k] = append(existingByPorts[k], s)
	}
	for _, pk := range sortedKeys(groups) {
		p.reconcilePortSet(at, groups[pk], existingByPorts[pk])
	}
	// Port sets nobody serves any more.
	for _, pk := range sortedKeys(existingByPorts) {
		if _, ok := groups[pk]; !ok {
			p.delete = append(p.delete, existingByPorts[pk]...)
		}
	}
}

// reconcilePortSet is upstream's reconcileByPortMapping, deterministic.
func (p *planning) reconcilePortSet(at discoveryv1.AddressType, g *group, existing []*discoveryv1.EndpointSlice) {
	remaining := make(map[string]discoveryv1.Endpoint, len(g.endpoints))
	for k, ep := range g.endpoints {
		remaining[k] = ep
	}
	// 1. Keep desired endpoints where they are, refresh changed ones, drop
	//    the rest; fix labels.
	toUpdate, unchanged := p.keepInPlace(existing, remaining)

	left := sortedKeys(remaining)
	pop := func() discoveryv1.Endpoint {
		ep := remaining[left[0]]
		left = left[1:]
		return ep
	}

	// 2. Fill the slices that are written anyway, fullest first.
	if len(left) > 0 && len(toUpdate) > 0 {
		order := slices.Clone(toUpdate)
		slices.SortStableFunc(order, func(a, b *discoveryv1.EndpointSlice) int { return cmp.Compare(len(b.Endpoints), len(a.Endpoints)) })
		for _, s := range order {
			for len(left) > 0 && len(s.Endpoints) < p.maxPer {
				s.Endpoints = append(s.Endpoints, pop())
			}
		}
	}

	// 3. Put what is left into the unchanged slice it fits most closely, or
	//    into new slices.
	for len(left) > 0 {
		var fill *discoveryv1.EndpointSlice
		if len(left) < p.maxPer && len(unchanged) > 0 {
			if i := sliceToFill(unchanged, len(left), p.maxPer); i >= 0 {
				fill = unchanged[i].DeepCopy()
				fill.Labels = cloneMap(p.labels)
				unchanged = slices.Delete(unchanged, i, i+1)
				toUpdate = append(toUpdate, fill)
			}
		}
		if fill == nil {
			fill = p.newSlice(at, g.ports)
			p.create = append(p.create, fill)
		}
		for len(left) > 0 && len(fill.Endpoints) < p.maxPer {
			fill.Endpoints = append(fill.Endpoints, pop())
		}
	}
	for _, s := range toUpdate {
		p.stamp(s)
	}
	p.update = append(p.update, toUpdate...)
}

// keepInPlace is step 1 of reconcilePortSet: each existing slice keeps the
// endpoints of remaining it holds (refreshed), which leave remaining; a slice
// left with none is deleted, one that changed (or whose labels did) is
// updated, the others are unchanged.
func (p *planning) keepInPlace(existing []*discoveryv1.EndpointSlice, remaining map[string]discoveryv1.Endpoint) (toUpdate, unchanged []*discoveryv1.EndpointSlice) {
	for _, s := range existing {
		kept := make([]discoveryv1.Endpoint, 0, len(s.Endpoints))
		changed := false
		for i := range s.Endpoints {
			k := endpointKey(&s.Endpoints[i])
			want, ok := remaining[k]
			if !ok {
				changed = true // not desired, or a duplicate of one already placed
				continue
			}
			if !endpointEqual(&want, &s.Endpoints[i]) {
				changed = true
			}
			kept = append(kept, want)
			delete(remaining, k)
		}
		labelsChanged := !mapsEqual(s.Labels, p.labels)
		switch {
		case changed && len(kept) == 0:
			p.delete = append(p.delete, s)
		case changed || labelsChanged:
			c := s.DeepCopy()
			c.Endpoints = kept
			c.Labels = cloneMap(p.labels)
			toUpdate = append(toUpdate, c)
		default:
			unchanged = append(unchanged, s)
		}
	}
	return toUpdate, unchanged
}

// sliceToFill returns the index of the slice with the least room left after
// taking n more endpoints, or -1 when none has room (upstream getSliceToFill).
func sliceToFill(ss []*discoveryv1.EndpointSlice, n, maxPer int) int {
	best, bestDiff := -1, maxPer
	for i, s := range ss {
		diff := maxPer - (n + len(s.Endpoints))
		if diff >= 0 && diff < bestDiff {
			best, bestDiff = i, diff
			if diff == 0 {
				break
			}
		}
	}
	return best
}

// finalize turns a create plus a delete of the same address type into one
// update of the slice that would have been deleted, as upstream does.
func (p *planning) finalize() {
	for i := 0; i < len(p.delete) && len(p.create) > 0; {
		del := p.delete[i]
		last := p.create[len(p.create)-1]
		if del.AddressType != last.AddressType || !ownedBy(del, p.meta.GetUid()) {
			i++
			continue
		}
		c := del.DeepCopy()
		c.Labels = last.Labels
		c.Ports = last.Ports
		c.Endpoints = last.Endpoints
		p.stamp(c)
		p.create = p.create[:len(p.create)-1]
		p.update = append(p.update, c)
		p.delete = slices.Delete(p.delete, i, i+1)
	}
	for _, s := range p.create {
		p.stamp(s)
	}
}

func (p *planning) stamp(s *discoveryv1.EndpointSlice) {
	if p.trigger.IsZero() {
		delete(s.Annotations, corev1.EndpointsLastChangeTriggerTime)
		return
	}
	if s.Annotations == nil {
		s.Annotations = map[string]string{}
	}
	s.Annotations[corev1.EndpointsLastChangeTriggerTime] = p.trigger.UTC().Format(time.RFC3339Nano)
}

func (p *planning) newSlice(at discoveryv1.AddressType, ports []discoveryv1.EndpointPort) *discoveryv1.EndpointSlice {
	s := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{
			Name:      p.freeName(at, ports),
			Namespace: p.meta.GetNamespace(),
			Labels:    cloneMap(p.labels),
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion:         "v1",
				Kind:               "Service",
				Name:               p.meta.GetName(),
				UID:                types.UID(p.meta.GetUid()),
				Controller:         ptr(true),
				BlockOwnerDeletion: ptr(true),
			}},
		},
		AddressType: at,
		Ports:       slices.Clone(ports),
		Endpoints:   []discoveryv1.Endpoint{},
	}
	if s.Ports == nil {
		s.Ports = []discoveryv1.EndpointPort{}
	}
	return s
}

// freeName is "<service>-<hash of uid, address type, ports>-<n>" with the
// lowest n not taken. Deterministic names make a create issued from a stale
// view collide with the slice it missed (AlreadyExists) instead of adding a
// duplicate slice.
func (p *planning) freeName(at discoveryv1.AddressType, ports []discoveryv1.EndpointPort) string {
	prefix := p.meta.GetName()
	if len(prefix) > 40 {
		prefix = prefix[:40]
	}
	sum := sha256.Sum256([]byte(p.meta.GetUid() + "|" + string(at) + "|" + portKey(ports)))
	base := strings.TrimSuffix(prefix, "-") + "-" + hex.EncodeToString(sum[:4]) + "-"
	for n := 0; ; n++ {
		name := base + strconv.Itoa(n)
		if !p.taken[name] {
			p.taken[name] = true
			return name
		}
	}
}

func sortedKeys[K cmp.Ordered, V any](m map[K]V) []K {
	keys := make([]K, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

func mapsEqual(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if bv, ok := b[k]; !ok || bv != v {
			return false
		}
	}
	return true
}

func cloneMap(m map[string]string) map[string]string {
	out := make(map[string]string, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

func ptr[T any](v T) *T { return &v }

func boolOf(b *bool) bool { return b != nil && *b }

func strOf(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

func int32Of(i *int32) int32 {
	if i == nil {
		return 0
	}
	return *i
}
