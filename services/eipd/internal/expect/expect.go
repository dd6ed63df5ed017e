// Package expect remembers what eipd has just done to EC2 until EC2 shows it.
//
// DescribeAddresses is eventually consistent: an address allocated or tagged a
// moment ago may be missing from it, and one released a moment ago may still
// be listed. A controller that trusts such a view allocates a second address
// for the same Node (kubestatic's duplicate ExternalIPs came from exactly this
// kind of stale view). Expectations overlay what we know we did on top of what
// EC2 says, until EC2 agrees or a deadline passes (--ec2-consistency-timeout).
// They live for one leadership term: a new leader starts empty and relies on
// tags, which is safe because every allocation carries the Node's tag from its
// first moment.
//
// The writes and their deadlines are pkg/expect Sets, as ipam's and
// endpoints' are; this package says what EC2 showing a change means, and
// how a change EC2 does not show yet corrects the view.
package expect

import (
	"sync"
	"time"

	pkgexpect "github.com/ipledger/ipledger/pkg/expect"
	"github.com/ipledger/ipledger/services/eipd/internal/decide"
)

// Expectations is safe for concurrent use.
type Expectations struct {
	now func() time.Time

	mu    sync.Mutex
	nodes *pkgexpect.Set[string, nodeExpectation]
	gone  *pkgexpect.Set[string, struct{}] // allocation IDs released
	freed *pkgexpect.Set[string, struct{}] // allocation IDs disassociated and untagged
}

type nodeExpectation struct {
	// allocationID is empty when an AllocateAddress had an unknown outcome:
	// it may have created an address that is not visible yet.
	allocationID string
	publicIP     string
	at           time.Time // when it was allocated or claimed
}

// New returns empty expectations that give EC2 ttl to show each change.
func New(ttl time.Duration, now func() time.Time) *Expectations {
	if now == nil {
		now = time.Now
	}
	return &Expectations{now: now,
		nodes: pkgexpect.New[string, nodeExpectation](ttl, now),
		gone:  pkgexpect.New[string, struct{}](ttl, now),
		freed: pkgexpect.New[string, struct{}](ttl, now)}
}

// Allocated records that an address was allocated (tagged for node).
func (e *Expectations) Allocated(node, allocationID, publicIP string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.nodes.Wrote(node, nodeExpectation{allocationID: allocationID, publicIP: publicIP, at: e.now()})
}

// Uncertain records that an AllocateAddress for node failed in a way that
// may still have created an address (a timeout, a dropped response).
func (e *Expectations) Uncertain(node string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.nodes.Wrote(node, nodeExpectation{at: e.now()})
}

// Claim records that node is about to tag the orphan allocationID. It
// returns false, recording nothing, when another Node has a pending claim
// or allocation on the same address.
func (e *Expectations) Claim(node, allocationID, publicIP string) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	for n, x := range e.nodes.All() {
		if n != node && x.allocationID == allocationID && !e.nodes.Expired(n) {
			return false
		}
	}
	e.nodes.Wrote(node, nodeExpectation{allocationID: allocationID, publicIP: publicIP, at: e.now()})
	return true
}

// Released records that allocationID was released: it is hidden from views
// until EC2 stops listing it.
func (e *Expectations) Released(allocationID string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.gone.Wrote(allocationID, struct{}{})
	e.forgetNodesOf(allocationID)
}

// Orphaned records that allocationID was disassociated and its Node tag
// removed (kept for reuse): views show it as an orphan until EC2 agrees.
func (e *Expectations) Orphaned(allocationID string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.freed.Wrote(allocationID, struct{}{})
	e.forgetNodesOf(allocationID)
}

func (e *Expectations) forgetNodesOf(allocationID string) {
	for n, x := range e.nodes.All() {
		if x.allocationID == allocationID {
			e.nodes.Forget(n)
		}
	}
}

// Forget drops node's expectation (its claim failed, or the Node is gone).
func (e *Expectations) Forget(node string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.nodes.Forget(node)
}

// behindUnless is the pkgexpect.Seen of a change EC2 shows when shown holds.
func behindUnless(shown bool) pkgexpect.Seen {
	if shown {
		return pkgexpect.Done
	}
	return pkgexpect.Behind
}

// shownUnless is the pkgexpect.Seen of a write EC2 shows when shown holds,
// kept until its deadline for the views older than this one.
func shownUnless(shown bool) pkgexpect.Seen {
	if shown {
		return pkgexpect.Shown
	}
	return pkgexpect.Behind
}

// Apply overlays the expectations on a DescribeAddresses view and returns
// the corrected view and the Nodes whose outcome is not visible yet (their
// syncs must wait rather than allocate). Expired expectations are dropped,
// and those EC2 now shows, but for claims and allocations: those last
// their deadline, whatever order the views come in.
func (e *Expectations) Apply(view []decide.Address) (out []decide.Address, waiting map[string]bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	listed := make(map[string]bool, len(view))
	for _, a := range view {
		listed[a.AllocationID] = true
	}
	// Released addresses are hidden while EC2 still lists them; those no
	// longer listed need no more hiding.
	hidden := map[string]bool{}
	for id := range e.gone.All() {
		if _, behind := e.gone.Check(id, func(struct{}) pkgexpect.Seen { return behindUnless(!listed[id]) }); behind {
			hidden[id] = true
		}
	}
	byID := make(map[string]int, len(view))
	taggedFor := map[string]bool{}
	out = make([]decide.Address, 0, len(view))
	for _, a := range view {
		if hidden[a.AllocationID] {
			continue
		}
		orphan := a.Node == "" && !a.Associated()
		if _, behind := e.freed.Check(a.AllocationID, func(struct{}) pkgexpect.Seen { return behindUnless(orphan) }); behind {
			a.Node, a.AssociationID, a.InstanceID, a.NetworkInterfaceID, a.PrivateIP = "", "", "", "", ""
		}
		byID[a.AllocationID] = len(out)
		out = append(out, a)
		if a.Node != "" {
			taggedFor[a.Node] = true
		}
	}
	waiting = map[string]bool{}
	for node, x := range e.nodes.All() {
		if x.allocationID == "" {
			// Uncertain: EC2 shows it once an address tagged for node is listed.
			if _, behind := e.nodes.Check(node, func(nodeExpectation) pkgexpect.Seen { return behindUnless(taggedFor[node]) }); behind {
				waiting[node] = true
			}
			continue
		}
		// A claim or allocation EC2 shows is kept (Shown) until its
		// deadline: a view served before the tag, applied after this one
		// (another Node's sync, a describe retried through throttling),
		// would otherwise offer the address to a second Node, and CreateTags
		// is not conditional.
		i, isListed := byID[x.allocationID]
		if _, behind := e.nodes.Check(node, func(nodeExpectation) pkgexpect.Seen { return shownUnless(isListed && out[i].Node == node) }); !behind {
			continue // EC2 shows it, or it expired
		}
		if isListed {
			out[i].Node = node // tagged, but the tag is not visible yet
		} else {
			out = append(out, decide.Address{AllocationID: x.allocationID, PublicIP: x.publicIP, Node: node, AllocatedAt: x.at})
		}
	}
	return out, waiting
}

// Len returns how many expectations are pending (for tests and metrics).
func (e *Expectations) Len() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.nodes.Len() + e.gone.Len() + e.freed.Len()
}
