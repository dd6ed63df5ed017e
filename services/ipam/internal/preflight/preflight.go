// Package preflight says, before an upgrade, which Services this version of
// ipam would treat differently from what their statuses and the ledger say
// now. It decides as a new leader does at its term start, with the
// leader's own code (preview.Decide: plan.Rebuild, then plan.Decide pass
// after pass), over the state read from the API server, and compares what
// the term would write with what is written. It writes nothing.
package preflight

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"github.com/ipledger/ipledger/pkg/stream/objkey"
	watcherv1 "github.com/ipledger/ipledger/proto/ipledger/watcher/v1"
	"github.com/ipledger/ipledger/services/ipam/internal/ledger"
	"github.com/ipledger/ipledger/services/ipam/internal/plan"
	"github.com/ipledger/ipledger/services/ipam/internal/preview"
)

// The changes of a Service's treatment (Change.Change), the first that
// applies.
const (
	// AddressMoved: the Service would lose an address it shows and get
	// another.
	AddressMoved = "AddressMoved"
	// AddressRemoved: the Service would lose an address it shows.
	AddressRemoved = "AddressRemoved"
	// AddressAdded: the Service would get an address (a pending Service, or
	// a family gained).
	AddressAdded = "AddressAdded"
	// Condition: the same addresses, another condition reason or status
	// (HeldOutsidePool, HeldSharedAcrossNamespaces, a refusal, …).
	Condition = "Condition"
	// Pool: the same addresses and condition, another
	// ipledger.io/allocated-from-pool.
	Pool = "Pool"
	// Ledger: the Service's status stays, the addresses the ledger records
	// for it change.
	Ledger = "Ledger"
	// LedgerReleased: the ledger records addresses for a Service that is
	// gone; they would be released.
	LedgerReleased = "LedgerReleased"
)

// Exit codes of the preflight command.
const (
	// ExitOK: no address would move or vanish (and, with --fail-on=any,
	// nothing would change).
	ExitOK = 0
	// ExitError: preflight could not decide (the API server could not be
	// read, or the ledger does not parse).
	ExitError = 1
	// ExitUsage: a flag or argument is wrong.
	ExitUsage = 2
	// ExitMoves: an address a Service shows would move or vanish.
	ExitMoves = 3
	// ExitChanges: with --fail-on=any, some Service's treatment would
	// change, though no address would move or vanish.
	ExitChanges = 4
)

// Change is one Service whose treatment would change.
type Change struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	UID       string `json:"uid,omitempty"`
	Change    string `json:"change"`
	// Moves: an address the Service's status shows would be taken from it.
	Moves        bool     `json:"moves"`
	IPsBefore    []string `json:"ipsBefore"`
	IPsAfter     []string `json:"ipsAfter"`
	ReasonBefore string   `json:"reasonBefore,omitempty"`
	ReasonAfter  string   `json:"reasonAfter,omitempty"`
	// MessageAfter is the condition message ipam would write.
	MessageAfter string   `json:"messageAfter,omitempty"`
	PoolBefore   string   `json:"poolBefore,omitempty"`
	PoolAfter    string   `json:"poolAfter,omitempty"`
	LedgerBefore []string `json:"ledgerBefore"`
	LedgerAfter  []string `json:"ledgerAfter"`
	// Why says it in a sentence.
	Why string `json:"why"`
}

// Report is what preflight found.
type Report struct {
	// Services is how many Services were examined; Ours how many of them
	// this ipam serves (its --lb-class, --require-lb-class).
	Services int `json:"services"`
	Ours     int `json:"ours"`
	// Changes are the Services whose treatment would change, by
	// namespace/name.
	Changes []Change `json:"changes"`
	// Rewrites counts the Services whose status would be written again with
	// the same treatment: a reworded condition message, a new
	// observedGeneration, a ledger entry restamped, the ingress reordered.
	Rewrites int `json:"rewrites"`
	// Conflicts are the IPConflict Events the term start would post.
	Conflicts []string `json:"conflicts,omitempty"`
	// Overruled are the ledger entries the statuses contradict, which the
	// term start would not obey (LedgerEntryOverruled).
	Overruled []string `json:"overruled,omitempty"`
	Summary   []string `json:"summary"`
	ExitCode  int      `json:"exitCode"`
}

// Moves reports whether any address a Service shows would move or vanish.
func (r *Report) Moves() bool {
	return slices.ContainsFunc(r.Changes, func(c Change) bool { return c.Moves })
}

