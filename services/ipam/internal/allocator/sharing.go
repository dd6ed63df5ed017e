package allocator

import (
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"time"
)

// Who may hold an address beside whom (usable, shareProblem), and what a
// Service may learn of holders in other namespaces.

// AcrossMessage says what a Service holding addresses shared across
// namespaces without opt-in (Result.Across) should know and do.
func AcrossMessage(ips []netip.Addr) string {
	return fmt.Sprintf("a Service in another namespace also holds %s under the same %s, shared before ipledger kept sharing within a namespace; "+
		"both keep it, and no other Service may join. To go on sharing, list each other's namespace in %s on both Services; "+
		"to stop, change %s on one of them (it then gets another address)",
		addrList(ips), AnnotationAllowSharedIP, AnnotationSharingCrossNamespace, AnnotationAllowSharedIP)
}

// admits reports whether sh lets a Service of namespace ns share.
func (sh *Sharing) admits(ns string) bool {
	return slices.Contains(sh.CrossNamespace, ns) || slices.Contains(sh.CrossNamespace, "*")
}

// sharedOf is the sharing info kept for a holder: a copy of sh, or nil
// without a key, when the IP is exclusive and nothing else of sh is ever
// read (shareProblem). Most Services share nothing.
func sharedOf(sh Sharing) *Sharing {
	if sh.Key == "" {
		return nil
	}
	sh.Ports = slices.Clone(sh.Ports)
	sh.Selector = maps.Clone(sh.Selector)
	sh.CrossNamespace = slices.Clone(sh.CrossNamespace)
	return &sh
}

// usable says whether service, counted against namespace tenant
// (Request.tenant), may hold ip next to its current holders and
// reservation; nil when it may. held: the Service holds ip already (Assign
// restores it, planHeld checks it), so a share across namespaces from
// before sharing was kept within a namespace is kept (KeptAcross says so).
//
// The message is for the Service's own namespace to read (its condition and
// Events): a holder, requester or reservation of another namespace is never
// named, nor its sharing key or a reservation's note. Holders and Detail say
// it all, for operators (ExplainService, logs).
func (a *Allocator) usable(ip netip.Addr, service, tenant string, sh Sharing, held bool) *Error {
	st := a.idx.ips[ip]
	if st == nil {
		return nil
	}
	ns := namespaceOf(service)
	// keptForShare: kept under the request's sharing key for its namespace,
	// or kept for any Service of the requester's tenant (keptInTenant); a
	// grant ends the reservation, and whoever holds the address meanwhile
	// (its own Service, back from its status) must still allow it: the
	// holders are checked below like any other's.
	keptForShare := false
	if r := st.reservation; r != nil && r.Kept && r.ForService != service && !held {
		keptForShare = sh.Key != "" && r.SharingKey == sh.Key && namespaceOf(r.ForService) == ns || keptInTenant(*r, tenant)
	}
	if r := st.reservation; r != nil && r.Kept && r.ForService != service && !keptForShare {
		return &Error{Reason: ReasonRequestedIPInUse,
			Message: fmt.Sprintf("%s is kept for %s, which released it, until %s; request another IP, or ask an operator to release it (kubectl ipledger release %s)",
				ip, serviceNames([]string{r.ForService}, ns), a.KeptUntil(*r).UTC().Format(time.RFC3339), ip),
			Detail: fmt.Sprintf("kept for %q since %s", r.ForService, r.CreatedAt.UTC().Format(time.RFC3339))}
	}
	if r := st.reservation; r != nil && r.ForService != service && !keptForShare {
		msg := fmt.Sprintf("%s is reserved by an operator", ip)
		if r.ForService != "" && namespaceOf(r.ForService) == ns {
			msg = fmt.Sprintf("%s is reserved for Service %s", ip, r.ForService)
		}
		return &Error{Reason: ReasonRequestedIPInUse, Message: msg + "; request another IP, or ask an operator to release the reservation",
			Detail: fmt.Sprintf("reservation %q for %q", r.Note, r.ForService)}
	}
	if others := without(a.idx.foreignAt[ip], service); len(others) > 0 {
		return &Error{
			Reason: ReasonRequestedIPInUse,
			Message: fmt.Sprintf("%s is in the status of %s, which ipam does not serve: another controller (MetalLB, the cloud provider) gave it out; "+
				"ipam hands it to nobody while that status shows it. Request another IP, or free it there first", ip, serviceNames(others, ns)),
			Holders: others,
			Detail:  "shown by " + strings.Join(others, ", "),
		}
	}
	var why []string
	var holders []string
	for _, h := range st.holders {
		if h.service == service {
			continue
		}
		w, keptAcross := shareProblem(h, service, sh)
		if w == "" || keptAcross && held {
			continue
		}
		if !slices.Contains(why, w) {
			why = append(why, w)
		}
		holders = append(holders, h.service)
	}
	if len(why) == 0 {
		return nil
	}
	return &Error{
		Reason:  ReasonRequestedIPInUse,
		Message: fmt.Sprintf("%s is in use: %s", ip, strings.Join(why, "; ")),
		Holders: holders,
		Detail:  "held by " + strings.Join(holders, ", "),
	}
}

