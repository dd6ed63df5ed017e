// Package expect remembers what eipd has just done to EC2 until EC2 shows it.
//
// DescribeAddresses is eventually consistent: an address allocated or tagged a
// moment ago may be missing from it, and one released a moment ago may still
// be listed. A controller that trusts such a view allocates a second address
// for the same Node (kubestatic's duplicate ExternalIPs came from exactly this
// kind of stale view). Expectations overlay what we know we did on top of what
// EC2 says, until EC2 agrees or a deadline passes. They live for one
// leadership term: a new leader starts empty and relies on tags, which is safe
// because every allocation carries the Node's tag from its first moment.
package expect

import (
	"slices"
	"sync"
	"time"

	"github.com/ipledger/ipledger/services/eipd/internal/decide"
)

// Expectations is safe for concurrent use.
type Expectations struct {
	ttl time.Duration
	now func() time.Time

	mu    sync.Mutex
	nodes map[string]nodeExpectation
	gone  map[string]time.Time // allocation ID released -> when
	freed map[string]time.Time // allocation ID disassociated and untagged -> when
}

type nodeExpectation struct {
	// allocationID is empty when an AllocateAddress had an unknown outcome:
	// it may have created an address that is not visible yet.
	allocationID string
	publicIP     string
	at           time.Time
}

// New returns empty expectations that give EC2 ttl to show each change.
func New(ttl time.Duration, now func() time.Time) *Expectations {
	if now == nil {
		now = time.Now
	}
	return &Expectations{ttl: ttl, now: now, nodes: map[string]nodeExpectation{}, gone: map[string]time.Time{}, freed: map[string]time.Time{}}
}

// Allocated records that an address was allocated (tagged for node).
func (e *Expectations) Allocated(node, allocationID, publicIP string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.nodes[node] = nodeExpectation{allocationID: allocationID, publicIP: publicIP, at: e.now()}
}

// Uncertain records that an AllocateAddress for node failed in a way that
// may still have created an address (a timeout, a dropped response).
func (e *Expectations) Uncertain(node string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.nodes[node] = nodeExpectation{at: e.now()}
}

// Claim records that node is about to tag the orphan allocationID. It
// returns false, recording nothing, when another Node has a pending claim
// or allocation on the same address.
func (e *Expectations) Claim(node, allocationID, publicIP string) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	for n, x := range e.nodes {
		if n != node && x.allocationID == allocationID && e.now().Sub(x.at) < e.ttl {
			return false
		}
	}
	e.nodes[node] = nodeExpectation{allocationID: allocationID, publicIP: publicIP, at: e.now()}
	return true
}

// Released records that allocationID was released: it is hidden from views
// until EC2 stops listing it.
func (e *Expectations) Released(allocationID string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.gone[allocationID] = e.now()
	for n, x := range e.nodes {
		if x.allocationID == allocationID {
			delete(e.nodes, n)
		}
	}
}

// Orphaned records that allocationID was disassociated and its Node tag
// removed (kept for reuse): views show it as an orphan until EC2 agrees.
func (e *Expectations) Orphaned(allocationID string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.freed[allocationID] = e.now()
	for n, x := range e.nodes {
		if x.allocationID == allocationID {
			delete(e.nodes, n)
		}
	}
}

// Forget drops node's expectation (its claim failed, or the Node is gone).
func (e *Expectations) Forget(node string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	delete(e.nodes, node)
}

// Apply overlays the expectations on a DescribeAddresses view and returns
// the corrected view and the Nodes whose outcome is not visible yet (their
// syncs must wait rather than allocate). Expectations EC2 now shows, and
// expired ones, are dropped.
func (e *Expectations) Apply(view []decide.Address) (out []decide.Address, waiting map[string]bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	now := e.now()
	byID := make(map[string]int, len(view))
	taggedFor := map[string]bool{}
	out = make([]decide.Address, 0, len(view))
	for _, a := range view {
		if at, ok := e.gone[a.AllocationID]; ok {
			if now.Sub(at) < e.ttl {
				continue
			}
			delete(e.gone, a.AllocationID)
		}
		if at, ok := e.freed[a.AllocationID]; ok {
			switch {
			case a.Node == "" && !a.Associated(), now.Sub(at) >= e.ttl:
				delete(e.freed, a.AllocationID)
			default:
				a.Node, a.AssociationID, a.InstanceID, a.NetworkInterfaceID, a.PrivateIP = "", "", "", "", ""
			}
		}
		byID[a.AllocationID] = len(out)
		out = append(out, a)
		if a.Node != "" {
			taggedFor[a.Node] = true
		}
	}
	// Addresses released and no longer listed need no more hiding.
	for id := range e.gone {
		if !slices.ContainsFunc(view, func(a decide.Address) bool { return a.AllocationID == id }) {
			delete(e.gone, id)
		}
	}
	waiting = map[string]bool{}
	for node, x := range e.nodes {
		expired := now.Sub(x.at) >= e.ttl
		if x.allocationID == "" {
			switch {
			case taggedFor[node], expired:
				delete(e.nodes, node)
			default:
				waiting[node] = true
			}
			continue
		}
		i, listed := byID[x.allocationID]
		switch {
		case listed && out[i].Node == node:
			delete(e.nodes, node) // EC2 caught up
		case expired:
			delete(e.nodes, node)
		case listed:
			out[i].Node = node // tagged, but the tag is not visible yet
		default:
			out = append(out, decide.Address{AllocationID: x.allocationID, PublicIP: x.publicIP, Node: node, AllocatedAt: x.at})
		}
	}
	return out, waiting
}

// Len returns how many expectations are pending (for tests and metrics).
func (e *Expectations) Len() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return len(e.nodes) + len(e.gone) + len(e.freed)
}