// Check decides in as a new term would and compares. Ledger entries the
// statuses contradict (plan.Suspect) are overruled as the term start
// overrules them once the API server confirms them: in is read from the
// API server, so it has confirmed them already. in.Gone must list the
// Services the ledger names that do not exist (Read fills it).
func Check(in preview.Inputs) *Report {
	out := preview.Decide(in)
	var overruled []string
	if len(out.Suspects) > 0 {
		for _, s := range out.Suspects {
			in.Overruled = append(in.Overruled, s.Entry)
			overruled = append(overruled, fmt.Sprintf("%s given to %s, whose status does not show it, while %s shows it", s.Entry.IP, s.Entry.Service.Key(), s.Shows))
		}
		out = preview.Decide(in)
	}
	r := &Report{Services: len(in.Services), Overruled: overruled, Changes: []Change{}}
	for _, c := range out.Conflicts {
		r.Conflicts = append(r.Conflicts, fmt.Sprintf("%s: the %s names %s: %s", c.Service, c.Source, joinAddrs(c.IPs), c.Message))
	}
	ledgerBefore := map[string][]ledger.Allocation{}
	for _, a := range in.Ledger.Allocations {
		ledgerBefore[a.Service.Key()] = append(ledgerBefore[a.Service.Key()], a)
	}
	seen := map[string]bool{}
	for _, obj := range in.Services {
		k := objkey.Of(obj)
		seen[k] = true
		ours := in.Class.Serves(obj)
		if ours {
			r.Ours++
		}
		after, ok := out.Statuses[k]
		if !ok {
			after = plan.StatusOf(obj)
		}
		c, rewrite := compare(obj, ours, after, ips(ledgerBefore[k]), ips(out.Ledger[k]), out.Unfit[k])
		switch {
		case c != nil:
			r.Changes = append(r.Changes, *c)
		case rewrite:
			r.Rewrites++
		}
	}
	for k, entries := range ledgerBefore {
		if seen[k] || len(out.Ledger[k]) > 0 {
			continue
		}
		ns, name, _ := strings.Cut(k, "/")
		lb := ips(entries)
		r.Changes = append(r.Changes, Change{Namespace: ns, Name: name, UID: entries[0].Service.UID, Change: LedgerReleased,
			IPsBefore: []string{}, IPsAfter: []string{}, LedgerBefore: lb, LedgerAfter: []string{},
			Why: fmt.Sprintf("The Service is gone; the ledger still records %s for it, which would be released: kept for its namespace/name for its pool's grace period (--keep-released-addresses, spec.allocation.keepReleasedSeconds), then free.", strings.Join(lb, ", "))})
	}
	slices.SortFunc(r.Changes, func(a, b Change) int {
		return strings.Compare(a.Namespace+"/"+a.Name, b.Namespace+"/"+b.Name)
	})
	r.Summary = summary(r)
	return r
}

// compare says how one Service's treatment would change: c is nil when it
// would not, and then rewrite says whether its status or ledger entries
// would be written again all the same.
func compare(obj *watcherv1.Object, ours bool, after plan.Status, ledgerBefore, ledgerAfter []string, unfit string) (c *Change, rewrite bool) {
	before := plan.StatusOf(obj)
	c = &Change{
		Namespace: obj.GetMeta().GetNamespace(), Name: obj.GetMeta().GetName(), UID: obj.GetMeta().GetUid(),
		IPsBefore: orEmpty(before.Ingress), IPsAfter: orEmpty(after.Ingress),
		PoolBefore: before.Pool, PoolAfter: after.Pool, LedgerBefore: ledgerBefore, LedgerAfter: ledgerAfter,
	}
	var statusBefore, statusAfter string
	if before.Cond != nil {
		c.ReasonBefore, statusBefore = before.Cond.Reason, before.Cond.Status
	}
	if after.Cond != nil {
		c.ReasonAfter, statusAfter, c.MessageAfter = after.Cond.Reason, after.Cond.Status, after.Cond.Message
	}
	lost := minus(before.Ingress, after.Ingress)
	gained := minus(after.Ingress, before.Ingress)
	c.Moves = len(lost) > 0
	switch {
	case len(lost) > 0 && len(gained) > 0:
		c.Change = AddressMoved
	case len(lost) > 0:
		c.Change = AddressRemoved
	case len(gained) > 0:
		c.Change = AddressAdded
	case c.ReasonBefore != c.ReasonAfter || statusBefore != statusAfter:
		c.Change = Condition
	case before.Pool != after.Pool:
		c.Change = Pool
	case !slices.Equal(sorted(ledgerBefore), sorted(ledgerAfter)):
		c.Change = Ledger
	default:
		return nil, !before.Equal(after) || !slices.Equal(ledgerBefore, ledgerAfter)
	}
	c.Why = why(c, lost, gained, ours, statusAfter, unfit)
	return c, false
}

