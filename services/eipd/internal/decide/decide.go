// Package decide owns eipd's choices, free of any client: which Elastic IP a
// Node gets (its own by tag, else the orphan most referenced by Pods, else a
// new one), which duplicates are released, which actions destroy something
// and must first be confirmed against the live Node, and how a Node's
// providerID names its EC2 instance. The controller gathers the inputs and
// carries out the plan.
package decide

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"
)

// Tag keys eipd puts on every Elastic IP it manages.
const (
	TagManaged     = "ipledger.io/managed"
	TagCluster     = "ipledger.io/cluster"
	TagNode        = "ipledger.io/node"
	TagAllocatedAt = "ipledger.io/allocated-at"
)

// Address is one managed Elastic IP as EC2 reports it.
type Address struct {
	AllocationID string
	PublicIP     string
	// AssociationID is empty when the address is not associated.
	AssociationID      string
	InstanceID         string
	NetworkInterfaceID string
	PrivateIP          string
	// Node is the value of the ipledger.io/node tag: empty for an orphan.
	Node string
	// AllocatedAt comes from the ipledger.io/allocated-at tag; zero when
	// unknown (an address allocated by hand and adopted).
	AllocatedAt time.Time
}

// Associated reports whether the address is associated with anything.
func (a Address) Associated() bool { return a.AssociationID != "" }

// Target is where a Node's Elastic IP must be associated: the primary private
// IP of the primary network interface (device index 0) of its instance.
type Target struct {
	InstanceID         string
	NetworkInterfaceID string
	PrivateIP          string
}

// AssociatedWith reports whether a is associated with exactly t.
func (a Address) AssociatedWith(t Target) bool {
	return a.Associated() && t.NetworkInterfaceID != "" &&
		a.NetworkInterfaceID == t.NetworkInterfaceID && a.PrivateIP == t.PrivateIP
}

// Action says how a Node gets its Elastic IP.
type Action int

const (
	// UseTagged keeps the address already tagged for the Node.
	UseTagged Action = iota + 1
	// ClaimOrphan tags an orphan for the Node.
	ClaimOrphan
	// Allocate allocates a new address tagged for the Node.
	Allocate
)

func (a Action) String() string {
	switch a {
	case UseTagged:
		return "UseTagged"
	case ClaimOrphan:
		return "ClaimOrphan"
	case Allocate:
		return "Allocate"
	}
	return fmt.Sprintf("Action(%d)", int(a))
}

// Input is everything Choose looks at for one Node.
type Input struct {
	Node string
	// Target is where the Node's address must be associated; its fields may
	// be empty when the instance is unknown (it only ranks duplicates).
	Target Target
	// CurrentAllocationID is the allocation the Node's annotation names: the
	// one its label already publishes, preferred among duplicates.
	CurrentAllocationID string
	// Addresses are every managed address of the cluster.
	Addresses []Address
	// PodRefs counts, per public IP, the Pods labelled ipledger.io/externalip=<ip>.
	PodRefs map[string]int
	// Unavailable are allocation IDs that must not be claimed: orphans another
	// Node is about to take, or addresses being released.
	Unavailable map[string]bool
}

// Plan is what Choose decided for one Node.
type Plan struct {
	Action Action
	// Address is the address to use (UseTagged) or claim (ClaimOrphan).
	Address Address
	// Release are further addresses tagged for the Node: duplicates.
	Release []Address
}

// Choose decides which Elastic IP a Node gets. Among the addresses tagged for
// the Node it keeps one and returns the others as duplicates; with none, it
// picks the orphan (managed, untagged for any Node, unassociated) most
// referenced by Pods; with no orphan, it asks for an allocation. Every tie is
// broken deterministically, so two replicas (or two passes) agree.
func Choose(in Input) Plan {
	var tagged, orphans []Address
	for _, a := range in.Addresses {
		switch {
		case a.Node == in.Node:
			tagged = append(tagged, a)
		case a.Node == "" && !a.Associated() && !in.Unavailable[a.AllocationID]:
			orphans = append(orphans, a)
		}
	}
	if len(tagged) > 0 {
		slices.SortFunc(tagged, func(x, y Address) int { return keepOrder(in, x, y) })
		return Plan{Action: UseTagged, Address: tagged[0], Release: tagged[1:]}
	}
	if len(orphans) > 0 {
		best := slices.MinFunc(orphans, func(x, y Address) int {
			return cmp.Or(
				cmp.Compare(in.PodRefs[y.PublicIP], in.PodRefs[x.PublicIP]),
				strings.Compare(x.AllocationID, y.AllocationID),
			)
		})
		return Plan{Action: ClaimOrphan, Address: best}
	}
	return Plan{Action: Allocate}
}