// shareProblem says why service, with sharing sh, may not share an IP with
// holder h; "" when it may. Services of different namespaces share only
// when each admits the other's namespace (Sharing.CrossNamespace); until
// then the requester learns only that a Service of another namespace holds
// the IP — not which, not its key, not whether its key is the same.
// keptAcross: they would share but for that rule — a share made before the
// rule, which a Service already holding the IP keeps.
func shareProblem(h holder, service string, sh Sharing) (why string, keptAcross bool) {
	ns, hns := namespaceOf(service), namespaceOf(h.service)
	name := "Service " + h.service
	if ns != hns {
		mutual := h.shared != nil && h.shared.Key == sh.Key && h.shared.admits(ns) && sh.admits(hns)
		if !mutual {
			// One text whatever the holder's key: a different one would
			// tell the requester that it guessed the key.
			keptAcross = h.key() != "" && h.key() == sh.Key && sharesWithin(*h.shared, sh) == ""
			return HeldInAnotherNamespace, keptAcross
		}
		// Both owners agreed to share: the usual rules apply, and the
		// holder may be named to the namespace it admitted.
	}
	switch {
	case h.key() == "":
		return fmt.Sprintf("held by %s, which does not share it (no %s)", name, AnnotationAllowSharedIP), false
	case sh.Key == "":
		return fmt.Sprintf("held by %s; to share it set %s=%q on this Service too", name, AnnotationAllowSharedIP, h.key()), false
	case sh.Key != h.key():
		return fmt.Sprintf("held by %s with sharing key %q, this Service has %q", name, h.key(), sh.Key), false
	}
	if w := sharesWithin(*h.shared, sh); w != "" {
		return fmt.Sprintf("held by %s%s", name, w), false
	}
	return "", false
}

// HeldInAnotherNamespace is all a Service learns of an address that a
// Service of another namespace holds, unless both agreed to share it.
const HeldInAnotherNamespace = "held by a Service in another namespace; request another IP " +
	"(Services of different namespaces share an address only when both set the same " + AnnotationAllowSharedIP +
	" and each lists the other's namespace in " + AnnotationSharingCrossNamespace + ")"

// sharesWithin checks the rules two Services of one sharing key follow:
// no common (protocol, port), one externalTrafficPolicy, and with Local the
// same Pods; "" when they may share.
func sharesWithin(h, sh Sharing) string {
	for _, p := range sh.Ports {
		for _, q := range h.Ports {
			if p.Port == q.Port && protocol(p.Protocol) == protocol(q.Protocol) {
				return fmt.Sprintf(", which also uses %s/%d", protocol(p.Protocol), p.Port)
			}
		}
	}
	switch {
	case sh.Local != h.Local:
		return "; Services sharing an IP must use the same externalTrafficPolicy"
	case sh.Local && !maps.Equal(sh.Selector, h.Selector):
		return " with a different selector; with externalTrafficPolicy Local, Services sharing an IP must select the same Pods"
	}
	return ""
}

// ServiceNames names services to the owner of Service reader (its
// condition, its Events): Services of its namespace by name, the others
// only as "a Service in another namespace".
func ServiceNames(reader string, services ...string) string {
	return serviceNames(services, namespaceOf(reader))
}

// serviceNames names services to a reader in namespace ns: those of ns by
// name, the others only as "a Service in another namespace".
func serviceNames(services []string, ns string) string {
	var out []string
	others := false
	for _, s := range services {
		if namespaceOf(s) == ns {
			out = append(out, "Service "+s)
		} else {
			others = true
		}
	}
	if others {
		out = append(out, "a Service in another namespace")
	}
	return strings.Join(out, ", ")
}

func protocol(p string) string {
	if p == "" {
		return "TCP"
	}
	return p
}