// why words a change: what happens to the addresses, then to the
// condition.
func why(c *Change, lost, gained []string, ours bool, statusAfter, unfit string) string {
	var parts []string
	switch {
	case len(lost) > 0 && len(gained) > 0:
		parts = append(parts, fmt.Sprintf("would lose %s and get %s", strings.Join(lost, ", "), strings.Join(gained, ", ")))
	case len(lost) > 0:
		parts = append(parts, fmt.Sprintf("would lose %s", strings.Join(lost, ", ")))
	case len(gained) > 0 && len(c.IPsBefore) == 0:
		parts = append(parts, fmt.Sprintf("pending now, would get %s", strings.Join(gained, ", ")))
	case len(gained) > 0:
		parts = append(parts, fmt.Sprintf("would also get %s", strings.Join(gained, ", ")))
	}
	if unfit != "" {
		parts = append(parts, "what it holds no longer fits it: "+unfit)
	}
	for _, f := range []string{"IPv4", "IPv6"} {
		had, has := hasFamily(c.IPsBefore, f), hasFamily(c.IPsAfter, f)
		switch {
		case had && !has:
			parts = append(parts, "no "+f+" address any more")
		case !had && has && len(c.IPsBefore) > 0:
			parts = append(parts, "gains an "+f+" address")
		}
	}
	switch {
	case !ours:
		parts = append(parts, "not served by this ipam (its spec.loadBalancerClass and --lb-class/--require-lb-class): its status is cleared and the ledger entry released")
	case c.ReasonBefore != c.ReasonAfter:
		r := c.ReasonAfter
		if r == "" {
			r = "no condition"
		}
		b := c.ReasonBefore
		if b == "" {
			b = "no condition"
		}
		parts = append(parts, fmt.Sprintf("condition %s -> %s (%s): %s", b, r, statusAfter, c.MessageAfter))
	case c.Change == Condition:
		parts = append(parts, fmt.Sprintf("condition status -> %s: %s", statusAfter, c.MessageAfter))
	case c.Change == Pool:
		parts = append(parts, fmt.Sprintf("allocated-from-pool %q -> %q", c.PoolBefore, c.PoolAfter))
	case c.Change == Ledger:
		parts = append(parts, fmt.Sprintf("the ledger would record %s instead of %s", listOrNone(c.LedgerAfter), listOrNone(c.LedgerBefore)))
	}
	s := strings.Join(parts, "; ")
	return strings.ToUpper(s[:1]) + s[1:] + "."
}

func summary(r *Report) []string {
	var moves, others int
	for _, c := range r.Changes {
		if c.Moves {
			moves++
		} else {
			others++
		}
	}
	out := []string{fmt.Sprintf("%d Services read, %d of them served by this ipam.", r.Services, r.Ours)}
	switch {
	case len(r.Changes) == 0:
		out = append(out, "No Service's treatment would change.")
	default:
		if moves > 0 {
			out = append(out, fmt.Sprintf("%d Services would lose an address they show now (moved or removed).", moves))
		}
		if others > 0 {
			out = append(out, fmt.Sprintf("%d other changes: addresses given, conditions or ledger entries changed; no address moves.", others))
		}
	}
	if r.Rewrites > 0 {
		out = append(out, fmt.Sprintf("%d Services would be written again with the same treatment (a reworded condition, observedGeneration, a ledger entry restamped, the ingress reordered to follow spec.ipFamilies).", r.Rewrites))
	}
	if n := len(r.Conflicts); n > 0 {
		out = append(out, fmt.Sprintf("%d conflicting claims would be reported (IPConflict).", n))
	}
	if n := len(r.Overruled); n > 0 {
		out = append(out, fmt.Sprintf("%d ledger entries contradict the statuses and would not be obeyed (LedgerEntryOverruled).", n))
	}
	return out
}

func ips(entries []ledger.Allocation) []string {
	out := []string{}
	for _, e := range entries {
		out = append(out, e.IP.String())
	}
	return out
}

func joinAddrs(ips []netip.Addr) string {
	s := make([]string, len(ips))
	for i, ip := range ips {
		s[i] = ip.String()
	}
	return strings.Join(s, ", ")
}

// minus is the elements of a not in b.
func minus(a, b []string) []string {
	var out []string
	for _, x := range a {
		if !slices.Contains(b, x) {
			out = append(out, x)
		}
	}
	return out
}

func sorted(s []string) []string {
	s = slices.Clone(s)
	slices.Sort(s)
	return s
}

func orEmpty(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

func listOrNone(s []string) string {
	if len(s) == 0 {
		return "nothing"
	}
	return strings.Join(s, ", ")
}

func hasFamily(ips []string, family string) bool {
	return slices.ContainsFunc(ips, func(s string) bool {
		ip, err := netip.ParseAddr(s)
		return err == nil && (ip.Is4() == (family == "IPv4"))
	})
}