// keepOrder ranks the addresses tagged for one Node, the one to keep first:
// associated with the Node's target, then associated at all, then the one the
// Node already publishes, then the oldest, then the smallest allocation ID.
func keepOrder(in Input, x, y Address) int {
	return cmp.Or(
		boolFirst(x.AssociatedWith(in.Target), y.AssociatedWith(in.Target)),
		boolFirst(x.Associated(), y.Associated()),
		boolFirst(in.CurrentAllocationID != "" && x.AllocationID == in.CurrentAllocationID,
			in.CurrentAllocationID != "" && y.AllocationID == in.CurrentAllocationID),
		x.AllocatedAt.Compare(y.AllocatedAt),
		strings.Compare(x.AllocationID, y.AllocationID),
	)
}

func boolFirst(x, y bool) int {
	switch {
	case x == y:
		return 0
	case x:
		return -1
	default:
		return 1
	}
}

// Intent is what a sync, deciding from the watcher's view, is about to do
// to one Node's addresses.
type Intent struct {
	// GiveBack: the view says the Node is gone or no longer wants an address.
	GiveBack bool
	// Tagged counts the addresses tagged for the Node.
	Tagged int
	// Published: the Node (as the view shows it) carries an address in its
	// label or annotation.
	Published bool
	// Duplicates counts the addresses the plan releases while the Node
	// keeps one.
	Duplicates int
}

// Destroys reports whether carrying out the intent disassociates, releases
// or untags an address, or clears the Node's published address: what a
// stale view must never cause, since a released public address is gone for
// good. The controller confirms such an intent against the live Node (read
// from the API server just before the EC2 calls) and acts on that instead.
func (i Intent) Destroys() bool {
	if i.GiveBack {
		return i.Tagged > 0 || i.Published
	}
	return i.Duplicates > 0
}

// Stale returns the addresses tagged for Nodes that should have none (not in
// want), sorted by Node then allocation ID: what a sweep must give back.
func Stale(addrs []Address, want func(node string) bool) []Address {
	var out []Address
	for _, a := range addrs {
		if a.Node != "" && !want(a.Node) {
			out = append(out, a)
		}
	}
	slices.SortFunc(out, func(x, y Address) int {
		return cmp.Or(strings.Compare(x.Node, y.Node), strings.Compare(x.AllocationID, y.AllocationID))
	})
	return out
}

// InstanceID returns the EC2 instance named by a Node's spec.providerID:
// "aws:///us-east-1a/i-0123" (zone optional: "aws:///i-0123", "aws://i-0123").
func InstanceID(providerID string) (string, error) {
	rest, ok := strings.CutPrefix(providerID, "aws://")
	if !ok {
		return "", fmt.Errorf("providerID %q is not an AWS one (want aws:///<zone>/<instance-id>)", providerID)
	}
	rest = strings.TrimPrefix(rest, "/")
	parts := strings.Split(rest, "/")
	if len(parts) > 2 {
		return "", fmt.Errorf("providerID %q has too many path segments (want aws:///<zone>/<instance-id>)", providerID)
	}
	id := parts[len(parts)-1]
	if len(id) < 3 || !strings.HasPrefix(id, "i-") {
		return "", fmt.Errorf("providerID %q does not end in an instance ID i-…", providerID)
	}
	for _, r := range id[2:] {
		if !(r >= '0' && r <= '9' || r >= 'a' && r <= 'f') {
			return "", fmt.Errorf("providerID %q has an invalid instance ID %q", providerID, id)
		}
	}
	return id, nil
}
